package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/strata"
)

// The graph API (docs/graph.md). Reads leave out restricted subjects' entities and
// relations (GDPR Art. 18) through the tier's Hide lists, filled from the org's restricted
// set (graphHide); a read that starts from a restricted subject's entity answers 403.

// graphHide is the org's restricted subjects, for the tier's Hide lists.
func (s *Server) graphHide(ctx context.Context, r *Request) ([]string, error) {
	return s.Restrictions.Subjects(ctx, r.Tx, r.Org)
}

// graphSpace is the embedder's space as the graph tier names it.
func (s *Server) graphSpace() graph.Space {
	return graph.Space{Embedder: s.space.Embedder, Model: s.space.Model, Dims: s.space.Dims}
}

// renameField reports a tier's field error under the name the caller sent it as.
func renameField(err error, from, to string) error {
	var fe *strata.FieldError
	if errors.As(err, &fe) && fe.Field == from {
		c := *fe
		c.Field = to
		return &c
	}
	return err
}

// sourceMemory parses a source_memory_id and checks it names a memory (any version) in the
// write's scope: of the same user as the write's user_id, or an org-level memory for an
// org-level write. Provenance links to another org's memory, another user's (a restricted
// subject's included) or none are refused (erasure and export by memory follow them).
func (s *Server) sourceMemory(ctx context.Context, r *Request, raw string, sc strata.Scope) (*uuid.UUID, error) {
	id, err := optGraphID("source_memory_id", raw)
	if err != nil || id == nil {
		return id, err
	}
	m, err := s.Memories.Get(ctx, r.Tx, r.Org, *id)
	if err != nil {
		if errors.Is(err, strata.ErrNotFound) {
			return nil, strata.Invalid("source_memory_id", "names no memory of this org")
		}
		return nil, err
	}
	if m.UserID != sc.UserID {
		if sc.UserID == "" {
			return nil, strata.Invalid("source_memory_id", "names a user's memory: an org-level write takes an org-level memory")
		}
		return nil, strata.Invalid("source_memory_id", "names no memory of this write's user_id")
	}
	return id, nil
}

func parseGraphID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, strata.Invalid(field, "must be a UUID")
	}
	return id, nil
}

func optGraphID(field, s string) (*uuid.UUID, error) {
	if s == "" {
		return nil, nil
	}
	id, err := parseGraphID(field, s)
	return &id, err
}

// graphAsOf reads the as_of and recorded_as_of query parameters.
func graphAsOf(world, record string) (graph.AsOf, error) {
	w, err := queryTime("as_of", world)
	if err != nil {
		return graph.AsOf{}, err
	}
	k, err := queryTime("recorded_as_of", record)
	return graph.AsOf{World: w, Record: k}, err
}

func (s *Server) searchGraphEntities(ctx context.Context, r *Request, in *api.GraphSearchInput) (*api.GraphSearchOutput, error) {
	sc := in.Scope(r.Org)
	if strings.TrimSpace(in.Q) == "" {
		return nil, strata.Invalid("q", "must not be blank")
	}
	if err := strata.CheckText("q", in.Q); err != nil {
		return nil, err
	}
	vec, err := s.embedOne(ctx, in.Q)
	if err != nil {
		return nil, err
	}
	hide, err := s.graphHide(ctx, r)
	if err != nil {
		return nil, err
	}
	res, err := s.Graph.Search(ctx, r.Tx, r.Org, graph.SearchQuery{Scope: &sc, Text: in.Q, Vector: vec,
		Space: s.graphSpace(), Limit: in.Limit, Hide: hide})
	if err != nil {
		return nil, renameField(err, "text", "q")
	}
	if res == nil {
		res = []graph.SearchResult{}
	}
	return &api.GraphSearchOutput{Body: api.List[graph.SearchResult]{Items: res}}, nil
}

