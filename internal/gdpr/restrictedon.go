package gdpr

import (
	"context"
	"fmt"

	"github.com/strata-mem/strata/internal/pg"
)

// RestrictedOn reports whether user ("" never is) is restricted in org, asking db (a
// transaction bound to org) when the replica's cache does not know — for background work
// that has a transaction but no request session (extraction).
func (r *Restrictions) RestrictedOn(ctx context.Context, db pg.DBTX, org, user string) (bool, error) {
	if user == "" {
		return false, nil
	}
	var restricted bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gdpr_restrictions WHERE org_id = $1 AND user_id = $2)`,
		org, user).Scan(&restricted)
	return restricted, pg.Interpret(err)
}

// subjectLockSQL takes the advisory lock of one data subject (org $1, user $2): background
// writers hold it shared while they check and write, an erasure's creation exclusively, so
// a writer either commits before the erasure exists or sees it.
const subjectLockSQL = `SELECT pg_advisory_xact_lock%s(hashtextextended($1 || '/' || $2, 7274))`

// HeldOn is RestrictedOn for background work that writes a subject's data in db: it takes
// the subject's lock (shared) for the rest of the transaction, then reports whether the
// subject is restricted or an erasure of it is pending or running — so a summary or an
// extraction written after an erasure began is never left behind by it.
func (r *Restrictions) HeldOn(ctx context.Context, db pg.DBTX, org, user string) (bool, error) {
	if user == "" {
		return false, nil
	}
	if _, err := db.Exec(ctx, fmt.Sprintf(subjectLockSQL, "_shared"), org, user); err != nil {
		return false, pg.Interpret(err)
	}
	var held bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gdpr_restrictions WHERE org_id = $1 AND user_id = $2)
		OR EXISTS (SELECT 1 FROM gdpr_erasures WHERE org_id = $1 AND user_id = $2 AND status IN ('pending', 'running'))`,
		org, user).Scan(&held)
	return held, pg.Interpret(err)
}
