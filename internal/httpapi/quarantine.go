package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// Poisoning controls over HTTP: provenance filters for search, and quarantines
// (docs/semantic.md "Poisoning controls", SECURITY.md).

// provenanceFilterBody narrows a search by who wrote each memory version.
type provenanceFilterBody struct {
	KeyIDs          []string `json:"key_ids,omitempty" maxItems:"50" doc:"Only versions written by these API keys (provenance.key_id)."`
	AgentIDs        []string `json:"agent_ids,omitempty" maxItems:"50" doc:"Only versions whose provenance.agent_id is one of these."`
	JobIDs          []string `json:"job_ids,omitempty" maxItems:"50" doc:"Only versions that came from these jobs (provenance.job_id)."`
	ExcludeKeyIDs   []string `json:"exclude_key_ids,omitempty" maxItems:"50" doc:"Never versions written by these API keys."`
	ExcludeAgentIDs []string `json:"exclude_agent_ids,omitempty" maxItems:"50" doc:"Never versions whose provenance.agent_id is one of these."`
}

// filter is the tier's provenance filter (nil when the body has none).
func (pf *provenanceFilterBody) filter() *semantic.ProvenanceFilter {
	if pf == nil {
		return nil
	}
	return &semantic.ProvenanceFilter{KeyIDs: pf.KeyIDs, AgentIDs: pf.AgentIDs, JobIDs: pf.JobIDs,
		ExcludeKeyIDs: pf.ExcludeKeyIDs, ExcludeAgentIDs: pf.ExcludeAgentIDs}
}

// quarantineAdminOnly answers a non-admin's include_quarantined with its own 403.
func quarantineAdminOnly(err error) error {
	if errors.Is(err, semantic.ErrIncludeQuarantined) {
		return huma.Error403Forbidden("include_quarantined needs an admin key")
	}
	return err
}

type createQuarantineInput struct {
	Body struct {
		KeyID   string    `json:"key_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Quarantine what this API key wrote (an id from GET /v1/admin/keys). Exactly one of key_id and agent_id."`
		AgentID string    `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Quarantine what this agent wrote: memory versions whose provenance agent_id is this one, or, when a write named no provenance agent, whose scope agent_id is."`
		Since   time.Time `json:"since" doc:"RFC 3339: versions written at or after this time are held (and every version the key/agent writes while the quarantine is active)."`
		Reason  string    `json:"reason,omitempty" maxLength:"1000" doc:"Why, for the record."`
	}
}

type quarantineOutput struct {
	Status int
	Body   semantic.Quarantine
}

type quarantineIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A quarantine id."`
}

type listQuarantinesInput struct {
	Status string `query:"status" enum:"active,released" doc:"Only quarantines of this status."`
	Page
}

type listQuarantinesOutput struct {
	Body List[semantic.Quarantine]
}

type quarantinedMemoriesInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A quarantine id."`
	Page
}

type quarantinedMemoriesOutput struct {
	Body List[semantic.Memory]
}

type purgeQuarantineOutput struct {
	Body struct {
		Quarantine semantic.Quarantine `json:"quarantine"`
		semantic.PurgeResult
	}
}

var opCreateQuarantine = huma.Operation{
	OperationID: "create-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines", Tags: []string{"admin", "semantic"},
	Summary: "Quarantine what a key or agent wrote", DefaultStatus: http.StatusCreated,
	Description: "Holds every memory version (current or superseded) that the API key or agent wrote at or after " +
		"`since`, and every version it writes while the quarantine is active. Held versions are excluded from " +
		"search, similar-jobs and context (and from as_of searches); GET by id still reads them. Release it with " +
		"POST .../release, or remove the held versions in one operation with POST .../purge. Audited.",
}

