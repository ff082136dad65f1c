package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

type provenanceBody struct {
	JobID    string `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job this memory came from."`
	EventSeq *int64 `json:"event_seq,omitempty" minimum:"0" doc:"The episodic event (seq) it came from."`
	AgentID  string `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent that wrote it."`
}

func (p *provenanceBody) provenance(ctx context.Context) semantic.Provenance {
	pr, _ := auth.FromContext(ctx)
	out := semantic.Provenance{KeyID: pr.KeyID}
	if p != nil {
		out.JobID, out.EventSeq, out.AgentID = p.JobID, p.EventSeq, p.AgentID
	}
	return out
}

type createMemoryInput struct {
	Body struct {
		Text string `json:"text" minLength:"1" maxLength:"16384" doc:"The memory, in natural language."`
		Kind string `json:"kind,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"fact (default), preference, job, case, or a custom kind."`
		ScopeBody
		Metadata   map[string]any  `json:"metadata,omitempty" doc:"Free-form object (at most 16 KiB). Search can filter on containment. Job memories use job_id, outcome and parameters."`
		Importance *float64        `json:"importance,omitempty" minimum:"0" maximum:"1" doc:"0-1, default 0.5: a ranking feature."`
		Pinned     bool            `json:"pinned,omitempty" doc:"Pinned memories do not decay with age (and eviction keeps them)."`
		Trust      string          `json:"trust,omitempty" enum:"verified,user_stated,agent_inferred,tool_output,consolidated,extracted" doc:"Where the content came from (default agent_inferred)."`
		Provenance *provenanceBody `json:"provenance,omitempty"`
	}
}

type memoryOut struct {
	semantic.Memory
	Deduplicated bool            `json:"deduplicated" doc:"true when no row was created: the memory answered is the existing duplicate."`
	Dedup        *semantic.Dedup `json:"dedup,omitempty"`
}

type memoryOutput struct {
	Status   int
	ETag     string `header:"ETag"`
	Location string `header:"Location"`
	Body     memoryOut
}

type memoryIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
}

func (in memoryIDInput) uuid() (uuid.UUID, error) { return semantic.ParseID("id", in.ID) }

type patchMemoryInput struct {
	ID      string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
	IfMatch string `header:"If-Match" doc:"The version you read (ETag); a stale one gets 409."`
	Body    struct {
		Text       *string         `json:"text,omitempty" minLength:"1" maxLength:"16384" doc:"New wording: re-embedded."`
		Metadata   map[string]any  `json:"metadata,omitempty" doc:"Replaces the metadata object."`
		Importance *float64        `json:"importance,omitempty" minimum:"0" maximum:"1"`
		Pinned     *bool           `json:"pinned,omitempty"`
		Trust      *string         `json:"trust,omitempty" enum:"verified,user_stated,agent_inferred,tool_output,consolidated,extracted"`
		Provenance *provenanceBody `json:"provenance,omitempty"`
	}
}

type searchBody struct {
	Query string `json:"query" minLength:"1" maxLength:"4096" doc:"What to look for, in natural language."`
	ScopeBody
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
	Provenance         *provenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) memories written by these keys, agents or jobs."`
	IncludeQuarantined bool                  `json:"include_quarantined,omitempty" doc:"Admin keys only: include versions held by an active quarantine (excluded by default)."`
}

type searchInput struct{ Body searchBody }

type searchOutput struct {
	Body struct {
		Items  []semantic.Result   `json:"items"`
		Search semantic.SearchInfo `json:"search"`
	}
}

type similarJobsInput struct {
	Body struct {
		Query string `json:"query" minLength:"1" maxLength:"4096" doc:"The job at hand, described in natural language."`
		ScopeBody
		TopK  int    `json:"top_k,omitempty" minimum:"1" maximum:"50" doc:"Jobs wanted (default 5)."`
		JobID string `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job asking (recorded in the retrieval log)."`
		// Poisoning controls (quarantine.go).
		Trust      []string              `json:"trust,omitempty" maxItems:"5" doc:"Only job memories of these trust levels."`
		Provenance *provenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) job memories written by these keys, agents or jobs."`
	}
}

