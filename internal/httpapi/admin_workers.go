package httpapi

import (
	"context"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/httpops"
)

func (s *Server) previewEviction(ctx context.Context, r *Request, in *struct{}) (*api.EvictionOutput, error) {
	return s.runEvictionNow(ctx, r, false)
}

func (s *Server) runEviction(ctx context.Context, r *Request, in *struct{}) (*api.EvictionOutput, error) {
	return s.runEvictionNow(ctx, r, true)
}

func (s *Server) runConsolidation(ctx context.Context, r *Request, in *api.ConsolidationInput) (*api.ConsolidationOutput, error) {
	var tasks []string
	if in.Body != nil {
		tasks = in.Body.Tasks
	}
	tasks, err := consolidation.ValidTasks(tasks)
	if err != nil {
		return nil, err
	}
	rep, after, err := s.Consolidator.RunTx(ctx, r.Tx, r.Org, tasks)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(after)
	return &api.ConsolidationOutput{Body: rep}, nil
}

// runEvictionNow evaluates (and with apply, applies) the org's eviction policy in the
// request's transaction; what must follow the commit (Redis deletions) runs after it.
func (s *Server) runEvictionNow(ctx context.Context, r *Request, apply bool) (*api.EvictionOutput, error) {
	p := r.Caller
	rep, after, err := s.Evictor.Run(ctx, r.Tx, p.OrgID, apply, eviction.Actor{KeyID: p.KeyID, Role: string(p.Role), RequestID: httpops.RequestID(ctx)})
	if err != nil {
		return nil, err
	}
	r.AfterCommit(func() { after(context.WithoutCancel(ctx)) })
	return &api.EvictionOutput{Body: rep}, nil
}
