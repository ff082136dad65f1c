package graph

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// NeighborsQuery asks for the entities around one.
type NeighborsQuery struct {
	ID    uuid.UUID // a merged id walks from its survivor
	Depth int       // 1..MaxDepth [1]
	Limit int       // [100, up to MaxLimit]
	At    AsOf      // which relations count as edges (zero: those in force)
	// Scope, when set, walks only through entities visible from it (docs/semantic.md's
	// composition rule); nil walks the whole org.
	Scope *strata.Scope
	// Hide are restricted subjects (GDPR Art. 18): a walk from their entity answers
	// strata.ErrRestricted; their entities are not nodes and their relations not edges.
	Hide []string
}

// Neighbor is an entity reached from the start, at its shortest depth.
type Neighbor struct {
	Entity Entity `json:"entity"`
	Depth  int    `json:"depth"`
	// Path is the entity ids from the start to this one (both included); Via the relation
	// of its last step.
	Path []uuid.UUID `json:"path"`
	Via  Relation    `json:"via"`
}

// Neighbors walks relations between entities (literal values are not nodes), in either
// direction, from q.ID out to q.Depth steps, and answers each entity reached once, at its
// shortest depth, nearest first, at most q.Limit of them.
//
// The walk is a recursive CTE that carries each row's path and never steps onto an entity
// already on it, so cycles end. Each step keeps one path per entity reached (DISTINCT ON in
// the recursive term), so a step holds at most one row per entity of the org and a dense
// graph costs at most depth × entities rows, not the number of paths; the shortest depth is
// still exact (a shortest path's prefix is itself shortest, so the entity it ends on is
// not on the path kept for the previous step). The rows read are also capped
// (maxWalkPaths), breadth first, so the nearest are always found.
func (s *Store) Neighbors(ctx context.Context, db pg.DBTX, org string, q NeighborsQuery) ([]Neighbor, error) {
	if q.Depth == 0 {
		q.Depth = 1
	}
	if q.Depth < 1 || q.Depth > MaxDepth {
		return nil, strata.Invalid("depth", "must be 1..%d", MaxDepth)
	}
	start, err := s.visibleStart(ctx, db, org, q.ID, q.Hide)
	if err != nil {
		return nil, err
	}
	w, k := s.asOfArgs(q.At)
	all, u, a, ss := scopeArgs(q.Scope)
	edge := asOfSQL("r", "$4::timestamptz", "$5::timestamptz") + ` AND NOT (r.user_id = ANY($12::text[])) AND ` + notQuarantinedSQL("r")
	rows, err := db.Query(ctx, `WITH RECURSIVE walk (entity_id, depth, path, rel_id) AS (
			SELECT $2::uuid, 0, ARRAY[$2::uuid], NULL::uuid
			UNION ALL
			SELECT DISTINCT ON (e.next) e.next, w.depth + 1, w.path || e.next, e.rel_id
			FROM walk w CROSS JOIN LATERAL (
				SELECT r.id AS rel_id, r.object_id AS next FROM graph_relations r
				WHERE r.org_id = $1 AND r.subject_id = w.entity_id AND r.object_id IS NOT NULL AND `+edge+`
				UNION ALL
				SELECT r.id, r.subject_id FROM graph_relations r
				WHERE r.org_id = $1 AND r.object_id = w.entity_id AND `+edge+`
			) e
			JOIN graph_entities n ON n.org_id = $1 AND n.id = e.next
			WHERE w.depth < $3 AND NOT e.next = ANY(w.path) AND n.merged_into IS NULL AND NOT (n.user_id = ANY($12::text[]))
			  AND `+visibleSQL("n", "$6", "$7", "$8", "$9")+`
		),
		bounded AS (SELECT * FROM walk WHERE depth > 0 LIMIT $10),
		nearest AS (SELECT DISTINCT ON (entity_id) * FROM bounded ORDER BY entity_id, depth)
		SELECT `+entityColsOf("n")+`, x.depth, x.path, `+relationCols+`
		FROM nearest x
		JOIN graph_entities n ON n.org_id = $1 AND n.id = x.entity_id
		JOIN `+relationFrom+` ON r.org_id = $1 AND r.id = x.rel_id
		ORDER BY x.depth, n.name, n.id
		LIMIT $11`,
		org, start.ID, q.Depth, w, k, all, u, a, ss, maxWalkPaths, checkLimit(q.Limit, 100), hidden(q.Hide))
	if err != nil {
		return nil, fmt.Errorf("walking from %s: %w", start.ID, pg.Interpret(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Neighbor, error) {
		var nb Neighbor
		var x entityScan
		dest := append(append(x.dest(), &nb.Depth, &nb.Path), relationDest(&nb.Via)...)
		if err := row.Scan(dest...); err != nil {
			return nb, err
		}
		nb.Entity = x.entity()
		relationUTC(&nb.Via)
		return nb, nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking from %s: %w", start.ID, pg.Interpret(err))
	}
	return out, nil
}
