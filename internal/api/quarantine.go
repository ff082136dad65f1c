package api

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/semantic"
)

// Poisoning controls over HTTP: provenance filters for search, and quarantines
// (docs/semantic.md "Poisoning controls", SECURITY.md).

// ProvenanceFilterBody narrows a search by who wrote each memory version.
type ProvenanceFilterBody struct {
	KeyIDs          []string `json:"key_ids,omitempty" maxItems:"50" doc:"Only versions written by these API keys (provenance.key_id)."`
	AgentIDs        []string `json:"agent_ids,omitempty" maxItems:"50" doc:"Only versions whose provenance.agent_id is one of these."`
	JobIDs          []string `json:"job_ids,omitempty" maxItems:"50" doc:"Only versions that came from these jobs (provenance.job_id)."`
	ExcludeKeyIDs   []string `json:"exclude_key_ids,omitempty" maxItems:"50" doc:"Never versions written by these API keys."`
	ExcludeAgentIDs []string `json:"exclude_agent_ids,omitempty" maxItems:"50" doc:"Never versions whose provenance.agent_id is one of these."`
}

// Filter is the tier's provenance filter (nil when the body has none).
func (pf *ProvenanceFilterBody) Filter() *semantic.ProvenanceFilter {
	if pf == nil {
		return nil
	}
	return &semantic.ProvenanceFilter{KeyIDs: pf.KeyIDs, AgentIDs: pf.AgentIDs, JobIDs: pf.JobIDs,
		ExcludeKeyIDs: pf.ExcludeKeyIDs, ExcludeAgentIDs: pf.ExcludeAgentIDs}
}

type CreateQuarantineInput struct {
	Body struct {
		KeyID   string    `json:"key_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Quarantine what this API key wrote (an id from GET /v1/admin/keys). Exactly one of key_id and agent_id."`
		AgentID string    `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Quarantine what this agent wrote: memory versions whose provenance agent_id is this one, or, when a write named no provenance agent, whose scope agent_id is."`
		Since   time.Time `json:"since" doc:"RFC 3339: versions written at or after this time are held (and every version the key/agent writes while the quarantine is active)."`
		Reason  string    `json:"reason,omitempty" maxLength:"1000" doc:"Why, for the record."`
	}
}

type QuarantineOutput struct {
	Status int
	Body   semantic.Quarantine
}

type QuarantineIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A quarantine id."`
}

type ListQuarantinesInput struct {
	Status string `query:"status" enum:"active,released" doc:"Only quarantines of this status."`
	Page
}

type ListQuarantinesOutput struct {
	Body List[semantic.Quarantine]
}

type QuarantinedMemoriesInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A quarantine id."`
	Page
}

type QuarantinedMemoriesOutput struct {
	Body List[semantic.Memory]
}

type PurgeQuarantineOutput struct {
	Body struct {
		Quarantine semantic.Quarantine `json:"quarantine"`
		semantic.PurgeResult
	}
}

var OpCreateQuarantine = huma.Operation{
	OperationID: "create-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines", Tags: []string{"admin", "semantic"},
	Summary: "Quarantine what a key or agent wrote", DefaultStatus: http.StatusCreated,
	Description: "Holds every memory version (current or superseded) that the API key or agent wrote at or after " +
		"`since`, and every version it writes while the quarantine is active. Held versions are excluded from " +
		"search, similar-jobs and context (and from as_of searches); GET by id still reads them. Release it with " +
		"POST .../release, or remove the held versions in one operation with POST .../purge. Audited.",
}

var OpListQuarantines = huma.Operation{
	OperationID: "list-quarantines", Method: http.MethodGet, Path: "/v1/admin/quarantines", Tags: []string{"admin", "semantic"},
	Summary: "List quarantines", Description: "Oldest first, with the number of memory versions each holds.",
}

var OpGetQuarantine = huma.Operation{
	OperationID: "get-quarantine", Method: http.MethodGet, Path: "/v1/admin/quarantines/{id}", Tags: []string{"admin", "semantic"},
	Summary: "Read a quarantine",
}

var OpListQuarantinedMemories = huma.Operation{
	OperationID: "list-quarantined-memories", Method: http.MethodGet, Path: "/v1/admin/quarantines/{id}/memories", Tags: []string{"admin", "semantic"},
	Summary: "List the memory versions a quarantine holds",
	Description: "Every held version with its provenance (key, agent, job, event) and trust: what the key or agent wrote. " +
		"Versions of restricted data subjects (GDPR Art. 18) are left out; the quarantine's `restricted` counts them.",
}

var OpReleaseQuarantine = huma.Operation{
	OperationID: "release-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines/{id}/release", Tags: []string{"admin", "semantic"},
	Summary: "Release a quarantine",
	Description: "Ends the quarantine: the versions it still holds are visible to retrieval again (unless another " +
		"active quarantine holds them), and new writes no longer join it. Versions of restricted data subjects (GDPR " +
		"Art. 18) stay held, as they are: `restricted` counts them. 409 if it was already released.",
}

var OpPurgeQuarantine = huma.Operation{
	OperationID: "purge-quarantine", Method: http.MethodPost, Path: "/v1/admin/quarantines/{id}/purge", Tags: []string{"admin", "semantic"},
	Summary: "Remove every memory version a quarantine holds",
	Description: "Deletes the held versions (text, vectors) and stored idempotent responses quoting them, in one " +
		"transaction. Where a purged version had superseded an earlier one and nothing else superseded it since, the " +
		"earlier version becomes current again (a compromised agent's rewrite of a good memory is undone). The " +
		"quarantine stays active until released. Versions of restricted data subjects (GDPR Art. 18) are kept, held " +
		"(`kept_restricted`). 409 on a released quarantine.",
}
