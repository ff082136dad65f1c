package keyvalue

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Rectify writes a corrected value for an entry on the data subject's behalf (GDPR Art. 16):
// exactly a put, except that the history records op "rectify", so the correction is told
// apart from the agent's own writes. The entry at the scope's most specific level must be
// live and the subject's (a user-level entry is the user's own; an agent- or session-level
// one must have been written for in.Scope.UserID), else a FieldError on "kv". The write is
// conditional on the version read (a concurrent change is a conflict); previous is that
// version. Same transaction and cache rules as Put.
func (s *Store) Rectify(ctx context.Context, db pg.DBTX, afterCommit AfterCommit, in WriteInput) (e KVEntry, previous int64, err error) {
	sl := writeSlot(in.Scope)
	var owner *string
	err = db.QueryRow(ctx, `SELECT version, user_id FROM kv_entries WHERE org_id = $1 AND namespace = $2 AND key = $3
		AND level = $4 AND scope_id = $5 AND NOT deleted FOR UPDATE`,
		in.Scope.OrgID, in.Namespace, in.Key, string(sl.Level), sl.ScopeID).Scan(&previous, &owner)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && sl.Level != LevelUser && (owner == nil || *owner != in.Scope.UserID)) {
		return KVEntry{}, 0, strata.Invalid("kv", "no live entry of this data subject at this key and scope")
	}
	if err != nil {
		return KVEntry{}, 0, pg.Interpret(err)
	}
	if err := s.checkTarget(in.Namespace, in.Key, in.Scope); err != nil {
		return KVEntry{}, 0, err
	}
	if err := s.CheckValue("value", in.Value); err != nil {
		return KVEntry{}, 0, err
	}
	in.IfMatch, in.IfNoneMatch = &previous, false
	e, _, err = s.write(ctx, db, afterCommit, in, "rectify")
	return e, previous, err
}
