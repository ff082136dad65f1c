package extraction

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/strata"
)

// checkUsage refuses a call when the org used its calls or tokens for this hour.
func (x *Extractor) checkUsage(ctx context.Context, org string, rules policy.Extraction) error {
	hour := x.now().Truncate(time.Hour)
	var calls int
	var tokens int64
	err := pg.InOrgTx(ctx, x.Pool, org, func(tx pgx.Tx) error {
		var err error
		calls, tokens, err = HourUsage(ctx, tx, org, hour)
		return err
	})
	if err != nil {
		return err
	}
	wait := hour.Add(time.Hour).Sub(x.now())
	switch {
	case calls >= rules.MaxCallsPerHour:
		x.Metrics.limited("calls")
		return &RateLimitedError{Limit: "calls", Wait: wait}
	case tokens >= int64(rules.MaxTokensPerHour):
		x.Metrics.limited("tokens")
		return &RateLimitedError{Limit: "tokens", Wait: wait}
	}
	return nil
}

// addUsage counts a call (best effort: a failure is logged, never fails the extraction).
func (x *Extractor) addUsage(ctx context.Context, org string, u Usage) {
	hour := x.now().Truncate(time.Hour)
	err := pg.InOrgTx(context.WithoutCancel(ctx), x.Pool, org, func(tx pgx.Tx) error {
		return AddHourUsage(ctx, tx, org, hour, u)
	})
	if err != nil {
		x.Log.WarnContext(ctx, "extraction: recording LLM usage", "org", org, "err", err)
	}
}

// HourUsage is the org's LLM calls and tokens in the hour starting at hour (the per-org
// limits of the extraction policy; rolling summaries count against the same budget).
func HourUsage(ctx context.Context, db pg.DBTX, org string, hour time.Time) (calls int, tokens int64, err error) {
	err = db.QueryRow(ctx, `SELECT calls, tokens FROM extraction_usage WHERE org_id = $1 AND hour = $2`, org, hour).
		Scan(&calls, &tokens)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	return calls, tokens, pg.Interpret(err)
}

// AddHourUsage adds u to the org's usage of the hour starting at hour.
func AddHourUsage(ctx context.Context, db pg.DBTX, org string, hour time.Time, u Usage) error {
	_, err := db.Exec(ctx, `INSERT INTO extraction_usage (org_id, hour, calls, tokens) VALUES ($1, $2, $3, $4)
		ON CONFLICT (org_id, hour) DO UPDATE SET calls = extraction_usage.calls + excluded.calls,
			tokens = extraction_usage.tokens + excluded.tokens`, org, hour, u.Calls, u.Tokens())
	return pg.Interpret(err)
}

// MarkPendingSQL is the statement an append queues into its COMMIT's round trip
// (pg.Session.AtCommit) when the server has an LLM: it records that the session has turns up
// to $5 waiting, when the org's policy has extraction on ($1 org, $2 session, $3 user,
// $4 agent, $5 seq, $6 the default of extraction.enabled, $7 the appending request's W3C
// traceparent, empty when it is not traced: the extraction job's span links to it).
const MarkPendingSQL = `INSERT INTO extraction_state AS e (org_id, session_id, user_id, agent_id, pending_seq, last_turn_at, updated_at, trace_parent)
	SELECT $1, $2, nullif($3, ''), nullif($4, ''), $5, now(), now(), nullif($7, '')
	WHERE coalesce((SELECT (p.policy->'extraction'->>'enabled')::boolean FROM eviction_policies p WHERE p.org_id = $1), $6)
	ON CONFLICT (org_id, session_id) DO UPDATE SET pending_seq = greatest(e.pending_seq, excluded.pending_seq),
		last_turn_at = excluded.last_turn_at, user_id = coalesce(e.user_id, excluded.user_id),
		agent_id = coalesce(e.agent_id, excluded.agent_id), updated_at = excluded.updated_at,
		trace_parent = excluded.trace_parent`

// SessionExtraction is a session's extraction bookkeeping.
type SessionExtraction struct {
	SessionID    string     `json:"session_id"`
	PendingSeq   int64      `json:"pending_seq" doc:"The newest turn recorded as waiting."`
	ExtractedSeq int64      `json:"extracted_seq" doc:"The cursor: every turn at or below it has been extracted."`
	Status       string     `json:"status" enum:"idle,extracted,failed,restricted,rate_limited"`
	Runs         int64      `json:"runs" doc:"Extractions applied."`
	Failures     int        `json:"failures" doc:"Consecutive failed attempts (0 after a success)."`
	LastError    string     `json:"last_error,omitempty" doc:"Why the last attempt failed (never turn content)."`
	LastRunAt    *time.Time `json:"last_run_at,omitempty"`
	RetryAfter   *time.Time `json:"retry_after,omitempty" doc:"The dispatcher leaves the session alone until then."`
	UpdatedAt    time.Time  `json:"updated_at"`
}

// GetState reads a session's extraction state (strata.ErrNotFound when it has none).
func GetState(ctx context.Context, db pg.DBTX, org, session string) (SessionExtraction, error) {
	return getState(ctx, db, org, session, false)
}

func getState(ctx context.Context, db pg.DBTX, org, session string, lock bool) (SessionExtraction, error) {
	q := `SELECT session_id, pending_seq, extracted_seq, status, runs, failures, coalesce(last_error, ''), last_run_at,
		retry_after, updated_at FROM extraction_state WHERE org_id = $1 AND session_id = $2`
	if lock {
		q += ` FOR UPDATE`
	}
	var s SessionExtraction
	err := db.QueryRow(ctx, q, org, session).Scan(&s.SessionID, &s.PendingSeq, &s.ExtractedSeq, &s.Status, &s.Runs,
		&s.Failures, &s.LastError, &s.LastRunAt, &s.RetryAfter, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, strata.ErrNotFound
	}
	return s, pg.Interpret(err)
}

