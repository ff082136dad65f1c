package semantic

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// MemoryErasure counts what EraseUserMemoriesBatch removed.
type MemoryErasure struct {
	Memories    int64 `json:"memories"`    // memories (lineages) removed
	Versions    int64 `json:"versions"`    // rows: every version, with its text and vectors
	Retrievals  int64 `json:"retrievals"`  // retrieval-log rows of those versions
	Idempotency int64 `json:"idempotency"` // stored responses that quoted any of them
}

// EraseUserMemoriesBatch removes up to limit of user's memories (GDPR erasure,
// internal/gdpr) in the caller's transaction: every version of each (current and
// superseded: text, embedding, re-embedding target, history), the retrieval-log rows that
// served them, and the stored idempotent responses that quote any version id (as Delete
// does). Versions of one memory share the scope, so a lineage is found by any version.
func EraseUserMemoriesBatch(ctx context.Context, tx pgx.Tx, org, user string, limit int) (MemoryErasure, error) {
	var e MemoryErasure
	rows, err := tx.Query(ctx, `WITH roots AS (
			SELECT DISTINCT root_id FROM memories WHERE org_id = $1 AND user_id = $2 LIMIT $3)
		DELETE FROM memories m USING roots r WHERE m.org_id = $1 AND m.root_id = r.root_id
		RETURNING m.id, m.id = m.root_id`, org, user, limit)
	if err != nil {
		return e, pg.Interpret(err)
	}
	var ids []string
	for rows.Next() {
		var id uuid.UUID
		var root bool
		if err := rows.Scan(&id, &root); err != nil {
			rows.Close()
			return e, pg.Interpret(err)
		}
		ids = append(ids, id.String())
		if root {
			e.Memories++
		}
	}
	if err := rows.Err(); err != nil {
		return e, pg.Interpret(err)
	}
	e.Versions = int64(len(ids))
	if len(ids) == 0 {
		return e, nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM memory_retrievals WHERE org_id = $1 AND memory_id = ANY($2::uuid[])`, org, ids)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Retrievals = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM idempotency_keys k WHERE org_id = $1
		AND EXISTS (SELECT 1 FROM unnest($2::text[]) i WHERE position(convert_to(i, 'UTF8') IN k.response_body) > 0)`, org, ids)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Idempotency = tag.RowsAffected()
	return e, nil
}

// EraseUserRetrievals deletes the retrieval-log rows of searches made for user (their
// scope names the user; the memories served may belong to no one in particular).
func EraseUserRetrievals(ctx context.Context, tx pgx.Tx, org, user string, limit int) (int64, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM memory_retrievals WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM memory_retrievals WHERE org_id = $1 AND user_id = $2 LIMIT $3))`, org, user, limit)
	return tag.RowsAffected(), pg.Interpret(err)
}
