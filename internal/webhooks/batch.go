package webhooks

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mem/strata/internal/pg"
)

// Deliveries are batch-shaped (issue 41): a dispatcher pass inserts the deliveries of many
// events in one statement, already leased for their first attempt; a claim pass leases many
// due retries in one statement; a bounded pool of senders POSTs them concurrently; and one
// recorder writes the outcomes that finished meanwhile, an org's in one statement. Per
// delivery that is a share of a few statements instead of a River job (insert, fetch,
// completion) and two transactions of its own (claim, record) — docs/events.md.

// claimed is a delivery leased for one attempt (the attempt already counted in d.Attempts),
// with what the attempt needs.
type claimed struct {
	org  string
	d    Delivery
	body []byte
	t    target
}

// outcome is one attempt's result, to record.
type outcome struct {
	c       claimed
	status  string // delivered; pending (retried at retryAt); dead; or released (not attempted: shutting down)
	code    int
	latency int
	msg     string
	retryAt *time.Time
	at      time.Time
}

const released = "released"

// recordBatch is the most outcomes one record statement carries.
const recordBatch = 500

// recordLinger is how long the recorder waits after an outcome for others to share its
// transaction (one WAL flush for the lot).
const recordLinger = 5 * time.Millisecond

func (w *Deliverer) lease() time.Duration { return 2*w.RequestTimeout + 5*time.Second }

// attempt makes one attempt of c. span: start a span of its own (the batch path; a River
// job already runs in one).
func (w *Deliverer) attempt(ctx context.Context, c claimed, span bool) outcome {
	if ctx.Err() != nil {
		return outcome{c: c, status: released}
	}
	if span {
		var sp trace.Span
		ctx, sp = otel.GetTracerProvider().Tracer("github.com/strata-mem/strata").Start(ctx, "webhooks.deliver",
			trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("strata.webhook.event_type", c.d.EventType),
				attribute.Int("strata.webhook.attempt", c.d.Attempts)))
		defer sp.End()
		o := w.attemptIn(ctx, c)
		if o.status != "delivered" {
			sp.SetStatus(codes.Error, "delivery attempt failed") // the error text may quote the URL: not recorded
		}
		return o
	}
	return w.attemptIn(ctx, c)
}

func (w *Deliverer) attemptIn(ctx context.Context, c claimed) outcome {
	code, latency, err := w.post(ctx, c.t, c.d.EventID, c.body)
	o := outcome{c: c, status: "delivered", code: code, latency: latency, at: time.Now().UTC()}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Cut off by a shutdown: the attempt is given back (the receiver may have got
			// it: a later attempt carries the same webhook-id).
			return outcome{c: c, status: released}
		}
		o.msg = err.Error()
		if len(o.msg) > 500 {
			o.msg = o.msg[:500]
		}
		o.status = "pending"
		if c.d.Attempts >= w.MaxAttempts {
			o.status = "dead"
		} else {
			r := o.at.Add(w.backoff(c.d.Attempts))
			o.retryAt = &r
		}
	}
	return o
}

// claimSQL leases up to $5 of org's due deliveries ($2: only that one, or ” for any) for an
// attempt each, and returns them with their subscription's URL and secrets — one statement.
// Due: pending, no live lease, and its retry (if any) due. SKIP LOCKED: replicas claiming at
// once take different deliveries.
const claimSQL = `WITH c AS (
		SELECT id FROM webhook_deliveries
		WHERE org_id = $1 AND status = 'pending' AND ($2::text = '' OR id = nullif($2::text, '')::uuid)
		  AND (lease_until IS NULL OR lease_until < $3) AND (retry_at IS NULL OR retry_at <= $3)
		ORDER BY coalesce(retry_at, created_at) LIMIT $5 FOR UPDATE SKIP LOCKED)
	UPDATE webhook_deliveries d SET attempts = d.attempts + 1, lease_until = $4, updated_at = $3
	FROM c, webhook_subscriptions s
	WHERE d.org_id = $1 AND d.id = c.id AND s.org_id = $1 AND s.id = d.subscription_id
	RETURNING d.id::text, d.subscription_id, d.event_id, d.event_seq, d.event_type, d.attempts, d.created_at, d.body,
		s.url, s.secret_seal, s.previous_secret_seal, s.previous_secret_expires_at`

