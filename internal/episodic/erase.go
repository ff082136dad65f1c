package episodic

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// Erasure (GDPR Art. 17) of the episodic tier. Events are append-only in the database; these
// are the only code paths that set strata.allow_event_delete (transaction-local), and they
// run only from the erasure worker (internal/gdpr). Every function does a bounded amount of
// work in the caller's transaction, so an erasure commits in batches and resumes after a
// crash where it stopped.

func allowEventDelete(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SET LOCAL strata.allow_event_delete = 'on'`)
	return pg.Interpret(err)
}

// DeleteJobLogBatch deletes up to limit events of job's own log (newest first). When the
// log is empty it also deletes the log's head row and unlinks assets whose versions name
// the job's events, and reports done. The caller deletes forks before their parents (a
// fork's head row references its parent's).
func DeleteJobLogBatch(ctx context.Context, tx pgx.Tx, org, job string, limit int) (events int64, done bool, err error) {
	if err := allowEventDelete(ctx, tx); err != nil {
		return 0, false, err
	}
	// The newest `limit` seqs are one range of the primary key: find its lower end with a
	// backward index scan, then delete the range (no join, whatever the statistics say).
	tag, err := tx.Exec(ctx, `DELETE FROM episodic_events WHERE org_id = $1 AND job_id = $2 AND seq >= coalesce(
			(SELECT seq FROM episodic_events WHERE org_id = $1 AND job_id = $2 ORDER BY seq DESC OFFSET $3::int - 1 LIMIT 1), 0)`,
		org, job, limit)
	if err != nil {
		return 0, false, pg.Interpret(err)
	}
	events = tag.RowsAffected()
	if events >= int64(limit) {
		return events, false, nil
	}
	for _, q := range []string{
		`UPDATE asset_versions SET job_id = NULL, event_seq = NULL WHERE org_id = $1 AND job_id = $2`,
		`UPDATE assets SET job_id = NULL, event_seq = NULL WHERE org_id = $1 AND job_id = $2`,
		`DELETE FROM episodic_jobs WHERE org_id = $1 AND job_id = $2`,
	} {
		if _, err := tx.Exec(ctx, q, org, job); err != nil {
			return events, false, pg.Interpret(err)
		}
	}
	return events, true, nil
}

// RedactUserEventsBatch redacts up to limit events recorded for user in logs that are not
// deleted whole (jobs of other subjects): params become {}, result, scope, per-event key
// are cleared and the fingerprint is replaced (a hash of the params is derived from them).
// The row and its seq stay, so the log remains gap-free and reverts still point somewhere.
func RedactUserEventsBatch(ctx context.Context, tx pgx.Tx, org, user string, limit int) (int64, error) {
	if err := allowEventDelete(ctx, tx); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `UPDATE episodic_events e SET params = '{}', result = NULL, user_id = NULL,
			session_id = NULL, agent_id = NULL, idempotency_key = NULL,
			fingerprint = sha256(convert_to('erased:' || e.job_id || ':' || e.seq, 'UTF8'))
		WHERE e.org_id = $1 AND e.ctid = ANY(ARRAY(SELECT ctid FROM episodic_events WHERE org_id = $1 AND user_id = $2 LIMIT $3))`, org, user, limit)
	return tag.RowsAffected(), pg.Interpret(err)
}

// DeleteUserAssetsBatch deletes up to limit assets created for user, with every version,
// and returns their ids (the caller erases what else names them) and the versions removed.
func DeleteUserAssetsBatch(ctx context.Context, tx pgx.Tx, org, user string, limit int) (ids []string, versions int64, err error) {
	rows, err := tx.Query(ctx, `WITH victims AS (
			SELECT asset_id FROM assets WHERE org_id = $1 AND user_id = $2 LIMIT $3),
		gone AS (DELETE FROM assets a USING victims v WHERE a.org_id = $1 AND a.asset_id = v.asset_id RETURNING a.asset_id)
		SELECT g.asset_id, (SELECT count(*) FROM asset_versions av WHERE av.org_id = $1 AND av.asset_id = g.asset_id)
		FROM gone g`, org, user, limit)
	if err != nil {
		return nil, 0, pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, 0, pg.Interpret(err)
		}
		ids, versions = append(ids, id), versions+n
	}
	return ids, versions, pg.Interpret(rows.Err())
}

// RedactUserAssetVersions clears the versions recorded for user of assets that belong to
// someone else (the lineage keeps its shape; uri, hash, metadata and scope are cleared), and
// the current-version copy on the asset row when it is one of them.
func RedactUserAssetVersions(ctx context.Context, tx pgx.Tx, org, user string) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE asset_versions SET uri = 'erased:', media_type = '', sha256 = '', metadata = '{}',
			user_id = NULL, agent_id = NULL, session_id = NULL
		WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	n := tag.RowsAffected()
	_, err = tx.Exec(ctx, `UPDATE assets a SET uri = v.uri, media_type = v.media_type, sha256 = v.sha256, metadata = v.metadata
		FROM asset_versions v
		WHERE a.org_id = $1 AND v.org_id = $1 AND v.asset_id = a.asset_id AND v.version = a.version
		  AND v.uri = 'erased:' AND a.uri <> 'erased:'`, org)
	return n, pg.Interpret(err)
}
