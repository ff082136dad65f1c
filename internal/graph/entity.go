package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

const entityCols = `id, user_id, agent_id, session_id, name, type, aliases, summary, embedder, model, dims,
	source_memory_ids, merged_into, created_at, updated_at`

// entityColsOf is entityCols qualified by a table alias.
func entityColsOf(a string) string {
	return a + `.id, ` + a + `.user_id, ` + a + `.agent_id, ` + a + `.session_id, ` + a + `.name, ` + a + `.type, ` +
		a + `.aliases, ` + a + `.summary, ` + a + `.embedder, ` + a + `.model, ` + a + `.dims, ` +
		a + `.source_memory_ids, ` + a + `.merged_into, ` + a + `.created_at, ` + a + `.updated_at`
}

// entityScan holds the destinations of entityCols.
type entityScan struct {
	e               Entity
	embedder, model *string
	dims            *int
}

func (x *entityScan) dest() []any {
	e := &x.e
	return []any{&e.ID, &e.UserID, &e.AgentID, &e.SessionID, &e.Name, &e.Type, &e.Aliases, &e.Summary,
		&x.embedder, &x.model, &x.dims, &e.SourceMemoryIDs, &e.MergedInto, &e.CreatedAt, &e.UpdatedAt}
}

func (x *entityScan) entity() Entity {
	e := x.e
	if x.dims != nil {
		e.Embedding = &Space{Dims: *x.dims}
		if x.embedder != nil {
			e.Embedding.Embedder = *x.embedder
		}
		if x.model != nil {
			e.Embedding.Model = *x.model
		}
	}
	if e.Aliases == nil {
		e.Aliases = []string{}
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return e
}

// scanEntity reads entityCols, followed by extra destinations.
func scanEntity(row pgx.Row, extra ...any) (Entity, error) {
	var x entityScan
	if err := row.Scan(append(x.dest(), extra...)...); err != nil {
		return Entity{}, err
	}
	return x.entity(), nil
}

// ResolveInput names an entity to find or create.
type ResolveInput struct {
	Scope   strata.Scope // the entity's scope (OrgID required)
	Name    string
	Type    string   // set on a new entity, or on a found one that has none
	Aliases []string // other forms of the name ("Ana", "Ana Silva")
	// Summary, when set, replaces the entity's summary.
	Summary string
	// Vector, when set, replaces the stored embedding; Space says what made it. The caller
	// embeds name + summary, and sends a new vector with a new summary (the store does not
	// know a stored vector has gone stale).
	Vector []float32
	Space  Space
	// SourceMemoryID, when set, is recorded as a memory that mentioned the entity.
	SourceMemoryID *uuid.UUID
}

func (in *ResolveInput) validate() error {
	if err := checkScope(in.Scope); err != nil {
		return err
	}
	if err := checkName("name", in.Name, true); err != nil {
		return err
	}
	if err := checkString("type", in.Type, MaxTypeLen, false); err != nil {
		return err
	}
	if err := checkString("summary", in.Summary, MaxSummaryLen, false); err != nil {
		return err
	}
	if len(in.Aliases) > MaxAliases {
		return strata.TooLarge("aliases", "must hold at most %d aliases, got %d", MaxAliases, len(in.Aliases))
	}
	for i, a := range in.Aliases {
		if err := checkName(fmt.Sprintf("aliases[%d]", i), a, true); err != nil {
			return err
		}
	}
	if in.Vector != nil {
		if in.Space.Dims != len(in.Vector) || len(in.Vector) == 0 {
			return strata.Invalid("embedding", "has %d dimensions, its space says %d", len(in.Vector), in.Space.Dims)
		}
		if in.Space.Embedder == "" {
			return strata.Invalid("embedding.embedder", "is required with a vector")
		}
	}
	return nil
}

// forms returns the display forms of name and aliases (whitespace collapsed, case kept)
// and their normalised keys, in order, one form per key.
func forms(name string, aliases []string) (display, keys []string) {
	for _, f := range append([]string{name}, aliases...) {
		f = strings.Join(strings.Fields(f), " ")
		k := Normalize(f)
		if k == "" || slices.Contains(keys, k) {
			continue
		}
		display = append(display, f)
		keys = append(keys, k)
	}
	return display, keys
}

// lockScope serialises resolution, merge and deletion of one scope's entities for the rest
// of the transaction. It must be its own statement: under READ COMMITTED the next
// statement's snapshot then sees what the previous holder committed.
func lockScope(ctx context.Context, db pg.DBTX, sc strata.Scope) error {
	_, err := db.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('strata.graph' || chr(31) || $1 || chr(31) || $2
		|| chr(31) || $3 || chr(31) || $4, 0))`, sc.OrgID, sc.UserID, sc.AgentID, sc.SessionID)
	return pg.Interpret(err)
}

// LockScope takes the lock Resolve takes on sc's entities, for the rest of the transaction.
// A caller that decides a resolution from a read of its own (extraction's embedding
// similarity: "A. Silva" is the known "Ana Silva") takes it before that read, so no other
// writer can create or change the scope's entities between the read and its Resolve; the
// lock is re-entrant within the transaction.
func (s *Store) LockScope(ctx context.Context, db pg.DBTX, sc strata.Scope) error {
	if err := checkScope(sc); err != nil {
		return err
	}
	return lockScope(ctx, db, sc)
}

// Resolve finds the live entity of in.Scope whose name or aliases match the name or any
// alias (normalised), or creates it, and answers whether it was created. A found entity
// gains the forms it did not know as aliases, the type if it had none, and the summary,
// vector and source memory when given. When several entities match, the one whose name is
// the given name wins, then one whose name is among the aliases, then the oldest; they are
// not merged (Merge does that on request).
func (s *Store) Resolve(ctx context.Context, db pg.DBTX, in ResolveInput) (Entity, bool, error) {
	if err := in.validate(); err != nil {
		return Entity{}, false, err
	}
	sc := in.Scope
	display, keys := forms(in.Name, in.Aliases)
	if err := lockScope(ctx, db, sc); err != nil {
		return Entity{}, false, err
	}
	// FOR NO KEY UPDATE, not FOR UPDATE: the row's key does not change, and foreign-key
	// checks of relation writes (KEY SHARE) naming the entity must not wait for us.
	row := db.QueryRow(ctx, `SELECT `+entityCols+`, keys FROM graph_entities
		WHERE org_id = $1 AND user_id = $2 AND agent_id = $3 AND session_id = $4 AND merged_into IS NULL AND keys && $5
		ORDER BY name_key = $6 DESC, name_key = ANY($5) DESC, created_at, id
		LIMIT 1 FOR NO KEY UPDATE`, sc.OrgID, sc.UserID, sc.AgentID, sc.SessionID, keys, keys[0])
	var known []string
	found, err := scanEntity(row, &known)
	now := s.now().UTC()
	var vec any
	var embedder, model *string
	var dims *int
	if in.Vector != nil {
		vec = pgvector.NewVector(in.Vector)
		embedder, model, dims = &in.Space.Embedder, &in.Space.Model, &in.Space.Dims
	}
	var sources []uuid.UUID
	if in.SourceMemoryID != nil {
		sources = []uuid.UUID{*in.SourceMemoryID}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		id, err := uuid.NewV7()
		if err != nil {
			return Entity{}, false, err
		}
		if sources == nil {
			sources = []uuid.UUID{}
		}
		e, err := scanEntity(db.QueryRow(ctx, `INSERT INTO graph_entities (org_id, id, user_id, agent_id, session_id,
				name, name_key, type, aliases, keys, summary, embedding, embedder, model, dims, source_memory_ids,
				created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17)
			RETURNING `+entityCols, sc.OrgID, id, sc.UserID, sc.AgentID, sc.SessionID, display[0], keys[0], in.Type,
			display[1:], keys, in.Summary, vec, embedder, model, dims, sources, now))
		if err != nil {
			return Entity{}, false, fmt.Errorf("creating an entity: %w", pg.Interpret(err))
		}
		return e, true, nil
	case err != nil:
		return Entity{}, false, fmt.Errorf("resolving an entity: %w", pg.Interpret(err))
	}

	// Found: add what it did not know.
	var newAliases, newKeys []string
	for i, k := range keys {
		if !slices.Contains(known, k) {
			newAliases, newKeys = append(newAliases, display[i]), append(newKeys, k)
		}
	}
	newSource := in.SourceMemoryID != nil && !slices.Contains(found.SourceMemoryIDs, *in.SourceMemoryID)
	newType := found.Type == "" && in.Type != ""
	if len(newKeys) == 0 && !newSource && !newType && in.Summary == "" && in.Vector == nil {
		return found, false, nil
	}
	if !newSource {
		sources = []uuid.UUID{}
	}
	e, err := scanEntity(db.QueryRow(ctx, `UPDATE graph_entities SET
			aliases = aliases || $3::text[], keys = keys || $4::text[],
			type = CASE WHEN type = '' THEN $5 ELSE type END,
			summary = CASE WHEN $6 = '' THEN summary ELSE $6 END,
			embedding = CASE WHEN $7::int IS NULL THEN embedding ELSE $8 END,
			embedder = CASE WHEN $7::int IS NULL THEN embedder ELSE $9 END,
			model = CASE WHEN $7::int IS NULL THEN model ELSE $10 END,
			dims = coalesce($7::int, dims),
			source_memory_ids = source_memory_ids || $11::uuid[],
			updated_at = $12
		WHERE org_id = $1 AND id = $2 RETURNING `+entityCols,
		sc.OrgID, found.ID, orEmpty(newAliases), orEmpty(newKeys), in.Type, in.Summary, dims, vec, embedder, model,
		sources, now))
	if err != nil {
		return Entity{}, false, fmt.Errorf("updating entity %s: %w", found.ID, pg.Interpret(err))
	}
	return e, false, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Get returns an entity of org by id, a tombstone too (its MergedInto names the survivor).
func (s *Store) Get(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) (Entity, error) {
	e, err := scanEntity(db.QueryRow(ctx, `SELECT `+entityCols+` FROM graph_entities WHERE org_id = $1 AND id = $2`, org, id))
	if err != nil {
		return Entity{}, pg.Interpret(err)
	}
	return e, nil
}

// live returns the entity, or its survivor when it was merged.
func (s *Store) live(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) (Entity, error) {
	e, err := s.Get(ctx, db, org, id)
	if err != nil || e.MergedInto == nil {
		return e, err
	}
	return s.Get(ctx, db, org, *e.MergedInto)
}

// visibleSQL is the scope-composition rule of docs/semantic.md for entities of alias a,
// with the query's user, agent and session at $u, $a, $s: every level the entity sets
// must match the query's. $all (boolean) lifts it (an org-wide read).
func visibleSQL(a, all, u, ag, s string) string {
	return fmt.Sprintf(`(%[2]s OR ((%[1]s.user_id = '' OR %[1]s.user_id = %[3]s) AND (%[1]s.agent_id = '' OR %[1]s.agent_id = %[4]s)
		AND (%[1]s.session_id = '' OR %[1]s.session_id = %[5]s)))`, a, all, u, ag, s)
}

// visibleFrom reports whether an entity is visible from scope sc (the Go twin of visibleSQL).
func visibleFrom(e Entity, sc strata.Scope) bool {
	return (e.UserID == "" || e.UserID == sc.UserID) && (e.AgentID == "" || e.AgentID == sc.AgentID) &&
		(e.SessionID == "" || e.SessionID == sc.SessionID)
}

// scopeArgs returns the $all, $u, $a, $s arguments for visibleSQL: nil is org-wide.
func scopeArgs(sc *strata.Scope) (bool, string, string, string) {
	if sc == nil {
		return true, "", "", ""
	}
	return false, sc.UserID, sc.AgentID, sc.SessionID
}

// LookupQuery finds entities by name.
type LookupQuery struct {
	Name string
	// Scope, when set, sees only entities visible from it; nil: any scope of the org.
	Scope *strata.Scope
	Limit int      // [100, up to MaxLimit]
	Hide  []string // restricted subjects (GDPR Art. 18): their entities are left out
}

// Lookup returns the live entities of org whose name or an alias is q.Name (normalised),
// most specific scope first.
func (s *Store) Lookup(ctx context.Context, db pg.DBTX, org string, q LookupQuery) ([]Entity, error) {
	if err := checkString("name", q.Name, MaxNameLen, true); err != nil {
		return nil, err
	}
	all, u, a, ss := scopeArgs(q.Scope)
	rows, err := db.Query(ctx, `SELECT `+entityCols+` FROM graph_entities e
		WHERE org_id = $1 AND merged_into IS NULL AND keys @> ARRAY[$2::text] AND `+visibleSQL("e", "$3", "$4", "$5", "$6")+`
		  AND NOT (user_id = ANY($8::text[]))
		ORDER BY (session_id <> '')::int + (agent_id <> '')::int + (user_id <> '')::int DESC, created_at, id
		LIMIT $7`, org, Normalize(q.Name), all, u, a, ss, checkLimit(q.Limit, 100), hidden(q.Hide))
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entity, error) { return scanEntity(r) })
	return out, pg.Interpret(err)
}

// MergeResult counts what a merge changed.
type MergeResult struct {
	Survivor  Entity `json:"survivor"`
	Relations int64  `json:"relations"` // relation rows re-pointed to the survivor
	Closed    int64  `json:"closed"`    // relations in force that the merge made contradictory, duplicate or self-referring, closed
}

// Merge folds entity merged into survivor (both of org, live, in the same scope): every
// relation of merged (every version) is re-pointed to survivor; where both had one in force
// for the same functional predicate, or the same relation twice, the older is closed
// (superseded by the other) so one stays in force, and relations between the two (now
// loops) stop being believed; survivor gains merged's name, aliases,
// source memories, and its type and summary where it had none; merged stays as a tombstone
// whose MergedInto is survivor, and earlier tombstones of merged point to survivor too.
func (s *Store) Merge(ctx context.Context, db pg.DBTX, org string, survivor, merged uuid.UUID) (MergeResult, error) {
	var res MergeResult
	if survivor == merged {
		return res, strata.Invalid("merged_id", "must differ from the survivor")
	}
	first, err := s.Get(ctx, db, org, survivor)
	if err != nil {
		return res, err
	}
	if err := lockScope(ctx, db, first.Scope(org)); err != nil {
		return res, err
	}
	rows, err := db.Query(ctx, `SELECT `+entityCols+`, keys FROM graph_entities WHERE org_id = $1 AND id = ANY($2)
		ORDER BY id FOR NO KEY UPDATE`, org, []uuid.UUID{survivor, merged}) // as Resolve: relation writes' key checks pass
	if err != nil {
		return res, pg.Interpret(err)
	}
	byID := map[uuid.UUID]Entity{}
	keysOf := map[uuid.UUID][]string{}
	for rows.Next() {
		var keys []string
		e, err := scanEntity(rows, &keys)
		if err != nil {
			rows.Close()
			return res, pg.Interpret(err)
		}
		byID[e.ID], keysOf[e.ID] = e, keys
	}
	if err := rows.Err(); err != nil {
		return res, pg.Interpret(err)
	}
	sv, ok1 := byID[survivor]
	mg, ok2 := byID[merged]
	switch {
	case !ok1:
		return res, strata.ErrNotFound
	case !ok2:
		return res, strata.NoSuch("merged_id", "no such entity")
	case sv.MergedInto != nil:
		return res, strata.Conflict("the survivor was itself merged", map[string]any{"merged_into": sv.MergedInto.String()})
	case mg.MergedInto != nil:
		return res, strata.Conflict("the entity was already merged", map[string]any{"merged_into": mg.MergedInto.String()})
	case sv.Scope(org) != mg.Scope(org):
		return res, strata.Invalid("merged_id", "must be in the survivor's scope")
	}
	now := s.now().UTC()

	// Pairs of relations in force that would both stay in force on the survivor: the same
	// functional predicate, or the same predicate and object. The older one is closed.
	tag, err := db.Exec(ctx, `WITH pairs AS (
			SELECT m.id AS mid, m.valid_from AS mvf, m.recorded_at AS mra, s.id AS sid, s.valid_from AS svf, s.recorded_at AS sra,
				(m.functional AND s.functional AND (
					(CASE WHEN m.object_id = $3 THEN $2 ELSE m.object_id END) IS DISTINCT FROM
					(CASE WHEN s.object_id = $3 THEN $2 ELSE s.object_id END)
					OR m.object_value IS DISTINCT FROM s.object_value)) AS contradiction
			FROM graph_relations m JOIN graph_relations s
			  ON s.org_id = m.org_id AND s.subject_id = $2 AND s.predicate = m.predicate
			 AND s.valid_to IS NULL AND s.superseded_at IS NULL
			WHERE m.org_id = $1 AND m.subject_id = $3 AND m.valid_to IS NULL AND m.superseded_at IS NULL
			  AND ((m.functional AND s.functional) OR (
				(CASE WHEN m.object_id = $3 THEN $2 ELSE m.object_id END) IS NOT DISTINCT FROM
				(CASE WHEN s.object_id = $3 THEN $2 ELSE s.object_id END)
				AND m.object_value IS NOT DISTINCT FROM s.object_value))),
		closes AS (
			SELECT DISTINCT ON (old) * FROM (
				SELECT CASE WHEN mvf <= svf THEN mid ELSE sid END AS old,
				       CASE WHEN mvf <= svf THEN sid ELSE mid END AS new,
				       greatest(mvf, svf) AS at, contradiction FROM pairs) p ORDER BY old, new)
		UPDATE graph_relations r SET
			valid_to = CASE WHEN c.contradiction THEN c.at END,
			superseded_at = greatest($4, r.recorded_at), superseded_by = c.new
		FROM closes c WHERE r.org_id = $1 AND r.id = c.old`, org, survivor, merged, now)
	if err != nil {
		return res, fmt.Errorf("closing relations of merged entity %s: %w", merged, pg.Interpret(err))
	}
	res.Closed = tag.RowsAffected()
	tag, err = db.Exec(ctx, `UPDATE graph_relations SET
			subject_id = CASE WHEN subject_id = $3 THEN $2 ELSE subject_id END,
			object_id = CASE WHEN object_id = $3 THEN $2 ELSE object_id END
		WHERE org_id = $1 AND (subject_id = $3 OR object_id = $3)`, org, survivor, merged)
	if err != nil {
		return res, fmt.Errorf("re-pointing relations of merged entity %s: %w", merged, pg.Interpret(err))
	}
	res.Relations = tag.RowsAffected()
	// A relation between the two ("A. Silva is Ana") now loops on the survivor: it says
	// nothing any more, so it is no longer believed (kept, like every closed version).
	tag, err = db.Exec(ctx, `UPDATE graph_relations SET superseded_at = greatest($3, recorded_at)
		WHERE org_id = $1 AND subject_id = $2 AND object_id = $2 AND valid_to IS NULL AND superseded_at IS NULL`,
		org, survivor, now)
	if err != nil {
		return res, fmt.Errorf("closing relations between %s and %s: %w", survivor, merged, pg.Interpret(err))
	}
	res.Closed += tag.RowsAffected()

	display, keys := forms(mg.Name, mg.Aliases)
	var addAliases, addKeys []string
	for i, k := range keys {
		if !slices.Contains(keysOf[survivor], k) {
			addAliases, addKeys = append(addAliases, display[i]), append(addKeys, k)
		}
	}
	var addSources []uuid.UUID
	for _, m := range mg.SourceMemoryIDs {
		if !slices.Contains(sv.SourceMemoryIDs, m) {
			addSources = append(addSources, m)
		}
	}
	if addSources == nil {
		addSources = []uuid.UUID{}
	}
	// The tombstone first: it leaves the live-name index before the survivor changes.
	if _, err := db.Exec(ctx, `UPDATE graph_entities SET merged_into = $2, keys = '{}', updated_at = $4
		WHERE org_id = $1 AND (id = $3 OR merged_into = $3)`, org, survivor, merged, now); err != nil {
		return res, fmt.Errorf("marking entity %s merged: %w", merged, pg.Interpret(err))
	}
	res.Survivor, err = scanEntity(db.QueryRow(ctx, `UPDATE graph_entities SET
			aliases = aliases || $3::text[], keys = keys || $4::text[], source_memory_ids = source_memory_ids || $5::uuid[],
			type = CASE WHEN type = '' THEN $6 ELSE type END,
			summary = CASE WHEN summary = '' THEN $7 ELSE summary END,
			updated_at = $8
		WHERE org_id = $1 AND id = $2 RETURNING `+entityCols,
		org, survivor, orEmpty(addAliases), orEmpty(addKeys), addSources, mg.Type, mg.Summary, now))
	if err != nil {
		return res, fmt.Errorf("updating survivor %s: %w", survivor, pg.Interpret(err))
	}
	return res, nil
}

// Deletion counts what Delete or an erasure removed.
type Deletion struct {
	Entities  int64 `json:"entities"`  // entities, tombstones included
	Relations int64 `json:"relations"` // relation rows, every version
}

// Delete removes an entity of org with every relation that names it (every version) and
// the tombstones of entities merged into it.
func (s *Store) Delete(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) (Deletion, error) {
	var d Deletion
	e, err := s.Get(ctx, db, org, id)
	if err != nil {
		return d, err
	}
	if err := lockScope(ctx, db, e.Scope(org)); err != nil {
		return d, err
	}
	// The row lock waits for relation writes naming the entity (they share-lock it), so
	// the relations deleted and counted below are all of them.
	if _, err := db.Exec(ctx, `SELECT 1 FROM graph_entities WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id); err != nil {
		return d, pg.Interpret(err)
	}
	ids := []uuid.UUID{id}
	tag, err := db.Exec(ctx, `DELETE FROM graph_relations WHERE org_id = $1 AND (subject_id = ANY($2) OR object_id = ANY($2))`, org, ids)
	if err != nil {
		return d, fmt.Errorf("deleting relations of entity %s: %w", id, pg.Interpret(err))
	}
	d.Relations = tag.RowsAffected()
	tag, err = db.Exec(ctx, `DELETE FROM graph_entities WHERE org_id = $1 AND (id = $2 OR merged_into = $2)`, org, id)
	if err != nil {
		return d, fmt.Errorf("deleting entity %s: %w", id, pg.Interpret(err))
	}
	d.Entities = tag.RowsAffected()
	return d, nil
}

