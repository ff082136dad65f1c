package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
)

// PolicyDoc is an org's lifecycle policy as GET/PUT /v1/admin/policies answer it.
type PolicyDoc struct {
	OrgID     string                 `json:"org_id"`
	Version   int64                  `json:"version" doc:"0 while the org runs on the defaults; also the ETag."`
	UpdatedAt *time.Time             `json:"updated_at,omitempty"`
	UpdatedBy string                 `json:"updated_by,omitempty" doc:"The API key that wrote it."`
	Policy    policy.LifecyclePolicy `json:"policy" doc:"The effective policy: what the org set, every absent field filled from the defaults."`
	Stored    policy.LifecyclePolicy `json:"stored" doc:"What the org set (absent fields follow the defaults, also when the defaults change)."`
	Defaults  policy.LifecyclePolicy `json:"defaults" doc:"The server's defaults."`
}

type policyOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   PolicyDoc
}

type putPolicyInput struct {
	IfMatch string `header:"If-Match" doc:"The version you read (ETag; \"0\" when none was stored); a stale one gets 409."`
	Body    policy.LifecyclePolicy
}

func (s *Server) policyDoc(org string, st policy.Stored) (*policyOutput, error) {
	def := s.policyDefaults
	e, err := policy.Compile(st.Policy, def)
	if err != nil {
		// Valid when stored; only a server default change can make it fail now.
		e, _ = policy.Compile(policy.LifecyclePolicy{}, def)
	}
	return &policyOutput{Status: http.StatusOK, ETag: etag(st.Version), Body: PolicyDoc{OrgID: org, Version: st.Version,
		UpdatedAt: st.UpdatedAt, UpdatedBy: st.UpdatedBy, Policy: e.Doc, Stored: st.Policy, Defaults: def}}, nil
}

// orgVerifyAge fills a search's verification age from the org's policy (the fact kind's
// verify_age) when the request did not name one: search's staleness flag and
// exclude_stale follow the policy.
func (s *Server) orgVerifyAge(ctx context.Context, tx pgx.Tx, q *semantic.Query) error {
	if q.StaleAfter > 0 {
		return nil
	}
	e, err := policy.LoadEffective(ctx, tx, q.Scope.OrgID, s.policyDefaults)
	if err != nil {
		return err
	}
	q.StaleAfter = e.ForKind(semantic.KindFact).VerifyAge
	return nil
}

var opGetPolicies = huma.Operation{
	OperationID: "get-policies", Method: http.MethodGet, Path: "/v1/admin/policies", Tags: []string{"admin"},
	Summary: "Read the org's memory lifecycle policy",
	Description: "Eviction rules per memory kind (max_age, max_inactivity, max_items_per_scope, delete_superseded_after, " +
		"verify_age), working-state session_ttl, episodic completed_job_retention, checkpoints keep_versions, key-value " +
		"history_retention, and consolidation settings (compaction, merge threshold, promotion score). Durations are " +
		"Go durations or whole days (\"90d\"); \"0\" turns a rule off. Pinned memories are exempt from every rule.",
}

func (s *Server) getPolicies(ctx context.Context, r *Request, in *struct{}) (*policyOutput, error) {
	st, err := policy.Load(ctx, r.Tx, r.Org)
	if err != nil {
		return nil, err
	}
	return s.policyDoc(r.Org, st)
}

var opPutPolicies = huma.Operation{
	OperationID: "put-policies", Method: http.MethodPut, Path: "/v1/admin/policies", Tags: []string{"admin"},
	Summary: "Replace the org's memory lifecycle policy",
	Description: "Replaces the stored policy (absent fields follow the server defaults). Validated as a whole: a bad " +
		"field is a 422 naming it and nothing is stored. If-Match makes it conditional. The periodic eviction job and " +
		"POST /v1/admin/eviction/run apply it; search's staleness flag follows memories.kinds.fact.verify_age (or the default's).",
}

func (s *Server) putPolicies(ctx context.Context, r *Request, in *putPolicyInput) (*policyOutput, error) {
	v, ok, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	var im *int64
	if ok {
		im = &v
	}
	p := r.Caller
	_, st, err := policy.Save(ctx, r.Tx, p.OrgID, in.Body, s.policyDefaults, im, p.KeyID, s.now())
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
