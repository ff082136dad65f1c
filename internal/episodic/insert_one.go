package episodic

import (
	"context"
	"encoding/hex"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// insertOneSQL is insertSQL for the common case of one event: the same counter upsert and
// insert, with plain parameters instead of nine unnested arrays (cheaper to bind, plan and
// execute; the single-event append is the hot path of every agent turn).
const insertOneSQL = `WITH head AS (
	INSERT INTO episodic_jobs AS j (org_id, job_id, last_seq) VALUES ($1, $2, 1)
	ON CONFLICT (org_id, job_id) DO UPDATE SET last_seq = j.last_seq + 1
	RETURNING j.last_seq)
INSERT INTO episodic_events (org_id, job_id, seq, op, params, result, fingerprint, agent_id, user_id,
	session_id, idempotency_key, reverts_seq)
SELECT $1, $2, head.last_seq, $3, $4::jsonb, $5::jsonb, $6, nullif($7, ''), nullif($8, ''), nullif($9, ''),
	nullif($10, ''), $11
FROM head
RETURNING seq, created_at`

// insertOne appends one prepared event (see insert).
func insertOne(ctx context.Context, db pg.DBTX, org, job string, p prepared) ([]Event, error) {
	out := make([]Event, 1)
	if err := scanOneRow(db.QueryRow(ctx, insertOneSQL, oneArgs(org, job, p)...), job, p, &out[0]); err != nil {
		return nil, pg.Interpret(err)
	}
	return out, nil
}

// oneArgs are insertOneSQL's arguments for appending p to job in org.
func oneArgs(org, job string, p prepared) []any {
	var result *string
	if p.result != nil {
		r := string(p.result)
		result = &r
	}
	var rev *int64
	if p.reverts > 0 {
		r := p.reverts
		rev = &r
	}
	return []any{org, job, p.op, string(p.params), result, p.fp, p.agent, p.user, p.session, p.key, rev}
}

// scanOneRow reads insertOneSQL's row for p into e.
func scanOneRow(row pgx.Row, job string, p prepared, e *Event) error {
	*e = Event{JobID: job, Op: p.op, Params: json.RawMessage(p.params), Fingerprint: hex.EncodeToString(p.fp),
		AgentID: p.agent, UserID: p.user, SessionID: p.session, IdempotencyKey: p.key, RevertsSeq: p.reverts}
	if err := row.Scan(&e.Seq, &e.CreatedAt); err != nil {
		return err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	if p.result != nil {
		e.Result = json.RawMessage(p.result)
	}
	return nil
}
