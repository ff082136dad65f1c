package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Entity is a person, place, organisation or thing in graph memory (docs/graph.md).
type Entity struct {
	ID         string     `json:"id"`
	UserID     string     `json:"user_id,omitempty"`
	AgentID    string     `json:"agent_id,omitempty"`
	SessionID  string     `json:"session_id,omitempty"`
	Name       string     `json:"name"`
	Type       string     `json:"type,omitempty"`
	Aliases    []string   `json:"aliases"`
	Summary    string     `json:"summary,omitempty"`
	MergedInto *string    `json:"merged_into,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	SourceIDs  []string   `json:"source_memory_ids,omitempty"`
	Embedding  *Embedding `json:"embedding,omitempty"`
	// Created is set by ResolveEntity: a new entity was made (false: the name or an alias
	// resolved to an existing one).
	Created bool `json:"created"`
}

// Embedding names the space of an entity's stored vector.
type Embedding struct {
	Embedder string `json:"embedder"`
	Model    string `json:"model"`
	Dims     int    `json:"dims"`
}

// Relation is one version of subject -predicate-> object, with world and record time.
type Relation struct {
	ID           string     `json:"id"`
	UserID       string     `json:"user_id,omitempty"`
	AgentID      string     `json:"agent_id,omitempty"`
	SessionID    string     `json:"session_id,omitempty"`
	SubjectID    string     `json:"subject_id"`
	SubjectName  string     `json:"subject_name,omitempty"`
	Predicate    string     `json:"predicate"`
	ObjectID     *string    `json:"object_id,omitempty"`
	ObjectName   string     `json:"object_name,omitempty"`
	ObjectValue  *string    `json:"object_value,omitempty"`
	Functional   bool       `json:"functional"`
	Fact         string     `json:"fact,omitempty"`
	ValidFrom    time.Time  `json:"valid_from"`
	ValidTo      *time.Time `json:"valid_to,omitempty"`
	RecordedAt   time.Time  `json:"recorded_at"`
	SupersededAt *time.Time `json:"superseded_at,omitempty"`
	SupersededBy *string    `json:"superseded_by,omitempty"`
}

// EntityInput is an entity to resolve (find by name or alias in its scope, or create).
type EntityInput struct {
	Name    string   `json:"name"`
	Type    string   `json:"type,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
	Summary string   `json:"summary,omitempty"`
	Scope
	SourceMemoryID string `json:"source_memory_id,omitempty"`
}

// ResolveEntity finds the entity of in's scope that has its name or an alias, or creates it.
func (c *Client) ResolveEntity(ctx context.Context, in EntityInput) (Entity, error) {
	var out Entity
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/graph/entities", Body: in}, &out)
	return out, err
}

// RelationInput is a relation to add: ObjectID or ObjectValue.
type RelationInput struct {
	SubjectID   string  `json:"subject_id"`
	Predicate   string  `json:"predicate"`
	ObjectID    string  `json:"object_id,omitempty"`
	ObjectValue *string `json:"object_value,omitempty"`
	// Functional: one object at a time; a new one closes the one in force (kept as history).
	Functional bool   `json:"functional,omitempty"`
	Fact       string `json:"fact,omitempty"`
	Scope
	ValidFrom      *time.Time  `json:"valid_from,omitempty"`
	ValidTo        *time.Time  `json:"valid_to,omitempty"`
	SourceMemoryID string      `json:"source_memory_id,omitempty"`
	Provenance     *Provenance `json:"provenance,omitempty"`
}

// RelationAdded is AddRelation's answer.
type RelationAdded struct {
	Relation Relation `json:"relation"`
	Created  bool     `json:"created"`          // false: the same relation was in force
	Closed   []string `json:"closed,omitempty"` // relations the new one contradicted, closed
}

// AddRelation adds a relation (the same one in force is answered, not written again).
func (c *Client) AddRelation(ctx context.Context, in RelationInput) (RelationAdded, error) {
	var out RelationAdded
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/graph/relations", Body: in}, &out)
	return out, err
}

// EntityHit is one search result.
type EntityHit struct {
	Entity     Entity   `json:"entity"`
	Score      float64  `json:"score"`
	Exact      bool     `json:"exact,omitempty"`
	TextRank   int      `json:"text_rank,omitempty"`
	VectorRank int      `json:"vector_rank,omitempty"`
	Similarity *float64 `json:"similarity,omitempty"`
}

