package api

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/semantic"
)

type ProvenanceBody struct {
	JobID    string `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job this memory came from."`
	EventSeq *int64 `json:"event_seq,omitempty" minimum:"0" doc:"The episodic event (seq) it came from."`
	AgentID  string `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent that wrote it."`
}

type CreateMemoryInput struct {
	Body struct {
		Text string `json:"text" minLength:"1" maxLength:"16384" doc:"The memory, in natural language."`
		Kind string `json:"kind,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"fact (default), preference, job, case, or a custom kind."`
		ScopeBody
		Metadata   map[string]any  `json:"metadata,omitempty" doc:"Free-form object (at most 16 KiB). Search can filter on containment. Job memories use job_id, outcome and parameters."`
		Importance *float64        `json:"importance,omitempty" minimum:"0" maximum:"1" doc:"0-1, default 0.5: a ranking feature."`
		Pinned     bool            `json:"pinned,omitempty" doc:"Pinned memories do not decay with age (and eviction keeps them)."`
		Trust      string          `json:"trust,omitempty" enum:"verified,user_stated,agent_inferred,tool_output,consolidated,extracted" doc:"Where the content came from (default agent_inferred)."`
		Provenance *ProvenanceBody `json:"provenance,omitempty"`
		Graph      bool            `json:"graph,omitempty" doc:"Also extract the text's entities and relations into graph memory (one model call, in the same transaction, in the memory's scope, each relation with this memory as its source). 503 without STRATA_LLM_MODEL; 502 when the model's answers are malformed (nothing is written)."`
	}
}

type MemoryOut struct {
	semantic.Memory
	Deduplicated bool            `json:"deduplicated" doc:"true when no row was created: the memory answered is the existing duplicate."`
	Dedup        *semantic.Dedup `json:"dedup,omitempty"`
	Graph        *MemoryGraph    `json:"graph,omitempty" doc:"With graph: true, the entities and relations extracted from the text."`
}

// MemoryGraph is what "graph": true wrote.
type MemoryGraph struct {
	Model         string                `json:"model"`
	PromptVersion string                `json:"prompt_version"`
	Entities      []extraction.Entity   `json:"entities"`
	Relations     []extraction.Relation `json:"relations"`
	Usage         extraction.Usage      `json:"usage"`
}

type MemoryOutput struct {
	Status   int
	ETag     string `header:"ETag"`
	Location string `header:"Location"`
	Body     MemoryOut
}

type MemoryIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
}

func (in MemoryIDInput) UUID() (uuid.UUID, error) { return semantic.ParseID("id", in.ID) }

type PatchMemoryInput struct {
	ID      string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
	IfMatch string `header:"If-Match" doc:"The version you read (ETag); a stale one gets 409."`
	Body    struct {
		Text       *string         `json:"text,omitempty" minLength:"1" maxLength:"16384" doc:"New wording: re-embedded."`
		Metadata   map[string]any  `json:"metadata,omitempty" doc:"Replaces the metadata object."`
		Importance *float64        `json:"importance,omitempty" minimum:"0" maximum:"1"`
		Pinned     *bool           `json:"pinned,omitempty"`
		Trust      *string         `json:"trust,omitempty" enum:"verified,user_stated,agent_inferred,tool_output,consolidated,extracted"`
		Provenance *ProvenanceBody `json:"provenance,omitempty"`
	}
}

type SearchBody struct {
	Query string `json:"query" minLength:"1" maxLength:"4096" doc:"What to look for, in natural language."`
	ScopeBody
	ScopeMatch    string         `json:"scope_match,omitempty" enum:"compose,filter" doc:"compose (default): the scope sees org-level memories and those of every level it names or a combination of them (user U, agent A: org-level, U's, A's, U's with A). filter: only memories whose scope has every level named, whatever their other levels (Mem0's filters: user U finds U's memories at any agent and session, never org-level ones)."`
	Kinds         []string       `json:"kinds,omitempty" maxItems:"20" doc:"Only these kinds."`
	Metadata      map[string]any `json:"metadata,omitempty" doc:"Only memories whose metadata contains this object (jsonb @>)."`
	Trust         []string       `json:"trust,omitempty" maxItems:"5" doc:"Only these trust levels."`
	CreatedAfter  *time.Time     `json:"created_after,omitempty" doc:"Only versions written at or after this time."`
	CreatedBefore *time.Time     `json:"created_before,omitempty" doc:"Only versions written before this time."`
	AsOf          *time.Time     `json:"as_of,omitempty" doc:"Search the versions that were current at this time (superseded ones included as they were)."`
	TopK          int            `json:"top_k,omitempty" minimum:"1" maximum:"100" doc:"Results wanted (default 10, at most 100)."`
	ExcludeStale  bool           `json:"exclude_stale,omitempty" doc:"Drop facts not verified within the verification age."`
	StaleAfter    string         `json:"stale_after,omitempty" maxLength:"32" doc:"Verification age for this search, as a Go duration (e.g. 720h); default the org's policy (memories verify_age of kind fact, GET /v1/admin/policies), whose default is STRATA_VERIFY_AGE."`
	JobID         string         `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job this search serves (recorded in the retrieval log)."`
	// Poisoning controls (quarantine.go).
	Provenance         *ProvenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) memories written by these keys, agents or jobs."`
	IncludeQuarantined bool                  `json:"include_quarantined,omitempty" doc:"Admin keys only: include versions held by an active quarantine (excluded by default)."`
}