// claim leases up to limit of org's due deliveries (only id, unless ""); next is when the
// org's next retry not yet due falls due (zero: none).
func (w *Deliverer) claim(ctx context.Context, org, id string, limit int) (cs []claimed, next time.Time, err error) {
	now := time.Now().UTC()
	err = pg.InOrgTx(ctx, w.Pool, org, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimSQL, org, id, now, now.Add(w.lease()), limit)
		if err != nil {
			return err
		}
		cs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			c := claimed{org: org, d: Delivery{Status: "pending"}}
			var sealed, prev []byte
			var prevUntil *time.Time
			var body string
			err := r.Scan(&c.d.ID, &c.d.SubscriptionID, &c.d.EventID, &c.d.EventSeq, &c.d.EventType, &c.d.Attempts,
				&c.d.CreatedAt, &body, &c.t.url, &sealed, &prev, &prevUntil)
			if err != nil {
				return c, err
			}
			c.body, c.d.CreatedAt, c.d.UpdatedAt = []byte(body), c.d.CreatedAt.UTC(), now
			c.t.secrets, c.t.err = w.Store.secrets(org, c.d.SubscriptionID, sealed, prev, prevUntil)
			return c, nil
		})
		if err != nil || id != "" {
			return err
		}
		var at *time.Time
		if err := tx.QueryRow(ctx, `SELECT min(retry_at) FROM webhook_deliveries
			WHERE org_id = $1 AND status = 'pending' AND retry_at > $2`, org, now).Scan(&at); err != nil {
			return err
		}
		if at != nil {
			next = *at
		}
		return nil
	})
	return cs, next, pg.Interpret(err)
}

// recordSQL records the outcomes of org's attempts in one statement: each delivery's state
// (locked by the update, so a concurrent delete waits) and a row in its attempt log. Its
// transaction commits without waiting for the WAL flush (no flush of its own competing with
// the writes' commits): if Postgres itself crashed first, the outcome is lost and the
// delivery, still leased, is sent again once the lease runs out — under the same webhook-id.
const recordSQL = `WITH o AS (
		SELECT o.* FROM unnest($2::uuid[], $3::int[], $4::text[], $5::int[], $6::int[], $7::text[], $8::timestamptz[], $9::timestamptz[])
			AS o(id, attempt, status, code, latency, error, retry_at, at),
			(SELECT set_config('synchronous_commit', 'off', true)) s),
	u AS (
		UPDATE webhook_deliveries d SET status = o.status, last_status_code = nullif(o.code, 0), last_error = nullif(o.error, ''),
			last_latency_ms = o.latency, lease_until = NULL, retry_at = o.retry_at, updated_at = o.at,
			delivered_at = CASE WHEN o.status = 'delivered' THEN o.at END
		FROM o WHERE d.org_id = $1 AND d.id = o.id
		RETURNING d.id, o.attempt, o.code, o.latency, o.error, o.at)
	INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code, latency_ms, error, at)
	SELECT $1, id, attempt, nullif(code, 0), latency, nullif(error, ''), at FROM u`

// releaseSQL gives back leases whose attempt never began (a shutdown).
const releaseSQL = `UPDATE webhook_deliveries SET attempts = attempts - 1, lease_until = NULL
	WHERE org_id = $1 AND id = ANY($2::uuid[]) AND status = 'pending'`

