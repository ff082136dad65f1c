package keyvalue

// Pruning old history, for the eviction worker's key-value history retention.

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// HistoryRef names one superseded history version (no value, no scope id: the scope id
// of a user-level entry is a user id, and these refs go into audit records).
type HistoryRef struct {
	Namespace string
	Key       string
	Level     string
	Version   int64
	scopeID   string
}

// String renders the ref for reports and audit records: namespace/key@level#version.
func (h HistoryRef) String() string {
	return h.Namespace + "/" + h.Key + "@" + h.Level + "#" + strconv.FormatInt(h.Version, 10)
}

// OldHistory lists history versions written before cutoff that are not their entry's
// current version, oldest first, leaving out entries of restricted data subjects (GDPR
// Art. 18).
func (s *Store) OldHistory(ctx context.Context, q pg.DBTX, org string, cutoff time.Time, limit int) ([]HistoryRef, error) {
	rows, err := q.Query(ctx, `SELECT v.namespace, v.key, v.level, v.scope_id, v.version FROM kv_versions v
		JOIN kv_entries e ON e.org_id = v.org_id AND e.namespace = v.namespace AND e.key = v.key
		     AND e.level = v.level AND e.scope_id = v.scope_id
		WHERE v.org_id = $1 AND v.written_at < $2 AND v.version < e.version
		  AND NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = e.org_id AND r.user_id = e.user_id)
		ORDER BY v.written_at, v.namespace, v.key, v.level, v.scope_id, v.version LIMIT $3`, org, cutoff, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryRef, error) {
		var h HistoryRef
		err := r.Scan(&h.Namespace, &h.Key, &h.Level, &h.scopeID, &h.Version)
		return h, err
	})
	return out, pg.Interpret(err)
}

// DeleteHistory removes the given history versions (never an entry's current version).
func (s *Store) DeleteHistory(ctx context.Context, tx pg.DBTX, org string, refs []HistoryRef) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	n := len(refs)
	ns, keys, levels, scopes, versions := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, h := range refs {
		ns[i], keys[i], levels[i], scopes[i], versions[i] = h.Namespace, h.Key, h.Level, h.scopeID, h.Version
	}
	tag, err := tx.Exec(ctx, `DELETE FROM kv_versions v USING unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
			AS u(namespace, key, level, scope_id, version), kv_entries e
		WHERE v.org_id = $1 AND v.namespace = u.namespace AND v.key = u.key AND v.level = u.level
		  AND v.scope_id = u.scope_id AND v.version = u.version
		  AND e.org_id = v.org_id AND e.namespace = v.namespace AND e.key = v.key AND e.level = v.level
		  AND e.scope_id = v.scope_id AND v.version < e.version`, org, ns, keys, levels, scopes, versions)
	return tag.RowsAffected(), pg.Interpret(err)
}
