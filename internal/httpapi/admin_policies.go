package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
)

func (s *Server) policyDoc(org string, st policy.Stored) (*api.PolicyOutput, error) {
	def := s.PolicyDefaults
	e, err := policy.Compile(st.Policy, def)
	if err != nil {
		// Valid when stored; only a server default change can make it fail now.
		e, _ = policy.Compile(policy.LifecyclePolicy{}, def)
	}
	return &api.PolicyOutput{Status: http.StatusOK, ETag: etag(st.Version), Body: api.PolicyDoc{OrgID: org, Version: st.Version,
		UpdatedAt: st.UpdatedAt, UpdatedBy: st.UpdatedBy, Policy: e.Doc, Stored: st.Policy, Defaults: def}}, nil
}

// orgVerifyAge makes a search's verification age the org's policy's (the fact kind's
// verify_age) when the request did not name one: search's staleness flag and exclude_stale
// follow the policy. The policy is read in the search's own round trip.
func (s *Server) orgVerifyAge(q *semantic.Query) {
	if q.StaleAfter > 0 {
		return
	}
	org, def := q.Scope.OrgID, s.PolicyDefaults
	q.LoadStaleAfter = func(b *pgx.Batch) func() (time.Duration, error) {
		var res policy.EffectiveResult
		policy.QueueLoadEffective(b, org, def, &res)
		return func() (time.Duration, error) {
			if res.Err != nil {
				return 0, res.Err
			}
			return res.Effective.ForKind(semantic.KindFact).VerifyAge, nil
		}
	}
}

func (s *Server) getPolicies(ctx context.Context, r *Request, in *struct{}) (*api.PolicyOutput, error) {
	st, err := policy.Load(ctx, r.Tx, r.Org)
	if err != nil {
		return nil, err
	}
	return s.policyDoc(r.Org, st)
}

func (s *Server) putPolicies(ctx context.Context, r *Request, in *api.PutPolicyInput) (*api.PolicyOutput, error) {
	v, ok, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	var im *int64
	if ok {
		im = &v
	}
	p := r.Caller
	_, st, err := policy.Save(ctx, r.Tx, p.OrgID, in.Body, s.PolicyDefaults, im, p.KeyID, s.Now())
	if err != nil {
		return nil, err
	}
	out, err := s.policyDoc(p.OrgID, st)
	if err != nil {
		return nil, err
	}
	if st.Version == 1 {
		out.Status = http.StatusCreated
	}
	return out, nil
}
