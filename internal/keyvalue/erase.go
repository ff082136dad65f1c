package keyvalue

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// ErasureCounts is what EraseUser removed.
type ErasureCounts struct {
	Entries  int64 `json:"entries"`  // user-level entries deleted, plus other entries cleared
	Versions int64 `json:"versions"` // history versions deleted
}

// EraseUser removes a data subject from the key-value tier, on tx (the erasure's
// transaction): the user's own (user-level) entries with their whole history; the values
// of session- or agent-level entries whose current version was written for the user (the
// row stays as an anonymous tombstone so versions keep growing); and every history version
// written for the user. Cache keys are derived from the rows found (no Redis index is
// needed); once tx has committed (afterCommit) they are dropped and, for deleted
// identities, kept unfillable for PendingTTL so a cache fill in flight cannot put erased
// data back. If Redis is unreachable then, what it cached expires within CacheTTL.
func (s *Store) EraseUser(ctx context.Context, tx pg.DBTX, afterCommit AfterCommit, org, user string) (ErasureCounts, error) {
	var n ErasureCounts
	if err := strata.CheckID("user_id", user, false); err != nil {
		return n, err
	}
	type target struct {
		ns, key string
		sl      slot
	}
	rows, err := tx.Query(ctx, `SELECT namespace, key, level, scope_id FROM kv_entries
		WHERE org_id = $1 AND (user_id = $2 OR (level = 'user' AND scope_id = $2)) FOR UPDATE`, org, user)
	if err != nil {
		return n, pg.Interpret(err)
	}
	targets, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (target, error) {
		var t target
		var level string
		err := r.Scan(&t.ns, &t.key, &level, &t.sl.ScopeID)
		t.sl.Level = Level(level)
		return t, err
	})
	if err != nil {
		return n, pg.Interpret(err)
	}
	token := newToken()
	for _, t := range targets {
		s.cacheBegin(ctx, org, t.ns, t.key, t.sl, token)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM kv_versions
		WHERE org_id = $1 AND (user_id = $2 OR (level = 'user' AND scope_id = $2))`, org, user)
	if err != nil {
		return n, pg.Interpret(err)
	}
	n.Versions = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM kv_entries WHERE org_id = $1 AND level = 'user' AND scope_id = $2`, org, user)
	if err != nil {
		return n, pg.Interpret(err)
	}
	n.Entries = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `UPDATE kv_entries SET value = NULL, deleted = true, version = version + 1,
			user_id = NULL, expires_at = NULL, updated_at = $3
		WHERE org_id = $1 AND user_id = $2`, org, user, s.opt.Now().UTC())
	if err != nil {
		return n, pg.Interpret(err)
	}
	n.Entries += tag.RowsAffected()
	afterCommit(func() {
		for _, t := range targets {
			// keep: the subject's pending markers go, a tombstone keeps fills that
			// raced with the erasure out for PendingTTL; afterwards fills read the
			// erased state from Postgres.
			s.cacheEnd(ctx, org, t.ns, t.key, t.sl, token, &cached{}, true)
		}
	})
	return n, nil
}
