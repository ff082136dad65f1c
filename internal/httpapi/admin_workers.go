package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/eviction"
)

type evictionOutput struct {
	Body eviction.EvictionReport
}

type consolidationInput struct {
	Body *struct {
		Tasks []string `json:"tasks,omitempty" maxItems:"4" doc:"Any of job_summaries, compaction, merge, promotion (default all, in that order)."`
	}
}

type consolidationOutput struct {
	Body consolidation.ConsolidationReport
}

var opPreviewEviction = huma.Operation{
	OperationID: "preview-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/preview", Tags: []string{"admin"},
	Summary: "What eviction would remove now (changes nothing)",
	Description: "Evaluates the org's policy now and answers, per tier, reason and memory kind, how many items a run " +
		"would remove and up to 10 of their ids. POST /v1/admin/eviction/run at the same moment removes exactly these.",
}

func (s *Server) previewEviction(ctx context.Context, r *Request, in *struct{}) (*evictionOutput, error) {
	return s.runEvictionNow(ctx, r, false)
}

var opRunEviction = huma.Operation{
	OperationID: "run-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/run", Tags: []string{"admin"},
	Summary: "Apply the eviction policy now",
	Description: "Removes what the preview reports (up to 5000 items per rule per call; `more: true` says a rule has " +
		"more) and writes one audit record per rule (action evict: ids, policy, reason, counts; never content). " +
		"The periodic job does the same every STRATA_EVICTION_INTERVAL.",
}

func (s *Server) runEviction(ctx context.Context, r *Request, in *struct{}) (*evictionOutput, error) {
	return s.runEvictionNow(ctx, r, true)
}

var opRunConsolidation = huma.Operation{
	OperationID: "run-consolidation", Method: http.MethodPost, Path: "/v1/admin/consolidation/run", Tags: []string{"admin"},
	Summary: "Consolidate now",
	Description: "Runs, in this request, the org's pending job summaries (job_outbox rows another worker is not " +
		"holding), episodic compaction, near-duplicate merge and promotion, and answers what each did (with the " +
		"promotion score of each evaluated cluster). Background workers do the same continuously.",
}

func (s *Server) runConsolidation(ctx context.Context, r *Request, in *consolidationInput) (*consolidationOutput, error) {
	var tasks []string
	if in.Body != nil {
		tasks = in.Body.Tasks
	}
	tasks, err := consolidation.ValidTasks(tasks)
	if err != nil {
		return nil, err
	}
	rep, after, err := s.consolidator.RunTx(ctx, r.Tx, r.Org, tasks)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(after)
	return &consolidationOutput{Body: rep}, nil
}

// runEvictionNow evaluates (and with apply, applies) the org's eviction policy in the
// request's transaction; what must follow the commit (Redis deletions) runs after it.
func (s *Server) runEvictionNow(ctx context.Context, r *Request, apply bool) (*evictionOutput, error) {
	p := r.Caller
	rep, after, err := s.evictor.Run(ctx, r.Tx, p.OrgID, apply, eviction.Actor{KeyID: p.KeyID, Role: string(p.Role), RequestID: requestID(ctx)})
	if err != nil {
		return nil, err
	}
	r.AfterCommit(func() { after(context.WithoutCancel(ctx)) })
	return &evictionOutput{Body: rep}, nil
}
