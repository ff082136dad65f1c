package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// provenance is the tier's provenance of a write: the caller's key and what the body names.
func provenance(ctx context.Context, p *api.ProvenanceBody) semantic.Provenance {
	pr, _ := auth.FromContext(ctx)
	out := semantic.Provenance{KeyID: pr.KeyID}
	if p != nil {
		out.JobID, out.EventSeq, out.AgentID = p.JobID, p.EventSeq, p.AgentID
	}
	return out
}

func memoryOK(m semantic.Memory, status int, d *semantic.Dedup) *api.MemoryOutput {
	return &api.MemoryOutput{Status: status, ETag: etag(int64(m.Version)), Location: "/v1/memories/" + m.ID.String(),
		Body: api.MemoryOut{Memory: m, Deduplicated: d != nil, Dedup: d}}
}

// searchRequest is a search body as the semantic tier's request.
func searchRequest(r *Request, b api.SearchBody) semantic.SearchRequest {
	return semantic.SearchRequest{Scope: r.Scope(b.UserID, b.AgentID, b.SessionID), ScopeFilter: b.ScopeMatch == "filter",
		Text: b.Query, Kinds: b.Kinds,
		Metadata: b.Metadata, Trust: b.Trust, CreatedAfter: b.CreatedAfter, CreatedBefore: b.CreatedBefore,
		AsOf: b.AsOf, TopK: b.TopK, ExcludeStale: b.ExcludeStale, StaleAfter: b.StaleAfter,
		Provenance: b.Provenance.Filter(), IncludeQuarantined: b.IncludeQuarantined, Admin: r.Caller.Role == strata.RoleAdmin}
}