func (s *Server) createQuarantine(ctx context.Context, r *Request, in *createQuarantineInput) (*quarantineOutput, error) {
	b := in.Body
	p := r.Caller
	n := semantic.NewQuarantine{KeyID: b.KeyID, AgentID: b.AgentID, Since: b.Since, Reason: b.Reason, CreatedBy: p.KeyID}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if b.KeyID != "" && b.KeyID != "root" {
		ok, err := s.keys.Exists(ctx, r.Tx, p.OrgID, b.KeyID)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, strata.Invalid("key_id", "no API key with this id in your org")
		}
	}
	q, err := s.memories.CreateQuarantine(ctx, r.Tx, p.OrgID, n)
	if err != nil {
		return nil, err
	}
	return &quarantineOutput{Status: http.StatusCreated, Body: q}, nil
}

var opListQuarantines = huma.Operation{
	OperationID: "list-quarantines", Method: http.MethodGet, Path: "/v1/admin/quarantines", Tags: []string{"admin", "semantic"},
	Summary: "List quarantines", Description: "Oldest first, with the number of memory versions each holds.",
}

func (s *Server) listQuarantines(ctx context.Context, r *Request, in *listQuarantinesInput) (*listQuarantinesOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	qs, err := s.memories.ListQuarantines(ctx, r.Tx, r.Org, in.Status, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &listQuarantinesOutput{Body: page(qs, limit, func(q semantic.Quarantine) string { return q.ID.String() })}, nil
}

var opGetQuarantine = huma.Operation{
	OperationID: "get-quarantine", Method: http.MethodGet, Path: "/v1/admin/quarantines/{id}", Tags: []string{"admin", "semantic"},
	Summary: "Read a quarantine",
}

func (s *Server) getQuarantine(ctx context.Context, r *Request, in *quarantineIDInput) (*quarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	q, err := s.memories.GetQuarantine(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	return &quarantineOutput{Status: http.StatusOK, Body: q}, nil
}

var opListQuarantinedMemories = huma.Operation{
	OperationID: "list-quarantined-memories", Method: http.MethodGet, Path: "/v1/admin/quarantines/{id}/memories", Tags: []string{"admin", "semantic"},
	Summary:     "List the memory versions a quarantine holds",
	Description: "Every held version with its provenance (key, agent, job, event) and trust: what the key or agent wrote.",
}

func (s *Server) listQuarantinedMemories(ctx context.Context, r *Request, in *quarantinedMemoriesInput) (*quarantinedMemoriesOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	ms, err := s.memories.QuarantinedMemories(ctx, r.Tx, r.Org, id, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &quarantinedMemoriesOutput{Body: page(ms, limit, func(m semantic.Memory) string { return m.ID.String() })}, nil
}

var opReleaseQuarantine = huma.Operation{
	OperationID: "release-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines/{id}/release", Tags: []string{"admin", "semantic"},
	Summary: "Release a quarantine",
	Description: "Ends the quarantine: the versions it still holds are visible to retrieval again (unless another " +
		"active quarantine holds them), and new writes no longer join it. 409 if it was already released.",
}

func (s *Server) releaseQuarantine(ctx context.Context, r *Request, in *quarantineIDInput) (*quarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	q, err := s.memories.ReleaseQuarantine(ctx, r.Tx, p.OrgID, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	return &quarantineOutput{Status: http.StatusOK, Body: q}, nil
}

var opPurgeQuarantine = huma.Operation{
	OperationID: "purge-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines/{id}/purge", Tags: []string{"admin", "semantic"},
	Summary: "Remove every memory version a quarantine holds",
	Description: "Deletes the held versions (text, vectors) and stored idempotent responses quoting them, in one " +
		"transaction. Where a purged version had superseded an earlier one and nothing else superseded it since, the " +
		"earlier version becomes current again (a compromised agent's rewrite of a good memory is undone). The " +
		"quarantine stays active until released. 409 on a released quarantine.",
}

func (s *Server) purgeQuarantine(ctx context.Context, r *Request, in *quarantineIDInput) (*purgeQuarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	q, res, err := s.memories.PurgeQuarantine(ctx, r.Tx, p.OrgID, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	out := &purgeQuarantineOutput{}
	out.Body.Quarantine, out.Body.PurgeResult = q, res
	return out, nil
}