type similarJobsOutput struct {
	Body List[semantic.SimilarJob]
}

type historyOutput struct {
	Body List[semantic.Memory]
}

type deleteMemoryOutput struct {
	Body struct {
		ID       string      `json:"id"`
		Versions []uuid.UUID `json:"deleted_versions" doc:"Every version removed (text, vector and history)."`
	}
}

type retrievalsInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"A memory version id (UUIDv7)."`
	Page
}

type retrievalsOutput struct {
	subject string // the memory's data subject
	Body    List[semantic.Retrieval]
}

func memoryOK(m semantic.Memory, status int, d *semantic.Dedup) *memoryOutput {
	return &memoryOutput{Status: status, ETag: etag(int64(m.Version)), Location: "/v1/memories/" + m.ID.String(),
		Body: memoryOut{Memory: m, Deduplicated: d != nil, Dedup: d}}
}

// searchRequest is a search body as the semantic tier's request.
func searchRequest(r *Request, b searchBody) semantic.SearchRequest {
	return semantic.SearchRequest{Scope: r.Scope(b.UserID, b.AgentID, b.SessionID), Text: b.Query, Kinds: b.Kinds,
		Metadata: b.Metadata, Trust: b.Trust, CreatedAfter: b.CreatedAfter, CreatedBefore: b.CreatedBefore,
		AsOf: b.AsOf, TopK: b.TopK, ExcludeStale: b.ExcludeStale, StaleAfter: b.StaleAfter,
		Provenance: b.Provenance.filter(), IncludeQuarantined: b.IncludeQuarantined, Admin: r.Caller.Role == strata.RoleAdmin}
}

var opCreateMemory = huma.Operation{
	OperationID: "create-memory", Method: http.MethodPost, Path: "/v1/memories", Tags: []string{"semantic"},
	Summary: "Write a memory (deduplicated)", DefaultStatus: http.StatusCreated,
	Description: "Stores a memory in the given scope. An exact duplicate (same normalised text in the same scope) " +
		"or a near duplicate (cosine similarity ≥ STRATA_DEDUP_THRESHOLD in the same scope) creates no row: the answer " +
		"is 200 with the existing memory and `deduplicated: true`, and the existing memory's access data and provenance " +
		"are updated. Concurrent identical writes leave one row.",
}

func (s *Server) createMemory(ctx context.Context, r *Request, in *createMemoryInput) (*memoryOutput, error) {
	b := in.Body
	n := semantic.NewMemory{Scope: b.Scope(r), Kind: cmp.Or(b.Kind, semantic.KindFact), Text: b.Text,
		Metadata: b.Metadata, Importance: 0.5, Pinned: b.Pinned, Trust: b.Trust,
		Provenance: b.Provenance.provenance(ctx), Space: s.space}
	if b.Importance != nil {
		n.Importance = *b.Importance
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	var err error
	if n.Vector, err = s.embedOne(ctx, b.Text); err != nil {
		return nil, err
	}
	m, dedup, err := s.memories.Create(ctx, r.Tx, n)
	if err != nil {
		return nil, err
	}
	status := http.StatusCreated
	if dedup != nil {
		status = http.StatusOK
	}
	return memoryOK(m, status, dedup), nil
}

var opSearchMemories = huma.Operation{
	OperationID: "search-memories", Method: http.MethodPost, Path: "/v1/memories/search", Tags: []string{"semantic"},
	Summary: "Search memories (hybrid vector + full text, ranked)",
	Description: "Scopes compose: a search for (user U, agent A, session S) sees the org's memories that are " +
		"org-level or scoped to U, A, S or any combination of them. Vector (cosine) and full-text candidates are " +
		"fused by reciprocal rank fusion (k=60), then scaled by recency, importance and access count; each result " +
		"carries its score breakdown. Superseded versions are excluded unless as_of asks for the past. Every memory " +
		"served is recorded in the retrieval log (GET /v1/memories/{id}/retrievals).",
}

func (s *Server) searchMemories(ctx context.Context, r *Request, in *searchInput) (*searchOutput, error) {
	b := in.Body
	q, err := searchRequest(r, b).Query(s.space)
	if err != nil {
		return nil, quarantineAdminOnly(err)
	}
	if q.Vector, err = s.embedOne(ctx, b.Query); err != nil {
		return nil, err
	}
	if err := s.orgVerifyAge(ctx, r.Tx, &q); err != nil {
		return nil, err
	}
	res, info, err := s.memories.Search(ctx, r.Tx, q)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	s.memories.QueueServed(r.Session(), s.access, semantic.Served{Scope: q.Scope, RequestID: requestID(ctx),
		Operation: "search", KeyID: p.KeyID, JobID: b.JobID}, res)
	out := &searchOutput{}
	out.Body.Items, out.Body.Search = res, info
	return out, nil
}

var opSimilarJobs = huma.Operation{
	OperationID: "similar-jobs", Method: http.MethodPost, Path: "/v1/jobs/similar", Tags: []string{"jobs", "semantic"},
	Summary: "Find similar past jobs",
	Description: "Searches `job` memories (written by consolidation when jobs complete) and answers each job's " +
		"outcome and settled parameters, read from the memory's metadata keys `job_id`, `outcome` and `parameters`.",
}

func (s *Server) similarJobs(ctx context.Context, r *Request, in *similarJobsInput) (*similarJobsOutput, error) {
	b := in.Body
	q, err := semantic.SimilarJobsRequest{Scope: r.Scope(b.UserID, b.AgentID, b.SessionID), Text: b.Query,
		TopK: b.TopK, Trust: b.Trust, Provenance: b.Provenance.filter()}.Query(s.space)
	if err != nil {
		return nil, err
	}
	if q.Vector, err = s.embedOne(ctx, b.Query); err != nil {
		return nil, err
	}
	res, _, err := s.memories.Search(ctx, r.Tx, q)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	s.memories.QueueServed(r.Session(), s.access, semantic.Served{Scope: q.Scope, RequestID: requestID(ctx),
		Operation: "similar_jobs", KeyID: p.KeyID, JobID: b.JobID}, res)
	return &similarJobsOutput{Body: List[semantic.SimilarJob]{Items: semantic.SimilarJobs(res)}}, nil
}

var opGetMemory = huma.Operation{
	OperationID: "get-memory", Method: http.MethodGet, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Read a memory version", Description: "Any version, current or superseded (then superseded_by says by which).",
}

func (s *Server) getMemory(ctx context.Context, r *Request, in *memoryIDInput) (*memoryOutput, error) {
	id, err := in.uuid()
	if err != nil {
		return nil, err
	}
	m, err := s.memories.Get(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	out := memoryOK(m, http.StatusOK, nil)
	out.Location = ""
	return out, nil
}

var opUpdateMemory = huma.Operation{
	OperationID: "update-memory", Method: http.MethodPatch, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Change a memory (new version)",
	Description: "Every change writes a new version with a new id (text changes are re-embedded); the old version gets " +
		"valid_to and superseded_by and stays readable in the history and to as_of searches. Only the current " +
		"version can be patched (409 otherwise, naming the current one).",
}

func (s *Server) updateMemory(ctx context.Context, r *Request, in *patchMemoryInput) (*memoryOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	b := in.Body
	p := semantic.Patch{Text: b.Text, Metadata: b.Metadata, Importance: b.Importance, Pinned: b.Pinned,
		Trust: b.Trust, Provenance: b.Provenance.provenance(ctx), Space: s.space}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	v, ok, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	if ok {
		p.IfVersion = &v
	}
	if b.Text != nil {
		cur, err := s.memories.Get(ctx, r.Tx, r.Org, id)
		if err != nil {
			return nil, err
		}
		if p.TextChanged(cur) {
			if p.Vector, err = s.embedOne(ctx, *b.Text); err != nil {
				return nil, err
			}
		}
	}
	m, err := s.memories.Supersede(ctx, r.Tx, r.Org, id, p)
	if err != nil {
		return nil, err
	}
	return memoryOK(m, http.StatusOK, nil), nil
}

var opDeleteMemory = huma.Operation{
	OperationID: "delete-memory", Method: http.MethodDelete, Path: "/v1/memories/{id}", Tags: []string{"semantic"},
	Summary: "Delete a memory with its history",
	Description: "Removes every version (text, vector, history) of the memory this id belongs to, and stored " +
		"idempotent responses that quoted it. The retrieval log keeps its rows (ids only, no text).",
}

func (s *Server) deleteMemory(ctx context.Context, r *Request, in *memoryIDInput) (*deleteMemoryOutput, error) {
	id, err := in.uuid()
	if err != nil {
		return nil, err
	}
	ids, err := s.memories.Delete(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	out := &deleteMemoryOutput{}
	out.Body.ID, out.Body.Versions = in.ID, ids
	return out, nil
}

var opMemoryHistory = huma.Operation{
	OperationID: "memory-history", Method: http.MethodGet, Path: "/v1/memories/{id}/history", Tags: []string{"semantic"},
	Summary: "List a memory's versions",
	Description: "Oldest first. Each version says who wrote it (provenance.key_id, provenance.agent_id) and when " +
		"(valid_from), and when and by what it was superseded (valid_to, superseded_by).",
}

func (s *Server) memoryHistory(ctx context.Context, r *Request, in *memoryIDInput) (*historyOutput, error) {
	id, err := in.uuid()
	if err != nil {
		return nil, err
	}
	ms, err := s.memories.History(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	return &historyOutput{Body: List[semantic.Memory]{Items: ms}}, nil
}

var opVerifyMemory = huma.Operation{
	OperationID: "verify-memory", Method: http.MethodPost, Path: "/v1/memories/{id}/verify", Tags: []string{"semantic"},
	Summary: "Re-confirm a memory",
	Description: "Sets last_verified_at (and last_verified_by, the key) on the current version: it is no longer " +
		"stale until the verification age passes again.",
}

func (s *Server) verifyMemory(ctx context.Context, r *Request, in *memoryIDInput) (*memoryOutput, error) {
	id, err := in.uuid()
	if err != nil {
		return nil, err
	}
	p := r.Caller
	m, err := s.memories.Verify(ctx, r.Tx, r.Org, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	out := memoryOK(m, http.StatusOK, nil)
	out.Location = ""
	return out, nil
}

var opMemoryRetrievals = huma.Operation{
	OperationID: "memory-retrievals", Method: http.MethodGet, Path: "/v1/memories/{id}/retrievals", Tags: []string{"semantic"},
	Summary: "Which requests were served this memory",
	Description: "The retrieval log of one memory version: request id, key, scope, job, rank, score and time. " +
		"Answers \"which runs used this (possibly poisoned) memory?\".",
}

func (s *Server) memoryRetrievals(ctx context.Context, r *Request, in *retrievalsInput) (*retrievalsOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	var subject string // GDPR Art. 18: the memory's subject (enforced by the wrapper)
	if m, err := s.memories.Get(ctx, r.Tx, r.Org, id); err == nil {
		subject = m.UserID
	}
	rs, err := s.memories.Retrievals(ctx, r.Tx, r.Org, id, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &retrievalsOutput{subject: subject, Body: page(rs, limit, func(r semantic.Retrieval) string { return strconv.FormatInt(r.ID, 10) })}, nil
}

// embedOne embeds one text with the server's embedder.
func (s *Server) embedOne(ctx context.Context, text string) ([]float32, error) {
	vs, err := s.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, err
	}
	return vs[0], nil
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: subjects.go). A search for a
// restricted subject sees org-, agent- and session-level memories only, never the subject's.

func (in *searchInput) scopeUser() *string      { return &in.Body.UserID }
func (in *similarJobsInput) scopeUser() *string { return &in.Body.UserID }
func (o *memoryOutput) subjectUsers() []string  { return []string{o.Body.UserID} }
func (o *historyOutput) subjectUsers() []string {
	if len(o.Body.Items) == 0 {
		return nil
	}
	return []string{o.Body.Items[0].UserID}
}
func (o *retrievalsOutput) subjectUsers() []string { return []string{o.subject} }
