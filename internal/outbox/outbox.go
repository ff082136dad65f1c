// Package outbox is Strata's transactional event outbox (docs/events.md): the events that
// webhooks deliver and GET /v1/events/stream serves are rows of outbox_events, inserted in
// the same transaction as the write that causes them (the request's pg.DBTX, or at its
// COMMIT with EmitSQL), so an event exists only if its write committed and is never lost
// once it did.
//
// Each org's events carry a seq that only grows and commits in order: an emission takes a
// transaction-scoped advisory lock keyed on the org (held until COMMIT) and only then draws
// its seq from one sequence, so of two transactions emitting for one org the second draws
// after the first has committed. A reader that has seen seq N will never later find a
// committed event of that org with a smaller seq, so reading "seq > cursor" skips nothing —
// the property SSE's Last-Event-ID and the webhook dispatcher's cursor rely on. Seq may have
// gaps (other orgs' events, rolled-back transactions, deduplicated emissions).
//
// A request's emission sends no NOTIFY (a NOTIFY takes a database-wide lock at commit and
// writes the notification queue, on every write): the server wakes its own dispatcher and
// streams once the request has committed, and a Waker tells the other replicas, a few
// notifications per coalescing window (Waker). Workers' emissions (Emit) notify in their
// transaction.
//
// Payloads carry ids only (job, step, erasure, quarantine ids) and data subjects as audit
// pseudonyms, never memory text or personal data.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Channel is the Postgres NOTIFY channel an emission signals (payload: the org id) when it
// commits; the dispatcher and the SSE streams wake on it.
const Channel = "strata_outbox"

// The event types.
const (
	JobStalled          = "job.stalled"
	JobCompleted        = "job.completed"
	JobFailed           = "job.failed"
	JobCancelled        = "job.cancelled"
	StepFailed          = "step.failed"
	HandoffPending      = "handoff.pending"
	HandoffAcknowledged = "handoff.acknowledged"
	ErasureCompleted    = "erasure.completed"
	ErasureFailed       = "erasure.failed"
	ErasureDeadlineNear = "erasure.deadline_near"
	ErasureOverdue      = "erasure.overdue"
	QuarantineCreated   = "quarantine.created"
	ExtractionFailed    = "extraction.failed"
	WebhookPing         = "webhook.ping" // sent by POST /v1/admin/webhooks/{id}/ping only; never in the outbox
)

// Types lists every type an outbox event can have (what subscriptions and streams filter on).
var Types = []string{JobStalled, JobCompleted, JobFailed, JobCancelled, StepFailed, HandoffPending,
	HandoffAcknowledged, ErasureCompleted, ErasureFailed, ErasureDeadlineNear, ErasureOverdue,
	QuarantineCreated, ExtractionFailed}

// CheckTypes validates a list of event types (field names the list; "*" is every type).
func CheckTypes(field string, types []string) error {
	for i, t := range types {
		if t != "*" && !slices.Contains(Types, t) {
			return strata.Invalid(fmt.Sprintf("%s[%d]", field, i), "unknown event type %s (one of %s, or *)",
				quote(t), strings.Join(Types, ", "))
		}
	}
	return nil
}

