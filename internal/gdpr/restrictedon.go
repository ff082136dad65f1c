package gdpr

import (
	"context"

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