type SearchInput struct {
	Body SearchBody
	// userDropped: the wrapper dropped a restricted user from the scope (ScopeUserDropped).
	userDropped bool
}

// ScopeUserDropped implements ScopeDropper.
func (in *SearchInput) ScopeUserDropped() { in.userDropped = true }

// FiltersOutRestricted reports whether the search can only answer nothing: it filtered on
// a user (scope_match filter: only that user's memories) whom the wrapper dropped as
// restricted — without the user the filter would widen to everyone's.
func (in *SearchInput) FiltersOutRestricted() bool {
	return in.userDropped && in.Body.ScopeMatch == "filter"
}

type SearchOutput struct {
	Body struct {
		Items  []semantic.Result   `json:"items"`
		Search semantic.SearchInfo `json:"search"`
	}
}

type SimilarJobsInput struct {
	Body struct {
		Query string `json:"query" minLength:"1" maxLength:"4096" doc:"The job at hand, described in natural language."`
		ScopeBody
		TopK  int    `json:"top_k,omitempty" minimum:"1" maximum:"50" doc:"Jobs wanted (default 5)."`
		JobID string `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job asking (recorded in the retrieval log)."`
		// Poisoning controls (quarantine.go).
		Trust      []string              `json:"trust,omitempty" maxItems:"5" doc:"Only job memories of these trust levels."`
		Provenance *ProvenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) job memories written by these keys, agents or jobs."`
	}
}

type SimilarJobsOutput struct {
	Body List[semantic.SimilarJob]
}

type HistoryOutput struct {
	Body List[semantic.Memory]
}

type DeleteMemoryOutput struct {
	Body struct {
		ID       string      `json:"id"`
		Versions []uuid.UUID `json:"deleted_versions" doc:"Every version removed (text, vector and history)."`
	}
}

type RetrievalsInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
	Page
}

type RetrievalsOutput struct {
	subjects // the memory's data subject
	Body     List[semantic.Retrieval]
}

var OpCreateMemory = huma.Operation{
	OperationID: "create-memory", Method: http.MethodPost, Path: "/v1/memories", Tags: []string{"semantic"},
	Summary: "Write a memory (deduplicated)", DefaultStatus: http.StatusCreated,
	Description: "Stores a memory in the given scope. An exact duplicate (same normalised text in the same scope) " +
		"or a near duplicate (cosine similarity ≥ STRATA_DEDUP_THRESHOLD in the same scope) creates no row: the answer " +
		"is 200 with the existing memory and `deduplicated: true`, and the existing memory's access data and provenance " +
		"are updated. Concurrent identical writes leave one row.",
}

var OpSearchMemories = huma.Operation{
	OperationID: "search-memories", Method: http.MethodPost, Path: "/v1/memories/search", Tags: []string{"semantic"},
	Summary: "Search memories (hybrid vector + full text, ranked)",
	Description: "Scopes compose: a search for (user U, agent A, session S) sees the org's memories that are " +
		"org-level or scoped to U, A, S or any combination of them. Vector (cosine) and full-text candidates are " +
		"fused by reciprocal rank fusion (k=60), then scaled by recency, importance and access count; each result " +
		"carries its score breakdown. Superseded versions are excluded unless as_of asks for the past. Every memory " +
		"served is recorded in the retrieval log (GET /v1/memories/{id}/retrievals).",
}

var OpSimilarJobs = huma.Operation{
	OperationID: "similar-jobs", Method: http.MethodPost, Path: "/v1/jobs/similar", Tags: []string{"jobs", "semantic"},
	Summary: "Find similar past jobs",
	Description: "Searches `job` memories (written by consolidation when jobs complete) and answers each job's " +
		"outcome and settled parameters, read from the memory's metadata keys `job_id`, `outcome` and `parameters`.",
}