// entityRead is what a read of one entity as of a time needs: the entity's id, the times,
// and the restricted subjects to hide.
type entityRead struct {
	id   uuid.UUID
	at   graph.AsOf
	hide []string
}

func (s *Server) readEntityAsOf(ctx context.Context, r *Request, rawID, asOf, recordedAsOf string) (entityRead, error) {
	var e entityRead
	var err error
	if e.id, err = parseGraphID("id", rawID); err != nil {
		return e, err
	}
	if e.at, err = graphAsOf(asOf, recordedAsOf); err != nil {
		return e, err
	}
	e.hide, err = s.graphHide(ctx, r)
	return e, err
}

func (s *Server) getGraphEntity(ctx context.Context, r *Request, in *api.GraphAboutInput) (*api.GraphAboutOutput, error) {
	e, err := s.readEntityAsOf(ctx, r, in.ID, in.AsOf, in.RecordedAsOf)
	if err != nil {
		return nil, err
	}
	a, err := s.Graph.About(ctx, r.Tx, r.Org, graph.AboutQuery{ID: e.id, At: e.at, Limit: in.Limit, Hide: e.hide})
	if err != nil {
		return nil, err
	}
	if a.Relations == nil {
		a.Relations = []graph.Relation{}
	}
	return &api.GraphAboutOutput{Body: a}, nil
}

func (s *Server) graphNeighbors(ctx context.Context, r *Request, in *api.GraphNeighborsInput) (*api.GraphNeighborsOutput, error) {
	e, err := s.readEntityAsOf(ctx, r, in.ID, in.AsOf, in.RecordedAsOf)
	if err != nil {
		return nil, err
	}
	q := graph.NeighborsQuery{ID: e.id, Depth: in.Depth, Limit: in.Limit, At: e.at, Hide: e.hide}
	if in.UserID != "" || in.AgentID != "" || in.SessionID != "" {
		sc := in.Scope(r.Org)
		q.Scope = &sc
	}
	ns, err := s.Graph.Neighbors(ctx, r.Tx, r.Org, q)
	if err != nil {
		return nil, err
	}
	if ns == nil {
		ns = []graph.Neighbor{}
	}
	return &api.GraphNeighborsOutput{Body: api.List[graph.Neighbor]{Items: ns}}, nil
}

func (s *Server) graphHistory(ctx context.Context, r *Request, in *api.GraphHistoryInput) (*api.GraphHistoryOutput, error) {
	id, err := parseGraphID("id", in.ID)
	if err != nil {
		return nil, err
	}
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	after, err := optGraphID("cursor", in.Cursor)
	if err != nil {
		return nil, err
	}
	hide, err := s.graphHide(ctx, r)
	if err != nil {
		return nil, err
	}
	rels, err := s.Graph.History(ctx, r.Tx, r.Org, graph.HistoryQuery{EntityID: id, Predicate: in.Predicate,
		Limit: limit + 1, After: after, Hide: hide})
	if err != nil {
		return nil, err
	}
	return &api.GraphHistoryOutput{Body: page(rels, limit, func(x graph.Relation) string { return x.ID.String() })}, nil
}

func (s *Server) resolveGraphEntity(ctx context.Context, r *Request, in *api.GraphResolveInput) (*api.GraphEntityOutput, error) {
	b := in.Body
	src, err := s.sourceMemory(ctx, r, b.SourceMemoryID, b.Scope(r.Org))
	if err != nil {
		return nil, err
	}
	ri := graph.ResolveInput{Scope: b.Scope(r.Org), Name: b.Name, Type: b.Type, Aliases: b.Aliases,
		Summary: b.Summary, Space: s.graphSpace(), SourceMemoryID: src}
	// The embedding is of name + summary (docs/graph.md); a text the store refuses is
	// refused before the embedder is paid.
	if err := strata.CheckText("name", b.Name); err != nil {
		return nil, err
	}
	if err := strata.CheckText("summary", b.Summary); err != nil {
		return nil, err
	}
	if ri.Vector, err = s.embedOne(ctx, strings.TrimSpace(b.Name+"\n"+b.Summary)); err != nil {
		return nil, err
	}
	e, created, err := s.Graph.Resolve(ctx, r.Tx, ri)
	if err != nil {
		return nil, err
	}
	out := &api.GraphEntityOutput{Status: http.StatusOK, Location: "/v1/graph/entities/" + e.ID.String(),
		Body: api.GraphEntityOut{Entity: e, Created: created}}
	if created {
		out.Status = http.StatusCreated
	}
	return out, nil
}

