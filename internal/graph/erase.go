package graph

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// EraseUser removes a data subject's graph in the caller's transaction (GDPR Art. 17): the
// entities scoped to user (tombstones included) and every relation that names one of them
// or was written in the user's scope, every version. It counts what it removed for the
// erasure receipt. It is EraseUserBatch repeated until done.
func (s *Store) EraseUser(ctx context.Context, db pg.DBTX, org, user string) (Deletion, error) {
	var d Deletion
	for {
		b, done, err := s.EraseUserBatch(ctx, db, org, user, 1000)
		d.Entities, d.Relations = d.Entities+b.Entities, d.Relations+b.Relations
		if err != nil || done {
			return d, err
		}
	}
}

// EraseUserBatch removes at most limit rows of what EraseUser removes — relations first,
// then entities (tombstones before the entities they point to) — and reports whether
// nothing is left, for an erasure that commits in batches and resumes.
func (s *Store) EraseUserBatch(ctx context.Context, db pg.DBTX, org, user string, limit int) (Deletion, bool, error) {
	var d Deletion
	if err := strata.CheckID("user_id", user, false); err != nil {
		return d, false, err
	}
	if limit <= 0 {
		return d, false, strata.Invalid("limit", "must be positive")
	}
	tag, err := db.Exec(ctx, `DELETE FROM graph_relations WHERE org_id = $1 AND ctid = ANY(ARRAY(
			SELECT r.ctid FROM graph_relations r WHERE r.org_id = $1 AND (r.user_id = $2
			   OR EXISTS (SELECT 1 FROM graph_entities e WHERE e.org_id = $1 AND e.user_id = $2 AND (e.id = r.subject_id OR e.id = r.object_id)))
			LIMIT $3))`, org, user, limit)
	if err != nil {
		return d, false, fmt.Errorf("erasing relations of user: %w", pg.Interpret(err))
	}
	d.Relations = tag.RowsAffected()
	if d.Relations == int64(limit) {
		return d, false, nil
	}
	// No relation names the user's entities any more: they go, tombstones first, so a
	// deletion's cascade (merged_into) never removes a row uncounted.
	tag, err = db.Exec(ctx, `DELETE FROM graph_entities WHERE org_id = $1 AND ctid = ANY(ARRAY(
			SELECT ctid FROM graph_entities WHERE org_id = $1 AND user_id = $2 ORDER BY merged_into IS NULL LIMIT $3))`,
		org, user, int64(limit)-d.Relations)
	if err != nil {
		return d, false, fmt.Errorf("erasing entities of user: %w", pg.Interpret(err))
	}
	d.Entities = tag.RowsAffected()
	return d, d.Relations+d.Entities < int64(limit), nil
}

// EraseMemories removes what the graph derived from erased memories, in the caller's
// transaction: the relations whose source is one of them (every version), and the entities
// that only those memories mentioned and that no relation names any more. An entity that
// other memories or relations still support stays, without those memories among its
// sources.
func (s *Store) EraseMemories(ctx context.Context, db pg.DBTX, org string, memories []uuid.UUID) (Deletion, error) {
	var d Deletion
	if len(memories) == 0 {
		return d, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM graph_relations WHERE org_id = $1 AND source_memory_id = ANY($2)`, org, memories)
	if err != nil {
		return d, fmt.Errorf("erasing relations of memories: %w", pg.Interpret(err))
	}
	d.Relations = tag.RowsAffected()
	// Two statements: a DELETE cannot see rows an UPDATE of the same statement changed.
	rows, err := db.Query(ctx, `UPDATE graph_entities e SET source_memory_ids = ARRAY(
			SELECT m FROM unnest(e.source_memory_ids) m WHERE m <> ALL($2::uuid[]))
		WHERE e.org_id = $1 AND e.source_memory_ids && $2::uuid[]
		RETURNING e.id, cardinality(e.source_memory_ids) = 0`, org, memories)
	if err != nil {
		return d, fmt.Errorf("erasing memories from entity sources: %w", pg.Interpret(err))
	}
	var orphans []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		var empty bool
		if err := rows.Scan(&id, &empty); err != nil {
			rows.Close()
			return d, pg.Interpret(err)
		}
		if empty {
			orphans = append(orphans, id)
		}
	}
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("erasing memories from entity sources: %w", pg.Interpret(err))
	}
	if len(orphans) == 0 {
		return d, nil
	}
	tag, err = db.Exec(ctx, `DELETE FROM graph_entities e WHERE e.org_id = $1 AND e.id = ANY($2)
		AND NOT EXISTS (SELECT 1 FROM graph_relations r WHERE r.org_id = $1 AND (r.subject_id = e.id OR r.object_id = e.id))`,
		org, orphans)
	if err != nil {
		return d, fmt.Errorf("erasing entities of memories: %w", pg.Interpret(err))
	}
	d.Entities = tag.RowsAffected()
	return d, nil
}

// RemainingUser counts what EraseUser would still find for user (0 after an erasure): the
// verification step of a receipt.
func (s *Store) RemainingUser(ctx context.Context, db pg.DBTX, org, user string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM graph_entities WHERE org_id = $1 AND user_id = $2)
		+ (SELECT count(*) FROM graph_relations WHERE org_id = $1 AND user_id = $2)`, org, user).Scan(&n)
	return n, pg.Interpret(err)
}

// Export is a data subject's graph (GDPR Art. 15).
type Export struct {
	Entities  []Entity   `json:"entities"`
	Relations []Relation `json:"relations"` // every version, with provenance
}

// ExportUser returns everything EraseUser would remove for user: the entities scoped to
// the user (tombstones included) and every version of every relation written in the
// user's scope or naming one of those entities, in recording order.
func (s *Store) ExportUser(ctx context.Context, db pg.DBTX, org, user string) (Export, error) {
	var x Export
	if err := strata.CheckID("user_id", user, false); err != nil {
		return x, err
	}
	rows, err := db.Query(ctx, `SELECT `+entityCols+` FROM graph_entities WHERE org_id = $1 AND user_id = $2 ORDER BY id`, org, user)
	if err != nil {
		return x, pg.Interpret(err)
	}
	x.Entities, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entity, error) { return scanEntity(r) })
	if err != nil {
		return x, pg.Interpret(err)
	}
	if x.Entities == nil {
		x.Entities = []Entity{}
	}
	rows, err = db.Query(ctx, `SELECT `+relationCols+` FROM `+relationFrom+`
		WHERE r.org_id = $1 AND (r.user_id = $2 OR s.user_id = $2 OR o.user_id = $2) ORDER BY r.id`, org, user)
	x.Relations, err = collectRelations(rows, err)
	return x, err
}