func (s *Server) createMemory(ctx context.Context, r *Request, in *api.CreateMemoryInput) (*api.MemoryOutput, error) {
	b := in.Body
	n := semantic.NewMemory{Scope: b.Scope(r.Org), Kind: cmp.Or(b.Kind, semantic.KindFact), Text: b.Text,
		Metadata: b.Metadata, Importance: 0.5, Pinned: b.Pinned, Trust: b.Trust,
		Provenance: provenance(ctx, b.Provenance), Space: s.space}
	if b.Importance != nil {
		n.Importance = *b.Importance
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if b.Graph && s.Extraction == nil {
		return nil, s.extractionProblem(ctx, extraction.ErrNotConfigured)
	}
	if b.Graph { // an org whose policy turns extraction off: no model call, no embedding
		if err := s.Extraction.CheckEnabled(ctx, r.Tx, r.Org); err != nil {
			return nil, s.extractionProblem(ctx, err)
		}
	}
	// A restricted subject's new memory is stored (Art. 18(2)), but nothing acts on what they
	// had stored: a duplicate would update the stored memory and answer with it, and a
	// graph extraction would resolve against their entities. Both are refused (the graph
	// one before the text goes to the embedder), the write in the request's transaction (not
	// committed in its own trip) so that it rolls back.
	restricted := false
	var err error
	if b.UserID != "" {
		if restricted, err = s.Restrictions.Restricted(ctx, r.sess, r.Org, b.UserID); err != nil {
			return nil, err
		}
		if restricted && b.Graph {
			return nil, strata.ErrRestricted
		}
	}
	if n.Vector, err = s.embedOne(ctx, b.Text); err != nil {
		return nil, err
	}
	var m semantic.Memory
	var dedup *semantic.Dedup
	var rider func(arg func(any) string) string
	if !b.Graph && !restricted { // a graph's extraction runs after the write, in its transaction
		rider = s.tripAudit(ctx, r)
	}
	if rider != nil {
		// One round trip: BEGIN, the org, the scope lock, the statement (duplicate checks,
		// insert or dedup update, audit record) and COMMIT (committrip.go).
		n.Rider = rider
		op, err := s.Memories.PrepareCreate(ctx, r.Tx, n, true)
		if err != nil {
			return nil, err
		}
		if err := r.sess.CommitInTrip(ctx, op.Batch()); err != nil {
			return nil, err
		}
		m, dedup = op.Result()
	} else if m, dedup, err = s.Memories.Create(ctx, r.Tx, n); err != nil {
		return nil, err
	}
	if restricted && dedup != nil {
		return nil, strata.ErrRestricted
	}
	status := http.StatusCreated
	if dedup != nil {
		status = http.StatusOK
	}
	out := memoryOK(m, status, dedup)
	if b.Graph {
		// One model call on the memory's text, applied on the request's transaction: the
		// memory and its entities and relations commit together, or not at all.
		d, err := s.Extraction.ExtractGraph(ctx, r.Tx, extraction.GraphMemory{Scope: m.Scope(r.Org), MemoryID: m.ID,
			Text: b.Text, KeyID: n.Provenance.KeyID, AgentID: n.Provenance.AgentID})
		if err != nil {
			return nil, s.extractionProblem(ctx, err)
		}
		out.Body.Graph = &api.MemoryGraph{Model: d.Model, PromptVersion: d.PromptVersion, Entities: d.Entities,
			Relations: d.Relations, Usage: d.Usage}
	}
	return out, nil
}

func (s *Server) searchMemories(ctx context.Context, r *Request, in *api.SearchInput) (*api.SearchOutput, error) {
	if in.FiltersOutRestricted() { // only a restricted subject's memories could match (Art. 18)
		out := &api.SearchOutput{}
		out.Body.Items = []semantic.Result{}
		return out, nil
	}
	b := in.Body
	q, err := searchRequest(r, b).Query(s.space)
	if err != nil {
		return nil, quarantineAdminOnly(err)
	}
	if q.Vector, err = s.embedOne(ctx, b.Query); err != nil {
		return nil, err
	}
	s.orgVerifyAge(&q)
	if q.ReadsAnyUser() {
		// A filter on the agent, session, metadata or nothing matches every user's
		// memories: restricted subjects' are left out in the statement (Art. 18). From the
		// replica's cache, no round trip; nil for an org that restricts nobody.
		if q.Hide, err = s.Restrictions.Subjects(ctx, r.Tx, r.Org); err != nil {
			return nil, err
		}
	}
	res, info, err := s.Memories.Search(ctx, r.Tx, q)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	s.Memories.QueueServed(r.Session(), s.Access, semantic.Served{Scope: q.Scope, RequestID: httpops.RequestID(ctx),
		Operation: "search", KeyID: p.KeyID, JobID: b.JobID}, res)
	out := &api.SearchOutput{}
	out.Body.Items, out.Body.Search = res, info
	return out, nil
}

func (s *Server) similarJobs(ctx context.Context, r *Request, in *api.SimilarJobsInput) (*api.SimilarJobsOutput, error) {
	b := in.Body
	q, err := semantic.SimilarJobsRequest{Scope: r.Scope(b.UserID, b.AgentID, b.SessionID), Text: b.Query,
		TopK: b.TopK, Trust: b.Trust, Provenance: b.Provenance.Filter()}.Query(s.space)
	if err != nil {
		return nil, err
	}
	if q.Vector, err = s.embedOne(ctx, b.Query); err != nil {
		return nil, err
	}
	res, _, err := s.Memories.Search(ctx, r.Tx, q)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	s.Memories.QueueServed(r.Session(), s.Access, semantic.Served{Scope: q.Scope, RequestID: httpops.RequestID(ctx),
		Operation: "similar_jobs", KeyID: p.KeyID, JobID: b.JobID}, res)
	return &api.SimilarJobsOutput{Body: api.List[semantic.SimilarJob]{Items: semantic.SimilarJobs(res)}}, nil
}

func (s *Server) getMemory(ctx context.Context, r *Request, in *api.MemoryIDInput) (*api.MemoryOutput, error) {
	id, err := in.UUID()
	if err != nil {
		return nil, err
	}
	m, err := s.Memories.Get(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	out := memoryOK(m, http.StatusOK, nil)
	out.Location = ""
	return out, nil
}

func (s *Server) updateMemory(ctx context.Context, r *Request, in *api.PatchMemoryInput) (*api.MemoryOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	b := in.Body
	p := semantic.Patch{Text: b.Text, Metadata: b.Metadata, Importance: b.Importance, Pinned: b.Pinned,
		Trust: b.Trust, Provenance: provenance(ctx, b.Provenance), Space: s.space}
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
		cur, err := s.Memories.Get(ctx, r.Tx, r.Org, id)
		if err != nil {
			return nil, err
		}
		if p.TextChanged(cur) {
			if p.Vector, err = s.embedOne(ctx, *b.Text); err != nil {
				return nil, err
			}
		}
	}
	m, err := s.Memories.Supersede(ctx, r.Tx, r.Org, id, p)
	if err != nil {
		return nil, err
	}
	return memoryOK(m, http.StatusOK, nil), nil
}

func (s *Server) deleteMemory(ctx context.Context, r *Request, in *api.MemoryIDInput) (*api.DeleteMemoryOutput, error) {
	id, err := in.UUID()
	if err != nil {
		return nil, err
	}
	ids, err := s.Memories.Delete(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	out := &api.DeleteMemoryOutput{}
	out.Body.ID, out.Body.Versions = in.ID, ids
	return out, nil
}

func (s *Server) memoryHistory(ctx context.Context, r *Request, in *api.MemoryIDInput) (*api.HistoryOutput, error) {
	id, err := in.UUID()
	if err != nil {
		return nil, err
	}
	ms, err := s.Memories.History(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	return &api.HistoryOutput{Body: api.List[semantic.Memory]{Items: ms}}, nil
}

func (s *Server) verifyMemory(ctx context.Context, r *Request, in *api.MemoryIDInput) (*api.MemoryOutput, error) {
	id, err := in.UUID()
	if err != nil {
		return nil, err
	}
	p := r.Caller
	m, err := s.Memories.Verify(ctx, r.Tx, r.Org, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	out := memoryOK(m, http.StatusOK, nil)
	out.Location = ""
	return out, nil
}

func (s *Server) memoryRetrievals(ctx context.Context, r *Request, in *api.RetrievalsInput) (*api.RetrievalsOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	var subject string // GDPR Art. 18: the memory's subject (enforced by the wrapper)
	if m, err := s.Memories.Get(ctx, r.Tx, r.Org, id); err == nil {
		subject = m.UserID
	}
	rs, err := s.Memories.Retrievals(ctx, r.Tx, r.Org, id, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	out := &api.RetrievalsOutput{Body: page(rs, limit, func(r semantic.Retrieval) string { return strconv.FormatInt(r.ID, 10) })}
	out.SetSubjects(subject)
	return out, nil
}

// embedOne embeds one text with the server's embedder.
func (s *Server) embedOne(ctx context.Context, text string) ([]float32, error) {
	vs, err := s.Embedder.Embed(ctx, []string{text})
	if err != nil {
		return nil, err
	}
	return vs[0], nil
}

// queryTime parses an optional RFC 3339 query parameter.
func queryTime(field, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, strata.Invalid(field, "must be an RFC 3339 time (2026-12-02T10:00:00Z)")
	}
	return &t, nil
}

func (s *Server) listMemories(ctx context.Context, r *Request, in *api.ListMemoriesInput) (*api.ListMemoriesOutput, error) {
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	after, err := queryTime("created_after", in.CreatedAfter)
	if err != nil {
		return nil, err
	}
	before, err := queryTime("created_before", in.CreatedBefore)
	if err != nil {
		return nil, err
	}
	ms, err := s.Memories.List(ctx, r.Tx, r.Org, semantic.ListFilter{UserID: in.UserID, AgentID: in.AgentID,
		SessionID: in.SessionID, Kind: in.Kind, Trust: in.Trust, Provenance: in.Provenance, KeyID: in.KeyID,
		CreatedAfter: after, CreatedBefore: before, Cursor: in.Cursor, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	return &api.ListMemoriesOutput{Body: page(ms, limit, semantic.ListCursor)}, nil
}