// ensureState makes sure the session has a state row (extraction on demand, or a row the
// append did not write) and locks it until tx ends.
func ensureState(ctx context.Context, tx pgx.Tx, org, session, user, agent string, now time.Time) (SessionExtraction, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO extraction_state (org_id, session_id, user_id, agent_id, updated_at)
		VALUES ($1, $2, nullif($3, ''), nullif($4, ''), $5) ON CONFLICT (org_id, session_id) DO NOTHING`,
		org, session, user, agent, now); err != nil {
		return SessionExtraction{}, pg.Interpret(err)
	}
	return getState(ctx, tx, org, session, true)
}

// advance moves the cursor to seq and records a successful run, on tx (the transaction of
// the decisions it covers).
func advance(ctx context.Context, tx pgx.Tx, org, session string, seq int64, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE extraction_state SET extracted_seq = greatest(extracted_seq, $3),
		pending_seq = greatest(pending_seq, $3), status = 'extracted', runs = runs + 1, failures = 0, last_error = NULL,
		last_run_at = $4, retry_after = NULL, updated_at = $4 WHERE org_id = $1 AND session_id = $2`, org, session, seq, now)
	return pg.Interpret(err)
}

// setStatus records a run that applied nothing (failed, restricted, rate limited).
func (x *Extractor) setStatus(ctx context.Context, org, session, status, msg string, failed bool, retryAfter time.Time) {
	now := x.now()
	err := pg.InOrgTx(context.WithoutCancel(ctx), x.Pool, org, func(tx pgx.Tx) error {
		inc := 0
		if failed {
			inc = 1
		}
		_, err := tx.Exec(ctx, `UPDATE extraction_state SET status = $3, last_error = nullif($4, ''),
			failures = failures + $5, last_run_at = $6, retry_after = $7, updated_at = $6 WHERE org_id = $1 AND session_id = $2`,
			org, session, status, msg, inc, now, retryAfter)
		return err
	})
	if err != nil {
		x.Log.WarnContext(ctx, "extraction: recording the session's status", "org", org, "err", err)
	}
}

// ProvenanceRecord is where one extracted version came from.
type ProvenanceRecord struct {
	Op            string     `json:"op" enum:"add,update,delete"`
	MemoryID      *uuid.UUID `json:"memory_id,omitempty" doc:"The memory version the decision wrote (or retracted)."`
	SessionID     string     `json:"session_id,omitempty"`
	TurnSeqs      []int64    `json:"turn_seqs"`
	Model         string     `json:"model"`
	PromptVersion string     `json:"prompt_version"`
	WrittenBy     string     `json:"written_by,omitempty" doc:"The API key that wrote the turns."`
	CreatedAt     time.Time  `json:"created_at"`
}

// provenanceCols are a ProvenanceRecord's columns of extraction_provenance p (scanProvenance).
const provenanceCols = `p.op, p.memory_id, coalesce(p.session_id, ''), p.turn_seqs, p.model, p.prompt_version,
	coalesce(p.written_by, ''), p.created_at`

func scanProvenance(r pgx.CollectableRow) (ProvenanceRecord, error) {
	var p ProvenanceRecord
	err := r.Scan(&p.Op, &p.MemoryID, &p.SessionID, &p.TurnSeqs, &p.Model, &p.PromptVersion, &p.WrittenBy, &p.CreatedAt)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// RelationProvenance lists the extraction records of a graph relation (issue 43): the
// session and turns it came from, the model and prompt version, the writer, and in MemoryID
// the memory written by the decision it came with, if any. Empty when extraction did not
// write it.
func RelationProvenance(ctx context.Context, db pg.DBTX, org string, relationID uuid.UUID) ([]ProvenanceRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+provenanceCols+`
		FROM extraction_provenance p WHERE p.org_id = $1 AND p.relation_id = $2 ORDER BY p.id`, org, relationID)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, scanProvenance)
	return out, pg.Interpret(err)
}

// MemoryProvenance lists the extraction records of every version of the memory id belongs
// to, oldest first (empty when no version was extracted).
func MemoryProvenance(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) ([]ProvenanceRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+provenanceCols+`
		FROM extraction_provenance p JOIN memories m ON m.org_id = p.org_id AND m.id = p.memory_id
		WHERE p.org_id = $1 AND m.root_id = (SELECT root_id FROM memories WHERE org_id = $1 AND id = $2)
		  AND p.relation_id IS NULL
		ORDER BY p.id`, org, id)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, scanProvenance)
	return out, pg.Interpret(err)
}

// Erased counts what EraseUser removed.
type Erased struct {
	States, Provenance int64
}

// EraseUser removes the subject's extraction state (cursors, statuses) and provenance
// records (GDPR Art. 17; the extracted memories and preferences themselves go with the
// semantic and key-value tiers, the queued jobs with River's).
func EraseUser(ctx context.Context, tx pgx.Tx, org, user string) (Erased, error) {
	var e Erased
	tag, err := tx.Exec(ctx, `DELETE FROM extraction_state WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.States = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM extraction_provenance WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return e, pg.Interpret(err)
	}
	e.Provenance = tag.RowsAffected()
	return e, nil
}