// SearchEntities finds entities by name, alias or description, visible from sc.
func (c *Client) SearchEntities(ctx context.Context, q string, sc Scope, limit int) ([]EntityHit, error) {
	v := sc.query(url.Values{"q": {q}})
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out Page[EntityHit]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/graph/entities", Query: v}, &out)
	return out.Items, err
}

// AsOf picks a moment on each time axis: World (what was true then), Record (what Strata
// knew then). Zero: in force now.
type AsOf struct {
	World  *time.Time
	Record *time.Time
}

func (a AsOf) query(v url.Values) url.Values {
	if a.World != nil {
		v.Set("as_of", a.World.UTC().Format(time.RFC3339Nano))
	}
	if a.Record != nil {
		v.Set("recorded_as_of", a.Record.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// EntityAbout is an entity with its relations as subject or object.
type EntityAbout struct {
	Entity    Entity     `json:"entity"`
	Relations []Relation `json:"relations"`
}

// AboutEntity reads an entity and its relations in force, or as of at.
func (c *Client) AboutEntity(ctx context.Context, id string, at AsOf) (EntityAbout, error) {
	var out EntityAbout
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/graph/entities/" + PathEscape(id), Query: at.query(url.Values{})}, &out)
	return out, err
}

// Neighbor is an entity reached from another, with the path and the last step's relation.
type Neighbor struct {
	Entity Entity   `json:"entity"`
	Depth  int      `json:"depth"`
	Path   []string `json:"path"`
	Via    Relation `json:"via"`
}

// Neighbors walks relations from id up to depth (1-3) steps.
func (c *Client) Neighbors(ctx context.Context, id string, depth int, at AsOf) ([]Neighbor, error) {
	v := at.query(url.Values{})
	if depth > 0 {
		v.Set("depth", strconv.Itoa(depth))
	}
	var out Page[Neighbor]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/graph/entities/" + PathEscape(id) + "/neighbors", Query: v}, &out)
	return out.Items, err
}

// EntityHistory pages through every version of an entity's relations.
func (c *Client) EntityHistory(ctx context.Context, id, predicate, cursor string, limit int) (Page[Relation], error) {
	v := url.Values{}
	if predicate != "" {
		v.Set("predicate", predicate)
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out Page[Relation]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/graph/entities/" + PathEscape(id) + "/history", Query: v}, &out)
	return out, err
}

// EntityMerge is what a merge changed.
type EntityMerge struct {
	Survivor  Entity `json:"survivor"`
	Relations int64  `json:"relations"`
	Closed    int64  `json:"closed"`
}

// MergeEntity merges id into into (admin keys).
func (c *Client) MergeEntity(ctx context.Context, id, into string) (EntityMerge, error) {
	var out EntityMerge
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/graph/entities/" + PathEscape(id) + "/merge",
		Body: map[string]string{"into": into}}, &out)
	return out, err
}

// EntitySplit is what a split left.
type EntitySplit struct {
	From      Entity `json:"from"`
	New       Entity `json:"new"`
	Relations int64  `json:"relations"`
}

// SplitInput names the new entity and what moves to it.
type SplitInput struct {
	Name      string   `json:"name"`
	Type      string   `json:"type,omitempty"`
	Aliases   []string `json:"aliases,omitempty"`
	Relations []string `json:"relations,omitempty"`
}

// SplitEntity moves aliases and relations of id to a new entity (admin keys).
func (c *Client) SplitEntity(ctx context.Context, id string, in SplitInput) (EntitySplit, error) {
	var out EntitySplit
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/graph/entities/" + PathEscape(id) + "/split", Body: in}, &out)
	return out, err
}

// EntityDeletion counts what DeleteEntity removed.
type EntityDeletion struct {
	Entities  int64 `json:"entities"`
	Relations int64 `json:"relations"`
}

// DeleteEntity removes an entity, every relation version naming it and its tombstones.
func (c *Client) DeleteEntity(ctx context.Context, id string) (EntityDeletion, error) {
	var out EntityDeletion
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: "/v1/graph/entities/" + PathEscape(id)}, &out)
	return out, err
}