var OpGetMemory = huma.Operation{
	OperationID: "get-memory", Method: http.MethodGet, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Read a memory version", Description: "Any version, current or superseded (then superseded_by says by which).",
}

var OpUpdateMemory = huma.Operation{
	OperationID: "update-memory", Method: http.MethodPatch, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Change a memory (new version)",
	Description: "Every change writes a new version with a new id (text changes are re-embedded); the old version gets " +
		"valid_to and superseded_by and stays readable in the history and to as_of searches. Only the current " +
		"version can be patched (409 otherwise, naming the current one).",
}

var OpDeleteMemory = huma.Operation{
	OperationID: "delete-memory", Method: http.MethodDelete, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Delete a memory with its history",
	Description: "Removes every version (text, vector, history) of the memory this id belongs to, and stored " +
		"idempotent responses that quoted it. The retrieval log keeps its rows (ids only, no text).",
}

var OpMemoryHistory = huma.Operation{
	OperationID: "memory-history", Method: http.MethodGet, Path: "/v1/memories/{id}/history", Tags: []string{"semantic"},
	Summary: "List a memory's versions",
	Description: "Oldest first. Each version says who wrote it (provenance.key_id, provenance.agent_id) and when " +
		"(valid_from), and when and by what it was superseded (valid_to, superseded_by).",
}

var OpVerifyMemory = huma.Operation{
	OperationID: "verify-memory", Method: http.MethodPost, Path: "/v1/memories/{id}/verify", Tags: []string{"semantic"},
	Summary: "Re-confirm a memory",
	Description: "Sets last_verified_at (and last_verified_by, the key) on the current version: it is no longer " +
		"stale until the verification age passes again.",
}

var OpMemoryRetrievals = huma.Operation{
	OperationID: "memory-retrievals", Method: http.MethodGet, Path: "/v1/memories/{id}/retrievals", Tags: []string{"semantic"},
	Summary: "Which requests were served this memory",
	Description: "The retrieval log of one memory version: request id, key, scope, job, rank, score and time. " +
		"Answers \"which runs used this (possibly poisoned) memory?\".",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go). A search for a
// restricted subject sees org-, agent- and session-level memories only, never the subject's.

func (in *SearchInput) ScopeUser() *string { return &in.Body.UserID }

func (in *SimilarJobsInput) ScopeUser() *string { return &in.Body.UserID }

func (o *MemoryOutput) SubjectUsers() []string { return []string{o.Body.UserID} }

func (o *HistoryOutput) SubjectUsers() []string {
	if len(o.Body.Items) == 0 {
		return nil
	}
	return []string{o.Body.Items[0].UserID}
}

var OpListMemories = huma.Operation{
	OperationID: "list-memories", Method: http.MethodGet, Path: "/v1/memories", Tags: []string{"semantic"},
	Summary: "Browse memories (filters, newest first, cursor)",
	Description: "The current version of every memory matching the filters, newest first (by when the version was written), " +
		"paged with a keyset cursor — Mem0's get_all. Scope fields match exactly: user_id=U lists U's memories at every " +
		"agent and session (it does not compose scopes the way search does). provenance: extracted (by the org's LLM from " +
		"conversation turns), consolidated (by the consolidation worker), written (through the API by a key). " +
		"Memories of a restricted subject (GDPR Art. 18) are left out.",
}

type ListMemoriesInput struct {
	ScopeQuery
	Kind          string `query:"kind" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this kind (fact, preference, job, case, or a custom kind)."`
	Trust         string `query:"trust" enum:"verified,user_stated,agent_inferred,tool_output,consolidated,extracted" doc:"Only this trust level."`
	Provenance    string `query:"provenance" enum:"extracted,consolidated,written" doc:"Only memories extracted from turns, written by consolidation, or written through the API."`
	KeyID         string `query:"key_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only versions written by this API key id."`
	CreatedAfter  string `query:"created_after" maxLength:"64" doc:"Only versions written after this time (RFC 3339)."`
	CreatedBefore string `query:"created_before" maxLength:"64" doc:"Only versions written before this time (RFC 3339)."`
	Page
}

type ListMemoriesOutput struct {
	Body List[semantic.Memory]
}

func (o *ListMemoriesOutput) ItemSubjects() (users, jobs []string) {
	for _, m := range o.Body.Items {
		users = append(users, m.UserID)
	}
	return users, nil
}

func (o *ListMemoriesOutput) DropItems(drop func(int) bool) { o.Body.DropItems(drop) }