// record writes org's outcomes in one transaction (one statement, two with releases).
func (w *Deliverer) record(ctx context.Context, org string, os []outcome) error {
	var rel, ids, statuses, errs []string
	var attempts, codes, latencies []int32
	var retries []*time.Time
	var ats []time.Time
	for _, o := range os {
		if o.status == released {
			rel = append(rel, o.c.d.ID)
			continue
		}
		ids, statuses, errs = append(ids, o.c.d.ID), append(statuses, o.status), append(errs, o.msg)
		attempts, codes, latencies = append(attempts, int32(o.c.d.Attempts)), append(codes, int32(o.code)), append(latencies, int32(o.latency))
		retries, ats = append(retries, o.retryAt), append(ats, o.at)
	}
	err := pg.InOrgTx(ctx, w.Pool, org, func(tx pgx.Tx) error {
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, recordSQL, org, ids, attempts, statuses, codes, latencies, errs, retries, ats); err != nil {
				return err
			}
		}
		if len(rel) > 0 {
			if _, err := tx.Exec(ctx, releaseSQL, org, rel); err != nil {
				return err
			}
		}
		return nil
	})
	return pg.Interpret(err)
}

// recorded reports what was recorded: metrics, the test hook, the dead letter's log line,
// and each retry to schedule.
func (w *Deliverer) recorded(os []outcome) {
	for _, o := range os {
		if o.status == released {
			continue
		}
		if w.Metrics != nil {
			w.Metrics.observe(o)
		}
		if w.Attempted != nil {
			d := o.c.d
			d.Status, d.LastStatusCode, d.LastError, d.LastLatencyMS, d.RetryAt, d.UpdatedAt = o.status, o.code, o.msg, o.latency, o.retryAt, o.at
			if o.status == "delivered" {
				at := o.at
				d.DeliveredAt = &at
			}
			w.Attempted(o.c.org, d)
		}
		switch o.status {
		case "dead":
			w.log().Warn("webhook delivery dead after its attempts", "org", o.c.org, "delivery", o.c.d.ID, "attempts", o.c.d.Attempts, "err", o.msg)
		case "pending":
			if f := w.retry.Load(); f != nil {
				(*f)(o.c.org, *o.retryAt)
			}
		}
	}
}

func (w *Deliverer) log() *slog.Logger { return cmp.Or(w.Log, slog.Default()) }

// recordAll records outcomes, an org's in one transaction, then reports them.
func (w *Deliverer) recordAll(os []outcome) {
	byOrg := map[string][]outcome{}
	for _, o := range os {
		byOrg[o.c.org] = append(byOrg[o.c.org], o)
	}
	for org, batch := range byOrg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.record(ctx, org, batch)
		cancel()
		if err != nil {
			// The deliveries keep their lease; once it runs out they are claimed and sent
			// again under the same webhook-id.
			w.log().Warn("webhooks: recording delivery attempts", "org", org, "count", len(batch), "err", err)
			continue
		}
		w.recorded(batch)
	}
}

// pipeline is the sending side of the batch path: senders POST claimed deliveries, at most
// Workers at once, and one recorder writes their outcomes.
type pipeline struct {
	in   chan claimed
	done chan struct{}
}

// startPipeline starts the senders and the recorder; attempts stop when ctx ends (those
// not begun are released), and done closes once close(in) has drained everything.
func (w *Deliverer) startPipeline(ctx context.Context) *pipeline {
	n := cmp.Or(w.Workers, QueueWorkers)
	p := &pipeline{in: make(chan claimed, 4*n), done: make(chan struct{})}
	out := make(chan outcome, 4*n)
	var senders sync.WaitGroup
	for range n {
		senders.Go(func() {
			for c := range p.in {
				out <- w.attempt(ctx, c, true)
			}
		})
	}
	go func() { senders.Wait(); close(out) }()
	go func() {
		defer close(p.done)
		for o := range out {
			batch := []outcome{o}
			linger := time.NewTimer(recordLinger)
		more:
			for len(batch) < recordBatch {
				select {
				case o, ok := <-out:
					if !ok {
						break more
					}
					batch = append(batch, o)
				case <-linger.C:
					break more
				}
			}
			linger.Stop()
			w.recordAll(batch)
		}
	}()
	return p
}
