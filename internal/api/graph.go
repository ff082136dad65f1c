package api

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/graph"
)

// The graph API (docs/graph.md): entities and bi-temporal relations, read by search, about,
// neighbours and history; written explicitly by agents; merged and split by admins.

// GraphEntityIDInput names an entity in the path.
type GraphEntityIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"An entity id (a merged entity's id reads its survivor)."`
}

type GraphSearchInput struct {
	Q string `query:"q" required:"true" minLength:"1" maxLength:"4096" doc:"A name, an alias or text to look for (hybrid: exact name or alias first, then full text and embedding similarity)."`
	ScopeQuery
	Limit int `query:"limit" minimum:"1" maximum:"100" doc:"Results wanted (default 10, at most 100)."`
}

// ScopeUser is the search's data subject (a restricted one is dropped from the scope).
func (in *GraphSearchInput) ScopeUser() *string { return &in.UserID }

type GraphSearchOutput struct {
	Body List[graph.SearchResult]
}

type GraphAboutInput struct {
	GraphEntityIDInput
	AsOf         string `query:"as_of" maxLength:"64" doc:"World time (RFC 3339): the relations true then. Default: those in force now."`
	RecordedAsOf string `query:"recorded_as_of" maxLength:"64" doc:"Record time (RFC 3339): answer with what Strata knew then (closings learned later are ignored)."`
	Limit        int    `query:"limit" minimum:"1" maximum:"1000" doc:"Relations at most (default 100)."`
}

type GraphAboutOutput struct {
	Body graph.About
}

type GraphNeighborsInput struct {
	GraphEntityIDInput
	Depth int `query:"depth" minimum:"1" maximum:"3" doc:"Steps to walk, 1-3 (default 1)."`
	ScopeQuery
	AsOf         string `query:"as_of" maxLength:"64" doc:"World time (RFC 3339) of the relations walked (default: in force now)."`
	RecordedAsOf string `query:"recorded_as_of" maxLength:"64" doc:"Record time (RFC 3339) of the relations walked."`
	Limit        int    `query:"limit" minimum:"1" maximum:"1000" doc:"Entities at most (default 100)."`
}

type GraphNeighborsOutput struct {
	Body List[graph.Neighbor]
}

type GraphHistoryInput struct {
	GraphEntityIDInput
	Predicate string `query:"predicate" maxLength:"200" doc:"Only this predicate (normalised as stored: \"Works at\" = works_at)."`
	Page
}

type GraphHistoryOutput struct {
	Body List[graph.Relation]
}

type GraphResolveInput struct {
	Body struct {
		Name string `json:"name" minLength:"1" maxLength:"500" doc:"The entity's name."`
		Type string `json:"type,omitempty" maxLength:"100" doc:"person, organization, place, ... (free-form)."`
		// Aliases are other forms of the name.
		Aliases []string `json:"aliases,omitempty" maxItems:"64" doc:"Other forms of the name (\"Ana\", \"Ana Silva\")."`
		Summary string   `json:"summary,omitempty" maxLength:"8192" doc:"What is known about it, in a few sentences (embedded with the name)."`
		ScopeBody
		SourceMemoryID string `json:"source_memory_id,omitempty" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The memory that mentioned it."`
	}
}

type GraphEntityOut struct {
	graph.Entity
	Created bool `json:"created" doc:"true when a new entity was made; false when the name or an alias resolved to an existing one."`
}

type GraphEntityOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     GraphEntityOut
}

type GraphRelationInput struct {
	Body struct {
		SubjectID   string  `json:"subject_id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The subject entity."`
		Predicate   string  `json:"predicate" minLength:"1" maxLength:"200" doc:"What the subject is or does to the object (normalised: \"Works at\" = works_at)."`
		ObjectID    string  `json:"object_id,omitempty" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The object entity (or object_value)."`
		ObjectValue *string `json:"object_value,omitempty" maxLength:"500" doc:"A literal object (\"director\"), instead of object_id."`
		Functional  bool    `json:"functional,omitempty" doc:"The subject has one object for this predicate at a time: a new one closes the one in force (kept as history)."`
		Fact        string  `json:"fact,omitempty" maxLength:"2000" doc:"The relation as a sentence (\"Ana manages the Lisbon store\")."`
		ScopeBody
		ValidFrom      *time.Time      `json:"valid_from,omitempty" doc:"When it became true in the world (default now)."`
		ValidTo        *time.Time      `json:"valid_to,omitempty" doc:"When it stopped being true, if it has."`
		SourceMemoryID string          `json:"source_memory_id,omitempty" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The memory it came from."`
		Provenance     *ProvenanceBody `json:"provenance,omitempty"`
	}
}

type GraphRelationOutput struct {
	Status int
	Body   graph.AddResult
}