// SplitInput says how to split an entity that resolution or a merge joined wrongly: a new
// entity named Name in the same scope takes the listed aliases and relations from From.
type SplitInput struct {
	From    uuid.UUID
	Name    string
	Type    string
	Aliases []string // forms From knows (name or aliases) that belong to the new entity
	// Relations are relation ids (any version) naming From that belong to the new entity:
	// From is replaced by the new entity in each, as subject or object.
	Relations []uuid.UUID
}

// SplitResult is what a split left.
type SplitResult struct {
	From      Entity `json:"from"`
	New       Entity `json:"new"`
	Relations int64  `json:"relations"` // relation rows re-pointed
}

// Split undoes a wrong resolution or merge by hand (an admin's call): From loses the moved
// aliases (and the new name, if it was one of them) and a new entity of its scope gets
// them, with the listed relations re-pointed to it. From keeps its own name, and its
// summary, type and vector; the new entity starts without a vector (the caller embeds it
// and resolves it with one). A name another live entity of the scope already has is a
// conflict; an alias or relation that From does not have is refused.
func (s *Store) Split(ctx context.Context, db pg.DBTX, org string, in SplitInput) (SplitResult, error) {
	var res SplitResult
	if err := checkName("name", in.Name, true); err != nil {
		return res, err
	}
	if err := checkString("type", in.Type, MaxTypeLen, false); err != nil {
		return res, err
	}
	for i, a := range in.Aliases {
		if err := checkName(fmt.Sprintf("aliases[%d]", i), a, true); err != nil {
			return res, err
		}
	}
	first, err := s.Get(ctx, db, org, in.From)
	if err != nil {
		return res, err
	}
	if first.MergedInto != nil {
		return res, strata.Conflict("the entity was merged", map[string]any{"merged_into": first.MergedInto.String()})
	}
	sc := first.Scope(org)
	if err := lockScope(ctx, db, sc); err != nil {
		return res, err
	}
	var fromKeys []string
	from, err := scanEntity(db.QueryRow(ctx, `SELECT `+entityCols+`, keys FROM graph_entities WHERE org_id = $1 AND id = $2
		FOR NO KEY UPDATE`, org, in.From), &fromKeys)
	if err != nil {
		return res, pg.Interpret(err)
	}
	display, keys := forms(in.Name, in.Aliases)
	for i, a := range in.Aliases {
		if !slices.Contains(fromKeys, Normalize(a)) {
			return res, strata.Invalid(fmt.Sprintf("aliases[%d]", i), "is not a name or alias of the entity split")
		}
	}
	fromNameKey := Normalize(from.Name)
	if slices.Contains(keys, fromNameKey) {
		return res, strata.Invalid("name", "the entity split keeps its own name; it cannot move")
	}
	// From keeps every form the new entity does not take.
	var keepAliases []string
	for _, a := range from.Aliases {
		if !slices.Contains(keys, Normalize(a)) {
			keepAliases = append(keepAliases, a)
		}
	}
	_, keepKeys := forms(from.Name, keepAliases)
	now := s.now().UTC()
	if _, err := db.Exec(ctx, `UPDATE graph_entities SET aliases = $3, keys = $4, updated_at = $5 WHERE org_id = $1 AND id = $2`,
		org, from.ID, orEmpty(keepAliases), keepKeys, now); err != nil {
		return res, fmt.Errorf("splitting entity %s: %w", from.ID, pg.Interpret(err))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return res, err
	}
	res.New, err = scanEntity(db.QueryRow(ctx, `INSERT INTO graph_entities (org_id, id, user_id, agent_id, session_id,
			name, name_key, type, aliases, keys, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) RETURNING `+entityCols,
		org, id, sc.UserID, sc.AgentID, sc.SessionID, display[0], keys[0], in.Type, orEmpty(display[1:]), keys, now))
	if err != nil {
		return res, fmt.Errorf("creating the entity split from %s: %w", from.ID, pg.Interpret(err))
	}
	if len(in.Relations) > 0 {
		tag, err := db.Exec(ctx, `UPDATE graph_relations SET
				subject_id = CASE WHEN subject_id = $2 THEN $3 ELSE subject_id END,
				object_id = CASE WHEN object_id = $2 THEN $3 ELSE object_id END
			WHERE org_id = $1 AND id = ANY($4) AND (subject_id = $2 OR object_id = $2)`, org, from.ID, id, in.Relations)
		if err != nil {
			return res, fmt.Errorf("re-pointing relations split from %s: %w", from.ID, pg.Interpret(err))
		}
		res.Relations = tag.RowsAffected()
		distinct := map[uuid.UUID]bool{}
		for _, r := range in.Relations {
			distinct[r] = true
		}
		if res.Relations != int64(len(distinct)) {
			return res, strata.NoSuch("relations", "names a relation that does not name the entity split")
		}
	}
	res.From, err = s.Get(ctx, db, org, from.ID)
	return res, err
}
