package idempotency

import (
	"context"
	"encoding/json"

	"github.com/strata-mem/strata/internal/pg"
)

// Idempotency records hold response bodies, which may quote a data subject's data. Erasure
// (internal/gdpr) removes a subject's records three ways, each in the transaction that erases
// the data they quote: by the user_id the request named (EraseSubject), by the path of an
// erased entity (ErasePathPrefixes: a job's, a session's, an asset's routes), and by content
// (semantic erasure deletes responses quoting an erased memory id). Losing a record only
// means a retry with its key runs again instead of replaying.

// EraseSubject deletes org's records whose request named user (the user_id column), whose
// path carries the user id as a segment (/v1/gdpr/restrictions/{user}), or whose response
// quotes "user_id":"<user>".
func EraseSubject(ctx context.Context, db pg.DBTX, org, user string) (int64, error) {
	quoted, err := json.Marshal(user)
	if err != nil {
		return 0, err
	}
	tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE org_id = $1 AND (
			user_id = $2
			OR ('/' || path || '/') LIKE '%/' || replace(replace(replace($2, '\', '\\'), '%', '\%'), '_', '\_') || '/%'
			OR position(convert_to('"user_id":' || $3, 'UTF8') IN response_body) > 0)`,
		org, user, string(quoted))
	return tag.RowsAffected(), pg.Interpret(err)
}

// ErasePathPrefixes deletes org's records for requests on the given routes: each prefix
// matches itself and everything below it (prefix "/v1/jobs/j1" matches /v1/jobs/j1 and
// /v1/jobs/j1/steps/s/complete, not /v1/jobs/j10).
func ErasePathPrefixes(ctx context.Context, db pg.DBTX, org string, prefixes []string) (int64, error) {
	if len(prefixes) == 0 {
		return 0, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys k WHERE org_id = $1 AND EXISTS (
			SELECT 1 FROM unnest($2::text[]) p WHERE k.path = p OR left(k.path, length(p) + 1) = p || '/')`, org, prefixes)
	return tag.RowsAffected(), pg.Interpret(err)
}