type GraphMergeInput struct {
	GraphEntityIDInput
	Body struct {
		Into string `json:"into" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The surviving entity (same scope)."`
	}
}

type GraphMergeOutput struct {
	Body graph.MergeResult
}

type GraphSplitInput struct {
	GraphEntityIDInput
	Body struct {
		Name      string   `json:"name" minLength:"1" maxLength:"500" doc:"The new entity's name."`
		Type      string   `json:"type,omitempty" maxLength:"100"`
		Aliases   []string `json:"aliases,omitempty" maxItems:"64" doc:"Forms the entity knows that belong to the new one."`
		Relations []string `json:"relations,omitempty" maxItems:"1000" doc:"Relation ids (any version) that move to the new entity."`
	}
}

type GraphSplitOutput struct {
	Body graph.SplitResult
}

type GraphDeleteOutput struct {
	Body graph.Deletion
}

var OpSearchGraphEntities = huma.Operation{
	OperationID: "search-graph-entities", Method: http.MethodGet, Path: "/v1/graph/entities", Tags: []string{"graph"},
	Summary: "Search entities",
	Description: "Hybrid like memory search: an entity whose name or alias is q leads, then full text over names, " +
		"aliases and summaries fused (reciprocal rank) with embedding similarity of name + summary. The scope " +
		"composes as for memories (org-level entities and those of every level named). Restricted subjects' " +
		"entities (GDPR Art. 18) are left out.",
}

var OpGetGraphEntity = huma.Operation{
	OperationID: "get-graph-entity", Method: http.MethodGet, Path: "/v1/graph/entities/{id}", Tags: []string{"graph"},
	Summary: "An entity and its relations",
	Description: "The entity and its relations as subject or object: those in force now, or true at as_of " +
		"(world time), optionally as Strata knew them at recorded_as_of. A merged id reads its survivor.",
}

var OpGraphNeighbors = huma.Operation{
	OperationID: "graph-neighbors", Method: http.MethodGet, Path: "/v1/graph/entities/{id}/neighbors", Tags: []string{"graph"},
	Summary: "Entities near an entity",
	Description: "Entities reachable by relations (either direction) within depth steps (1-3), each once at its " +
		"shortest depth, nearest first, with the path and the relation of the last step. Cycle-safe and bounded.",
}

var OpGraphHistory = huma.Operation{
	OperationID: "graph-entity-history", Method: http.MethodGet, Path: "/v1/graph/entities/{id}/history", Tags: []string{"graph"},
	Summary:     "Relation history of an entity",
	Description: "Every version of the entity's relations, closed ones included, in recording order, paged.",
}

var OpResolveGraphEntity = huma.Operation{
	OperationID: "resolve-graph-entity", Method: http.MethodPost, Path: "/v1/graph/entities", Tags: []string{"graph"},
	Summary: "Resolve (find or create) an entity",
	Description: "The live entity of the same scope whose name or an alias matches the name or one of the aliases " +
		"(case and spacing ignored) is answered (200) and learns the new forms; otherwise a new one is made (201). " +
		"Name and summary are embedded by the server's embedder.",
}

var OpAddGraphRelation = huma.Operation{
	OperationID: "add-graph-relation", Method: http.MethodPost, Path: "/v1/graph/relations", Tags: []string{"graph"},
	Summary: "Add a relation",
	Description: "subject -predicate-> object entity or literal value. Both entities must be visible from the " +
		"scope written in. The same relation in force answers it (200); a functional relation with another object " +
		"in force closes that one (valid_to, superseded_at; kept as history) and is created (201).",
}

var OpMergeGraphEntity = huma.Operation{
	OperationID: "merge-graph-entity", Method: http.MethodPost, Path: "/v1/graph/entities/{id}/merge", Tags: []string{"graph"},
	Summary: "Merge an entity into another (admin)",
	Description: "Every relation version of {id} moves to into, which gains its name and aliases; {id} stays as a " +
		"tombstone that leads to into. Contradictions the merge makes are closed, not deleted.",
}

var OpSplitGraphEntity = huma.Operation{
	OperationID: "split-graph-entity", Method: http.MethodPost, Path: "/v1/graph/entities/{id}/split", Tags: []string{"graph"},
	Summary:     "Split an entity (admin)",
	Description: "A new entity of the same scope takes the aliases and relations named; the original keeps the rest.",
}

var OpDeleteGraphEntity = huma.Operation{
	OperationID: "delete-graph-entity", Method: http.MethodDelete, Path: "/v1/graph/entities/{id}", Tags: []string{"graph"},
	Summary:     "Delete an entity",
	Description: "Removes the entity, every relation version naming it and the tombstones that led to it, and counts them.",
}
