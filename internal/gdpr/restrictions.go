package gdpr

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Restrictions answers the Art. 18 question every read path asks — is this data subject's
// processing restricted? — from the replica's RestrictionCache when it is listening, else
// from gdpr_restrictions. A read that has not touched Postgres yet (a working-memory read
// served from Redis) is checked on a pooled connection, so it does not begin its request's
// transaction for the check.
type Restrictions struct {
	pool  *pgxpool.Pool
	cache *RestrictionCache
}

// NewRestrictions returns the checker; cache may be nil (every check asks Postgres).
func NewRestrictions(pool *pgxpool.Pool, cache *RestrictionCache) *Restrictions {
	if cache == nil {
		cache = NewRestrictionCache()
	}
	return &Restrictions{pool: pool, cache: cache}
}

// Cache is the replica's cache of restricted subjects (for its LISTEN loop).
func (r *Restrictions) Cache() *RestrictionCache { return r.cache }

// Among answers which of users ("" ignored) are restricted in org. sess is the request's
// unit of work: its transaction is used when it has begun, else one pooled round trip.
func (r *Restrictions) Among(ctx context.Context, sess *pg.Session, org string, users []string) (map[string]bool, error) {
	var ids []string
	for _, u := range users {
		if u != "" {
			ids = append(ids, u)
		}
	}
	if len(ids) == 0 {
		return map[string]bool{}, nil
	}
	return r.cache.Among(org, ids, r.fill(ctx, sess, org))
}

// query runs one statement in sess's transaction when it has begun, else as one batch on a
// pooled connection with the org set for its implicit transaction (row-level security).
// done releases what the rows hold; call it once the rows are read.
func (r *Restrictions) query(ctx context.Context, sess *pg.Session, org, sql string, args ...any) (rows pgx.Rows, done func(), err error) {
	if sess != nil && sess.Started() {
		tx, err := sess.Tx(ctx)
		if err != nil {
			return nil, func() {}, err
		}
		rows, err := tx.Query(ctx, sql, args...)
		return rows, func() {}, pg.Interpret(err)
	}
	b := &pgx.Batch{}
	pg.QueueSetOrg(b, org)
	b.Queue(sql, args...)
	br := r.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, func() {}, pg.Interpret(err)
	}
	rows, err = br.Query()
	return rows, func() { br.Close() }, pg.Interpret(err)
}

// fill is the cache's loader of an org's restricted set, through query.
func (r *Restrictions) fill(ctx context.Context, sess *pg.Session, org string) func(sql string, args ...any) ([]string, error) {
	return func(sql string, args ...any) ([]string, error) {
		rows, done, err := r.query(ctx, sess, org, sql, args...)
		defer done()
		if err != nil {
			return nil, err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		return found, pg.Interpret(err)
	}
}

// Refuse returns strata.ErrRestricted when any of users is restricted in org.
func (r *Restrictions) Refuse(ctx context.Context, sess *pg.Session, org string, users ...string) error {
	m, err := r.Among(ctx, sess, org, users)
	if err != nil {
		return err
	}
	if len(m) > 0 {
		return strata.ErrRestricted
	}
	return nil
}

// Restricted reports whether user ("" never is) is restricted in org.
func (r *Restrictions) Restricted(ctx context.Context, sess *pg.Session, org, user string) (bool, error) {
	m, err := r.Among(ctx, sess, org, []string{user})
	return m[user], err
}

// RefuseJob returns strata.ErrRestricted when job belongs to a restricted subject (a job
// that does not exist is not refused: the caller's own lookup answers 404).
func (r *Restrictions) RefuseJob(ctx context.Context, db pg.DBTX, org, job string) error {
	// Most orgs restrict nobody: the cached set answers without a round trip.
	none, err := r.cache.NoneIn(org, func(sql string, args ...any) ([]string, error) {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		return found, pg.Interpret(err)
	})
	if err != nil || none {
		return err
	}
	var restricted bool
	err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs j JOIN gdpr_restrictions r
			ON r.org_id = j.org_id AND r.user_id = j.user_id WHERE j.org_id = $1 AND j.job_id = $2)`,
		org, job).Scan(&restricted)
	if err != nil {
		return pg.Interpret(err)
	}
	if restricted {
		return strata.ErrRestricted
	}
	return nil
}

// JobsAmong returns which of jobIDs belong to a restricted subject.
func (r *Restrictions) JobsAmong(ctx context.Context, db pg.DBTX, org string, jobIDs []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(jobIDs) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT j.job_id FROM jobs j JOIN gdpr_restrictions r ON r.org_id = j.org_id AND r.user_id = j.user_id
		WHERE j.org_id = $1 AND j.job_id = ANY($2)`, org, jobIDs)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// Unrestricted returns sc without its user when that user is restricted: a search or
// context assembly for a restricted subject sees org-, agent- and session-level data only,
// never the subject's own.
func (r *Restrictions) Unrestricted(ctx context.Context, sess *pg.Session, sc strata.Scope) (strata.Scope, error) {
	restricted, err := r.Restricted(ctx, sess, sc.OrgID, sc.UserID)
	if err != nil {
		return sc, err
	}
	if restricted {
		sc.UserID = ""
	}
	return sc, nil
}

// QueueContextCheck queues into b (a batch on the request's transaction) the check of
// whether a per-turn context for (user, job, session) would touch a restricted subject's
// data: the user named, or the subject of the job or of the session. "" parts are ignored;
// with none named nothing is queued. *restricted and *err are set as b's results are read.
func QueueContextCheck(b *pgx.Batch, org, userID, jobID, sessionID string, restricted *bool, err *error) {
	if userID == "" && jobID == "" && sessionID == "" {
		return
	}
	b.Queue(`SELECT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = $1 AND r.user_id IN (
			nullif($2, ''),
			(SELECT user_id FROM jobs WHERE org_id = $1 AND job_id = $3),
			(SELECT user_id FROM working_sessions WHERE org_id = $1 AND session_id = $4)))`,
		org, userID, jobID, sessionID).QueryRow(func(row pgx.Row) error {
		*err = pg.Interpret(row.Scan(restricted))
		return nil
	})
}

// ForgetAfterCommit drops this replica's cached restrictions of org once sess commits,
// before the response: the replica that restricts never serves the subject again (the
// others drop theirs on the notification the commit sends).
func (r *Restrictions) ForgetAfterCommit(sess *pg.Session, org string) {
	if sess != nil {
		sess.AfterCommit(func() { r.cache.Forget(org) })
	}
}

// Subjects returns org's restricted subjects, for reads that leave their data out rather
// than refuse (the graph's Hide lists): from the replica's cache when it holds the org's set
// (most orgs restrict nobody: no round trip), else from gdpr_restrictions on db.
func (r *Restrictions) Subjects(ctx context.Context, db pg.DBTX, org string) ([]string, error) {
	load := func(sql string, args ...any) ([]string, error) {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		return found, pg.Interpret(err)
	}
	set, cached, err := r.cache.orgSet(org, load)
	if err != nil {
		return nil, err
	}
	if !cached {
		return load(`SELECT user_id FROM gdpr_restrictions WHERE org_id = $1`, org)
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	return out, nil
}