func quote(s string) string {
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// Matches reports whether an event of type t is selected by types (empty or "*": all).
func Matches(types []string, t string) bool {
	return len(types) == 0 || slices.Contains(types, "*") || slices.Contains(types, t)
}

// New is an event to emit.
type New struct {
	Type  string
	JobID string         // the job the event is about, if any (streams filter on it)
	Data  map[string]any // ids and pseudonyms only
	// DedupeKey, when set, makes the emission happen once per org: a second emission with
	// the same key (a replayed request, a stall seen twice) inserts nothing.
	DedupeKey string
	At        time.Time // zero: the database's now()
}

// Event is a committed outbox row, as it is delivered.
type Event struct {
	Seq       int64           `json:"seq" doc:"The event's position in its org's stream (the SSE id); grows in commit order, may skip numbers."`
	ID        string          `json:"id" doc:"The event's unique id (webhook-id): receivers dedupe on it."`
	Type      string          `json:"type"`
	OrgID     string          `json:"org_id"`
	JobID     string          `json:"job_id,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// emitSQL inserts one event with the next seq, in one statement: the org's lock first (CTE
// l, held until the transaction ends: that is the ordering), then nextval. The lock is an
// advisory one — no row is updated, nothing is written to the WAL but the event itself. The
// event id comes from the caller (a random UUID drawn in Go), and only the dedupe index
// arbitrates the insert (seq, from the sequence, cannot collide): issue 25's profile of the
// emission (BenchmarkEmitCost, docs/benchmarks.md) found both measurably cheaper than
// gen_random_uuid() and an insert that checks every unique index.
const emitSQL = `WITH l AS (SELECT pg_advisory_xact_lock(hashtextextended('strata.outbox' || chr(31) || $1, 0)))
	INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
	SELECT $1, nextval('outbox_seq'), $7::uuid, $2, nullif($3, ''), $4::jsonb, nullif($5, ''), coalesce($6::timestamptz, now()) FROM l
	ON CONFLICT (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING`

// emitNotifySQL is emitSQL that also notifies Channel (payload: the org) when it commits, for
// workers' emissions: nothing else wakes the readers for them.
const emitNotifySQL = `WITH l AS (SELECT pg_advisory_xact_lock(hashtextextended('strata.outbox' || chr(31) || $1, 0))),
	e AS (
		INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
		SELECT $1, nextval('outbox_seq'), $7::uuid, $2, nullif($3, ''), $4::jsonb, nullif($5, ''), coalesce($6::timestamptz, now()) FROM l
		ON CONFLICT (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING RETURNING seq)
	SELECT pg_notify('` + Channel + `', $1) FROM e`

func emitArgs(org string, e New) ([]any, error) {
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	data, err := json.Marshal(e.Data)
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", e.Type, err)
	}
	var at *time.Time
	if !e.At.IsZero() {
		t := e.At.UTC()
		at = &t
	}
	return []any{org, e.Type, e.JobID, string(data), e.DedupeKey, at, uuid.NewString()}, nil
}

// EmitSQL returns the statement and arguments that emit e for org, for a request's
// Session.AtCommit (it then rides in the COMMIT's round trip and costs the write path no
// round trip of its own). The statement runs inside the transaction: if it fails, nothing
// commits. It sends no NOTIFY: once the request has committed, the caller tells a Waker (or
// its readers) that org has news.
func EmitSQL(org string, e New) (string, []any, error) {
	args, err := emitArgs(org, e)
	return emitSQL, args, err
}

// Emit inserts e for org in db's transaction and notifies Channel at its commit (workers;
// requests use EmitSQL at commit).
func Emit(ctx context.Context, db pg.DBTX, org string, e New) error {
	args, err := emitArgs(org, e)
	if err != nil {
		return err
	}
	rows, err := db.Query(ctx, emitNotifySQL, args...)
	if err != nil {
		return pg.Interpret(fmt.Errorf("emitting %s: %w", e.Type, err))
	}
	rows.Close()
	return pg.Interpret(rows.Err())
}

// Filter selects events for a reader.
type Filter struct {
	After int64    // only seq > After
	Types []string // empty: every type
	JobID string   // "": every job
	Limit int      // default 100
}

const eventCols = `seq, id::text, type, org_id, coalesce(job_id, ''), data, created_at`

// List returns org's events after f.After in seq order.
func List(ctx context.Context, db pg.DBTX, org string, f Filter) ([]Event, error) {
	sql, args := ListQuery(org, f)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return CollectEvents(rows)
}

// ListQuery is List's statement, for a caller that sends it in a batch (CollectEvents reads
// its rows).
func ListQuery(org string, f Filter) (string, []any) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	types := f.Types
	if slices.Contains(types, "*") {
		types = nil
	}
	return `SELECT ` + eventCols + ` FROM outbox_events
		WHERE org_id = $1 AND seq > $2 AND (coalesce(cardinality($3::text[]), 0) = 0 OR type = ANY($3))
		  AND ($4 = '' OR job_id = $4)
		ORDER BY seq LIMIT $5`, []any{org, f.After, types, f.JobID, f.Limit}
}

// CollectEvents reads the events of ListQuery's rows.
func CollectEvents(rows pgx.Rows) ([]Event, error) {
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, pg.Interpret(err)
}

// Get returns org's event seq (strata.ErrNotFound if there is none).
func Get(ctx context.Context, db pg.DBTX, org string, seq int64) (Event, error) {
	rows, err := db.Query(ctx, `SELECT `+eventCols+` FROM outbox_events WHERE org_id = $1 AND seq = $2`, org, seq)
	if err != nil {
		return Event{}, pg.Interpret(err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEvent)
	return e, pg.Interpret(err)
}

func scanEvent(r pgx.CollectableRow) (Event, error) {
	var e Event
	err := r.Scan(&e.Seq, &e.ID, &e.Type, &e.OrgID, &e.JobID, &e.Data, &e.CreatedAt)
	e.CreatedAt = e.CreatedAt.UTC()
	return e, err
}

// Head is the seq of org's newest committed event (0 if none).
func Head(ctx context.Context, db pg.DBTX, org string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM outbox_events WHERE org_id = $1`, org).Scan(&n)
	return n, pg.Interpret(err)
}

// OrgHead is an org with events and its newest seq.
type OrgHead struct {
	OrgID   string
	LastSeq int64
}

// Orgs lists every org that has events, with its head (db may be the pool: the function runs
// as the schema owner and returns org ids and numbers only).
func Orgs(ctx context.Context, db pg.DBTX) ([]OrgHead, error) {
	rows, err := db.Query(ctx, `SELECT org_id, last_seq FROM strata_outbox_orgs() ORDER BY org_id`)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OrgHead, error) {
		var h OrgHead
		return h, r.Scan(&h.OrgID, &h.LastSeq)
	})
	return out, pg.Interpret(err)
}

// Emitted returns which of keys were already emitted for org (watchers skip those, so a
// condition seen on every pass costs no seq and no lock).
func Emitted(ctx context.Context, db pg.DBTX, org string, keys []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT dedupe_key FROM outbox_events WHERE org_id = $1 AND dedupe_key = ANY($2)`, org, keys)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, k := range ks {
		out[k] = true
	}
	return out, pg.Interpret(err)
}

// Prune deletes org's events created before before (retention; seqs come from a sequence,
// so they are never reused). It returns how many it deleted.
func Prune(ctx context.Context, db pg.DBTX, org string, before time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM outbox_events WHERE org_id = $1 AND created_at < $2`, org, before)
	return tag.RowsAffected(), pg.Interpret(err)
}