func (s *Server) addGraphRelation(ctx context.Context, r *Request, in *api.GraphRelationInput) (*api.GraphRelationOutput, error) {
	b := in.Body
	subject, err := parseGraphID("subject_id", b.SubjectID)
	if err != nil {
		return nil, err
	}
	object, err := optGraphID("object_id", b.ObjectID)
	if err != nil {
		return nil, err
	}
	src, err := s.sourceMemory(ctx, r, b.SourceMemoryID, b.Scope(r.Org))
	if err != nil {
		return nil, err
	}
	p := provenance(ctx, b.Provenance)
	res, err := s.Graph.AddRelation(ctx, r.Tx, graph.RelationInput{Scope: b.Scope(r.Org), SubjectID: subject,
		Predicate: b.Predicate, ObjectID: object, ObjectValue: b.ObjectValue, Functional: b.Functional, Fact: b.Fact,
		Provenance: graph.Provenance{MemoryID: src, JobID: p.JobID, EventSeq: p.EventSeq, KeyID: p.KeyID, AgentID: p.AgentID},
		ValidFrom:  b.ValidFrom, ValidTo: b.ValidTo})
	if err != nil {
		return nil, err
	}
	out := &api.GraphRelationOutput{Status: http.StatusOK, Body: res}
	if res.Created {
		out.Status = http.StatusCreated
	}
	return out, nil
}

func (s *Server) mergeGraphEntity(ctx context.Context, r *Request, in *api.GraphMergeInput) (*api.GraphMergeOutput, error) {
	merged, err := parseGraphID("id", in.ID)
	if err != nil {
		return nil, err
	}
	into, err := parseGraphID("into", in.Body.Into)
	if err != nil {
		return nil, err
	}
	res, err := s.Graph.Merge(ctx, r.Tx, r.Org, into, merged)
	if err != nil {
		// The tier calls the entity merged "merged_id"; the request names it in the path.
		return nil, renameField(err, "merged_id", "path.id")
	}
	return &api.GraphMergeOutput{Body: res}, nil
}

func (s *Server) splitGraphEntity(ctx context.Context, r *Request, in *api.GraphSplitInput) (*api.GraphSplitOutput, error) {
	from, err := parseGraphID("id", in.ID)
	if err != nil {
		return nil, err
	}
	b := in.Body
	rels := make([]uuid.UUID, 0, len(b.Relations))
	for i, x := range b.Relations {
		id, err := uuid.Parse(x)
		if err != nil {
			return nil, strata.Invalid("relations["+strconv.Itoa(i)+"]", "must be a UUID")
		}
		rels = append(rels, id)
	}
	res, err := s.Graph.Split(ctx, r.Tx, r.Org, graph.SplitInput{From: from, Name: b.Name, Type: b.Type,
		Aliases: b.Aliases, Relations: rels})
	if err != nil {
		return nil, err
	}
	return &api.GraphSplitOutput{Body: res}, nil
}

func (s *Server) deleteGraphEntity(ctx context.Context, r *Request, in *api.GraphEntityIDInput) (*api.GraphDeleteOutput, error) {
	id, err := parseGraphID("id", in.ID)
	if err != nil {
		return nil, err
	}
	d, err := s.Graph.Delete(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	return &api.GraphDeleteOutput{Body: d}, nil
}
