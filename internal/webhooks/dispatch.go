package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/service"
)

// Dispatcher fans each org's committed outbox events out into deliveries, one per matching
// active subscription — in one transaction with the org's cursor, so each event is fanned
// out exactly once whatever crashes — and hands them, already leased for their first
// attempt, to its Deliverer's senders. Wake(org) asks for a pass over that org (the server
// calls it once a request that emitted has committed, and for the outbox's NOTIFY of a
// worker's emission); every Poll it passes over every org with events, in case a wake-up was
// missed (another replica's write whose server died before its dispatcher ran). Its claim
// pass leases an org's due deliveries (retries whose time came, attempts cut off by a killed
// server once their lease ran out, pings and redeliveries) and sends them too: for an org at
// the retry time the Deliverer scheduled, and for every org every SweepEvery.
type Dispatcher struct {
	Pool       *pgxpool.Pool
	Store      *Store
	Deliverer  *Deliverer
	Poll       time.Duration // default 1s
	SweepEvery time.Duration // default 10s
	ExtraOrg   string
	Log        *slog.Logger

	mu    sync.Mutex
	seen  map[string]int64     // org → head seq dispatched (this replica's view)
	woken map[string]struct{}  // orgs to pass over at the next wake-up
	due   map[string]time.Time // org → when its next retry falls due (this replica's view)
	wake  chan struct{}
	pipe  *pipeline

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals DispatcherTestSignals
}

// DispatcherTestSignals are the dispatcher's points of interest for tests.
type DispatcherTestSignals struct {
	Dispatched service.TestSignal[int] // a pass queued this many deliveries (> 0 only)
}

// Wake asks for a pass over org now (coalesced with the other wake-ups of the next 10 ms).
func (d *Dispatcher) Wake(org string) {
	d.mu.Lock()
	w := d.wake
	if w != nil {
		d.woken[org] = struct{}{}
	}
	d.mu.Unlock()
	if w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// RunOnce dispatches every org whose outbox head moved since the last pass.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	heads, err := outbox.Orgs(ctx, d.Pool)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, h := range heads {
		d.mu.Lock()
		done := d.seen[h.OrgID] >= h.LastSeq
		d.mu.Unlock()
		if done {
			continue
		}
		n, err := d.runOrg(ctx, h.OrgID)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// runWoken dispatches the orgs woken since the last pass.
func (d *Dispatcher) runWoken(ctx context.Context) (int, error) {
	d.mu.Lock()
	orgs := make([]string, 0, len(d.woken))
	for o := range d.woken {
		orgs = append(orgs, o)
	}
	clear(d.woken)
	d.mu.Unlock()
	total := 0
	for i, org := range orgs {
		n, err := d.runOrg(ctx, org)
		total += n
		if err != nil {
			d.mu.Lock()
			for _, o := range orgs[i:] { // the next wake-up or poll retries them
				d.woken[o] = struct{}{}
			}
			d.mu.Unlock()
			return total, err
		}
	}
	return total, nil
}

// runOrg dispatches org until its cursor has caught up.
func (d *Dispatcher) runOrg(ctx context.Context, org string) (int, error) {
	total := 0
	for {
		cs, head, more, err := d.dispatchOrg(ctx, org)
		d.send(ctx, cs)
		total += len(cs)
		if err != nil {
			return total, fmt.Errorf("dispatching webhooks of org %s: %w", org, err)
		}
		if !more {
			d.mu.Lock()
			d.seen[org] = max(d.seen[org], head)
			d.mu.Unlock()
			return total, nil
		}
	}
}

const dispatchBatch = 500

// claimBatch is the most deliveries one claim statement leases.
const claimBatch = 200

// cursorSQL takes org's cursor for the pass (creating it at 0 the first time), locked; no
// row: another replica holds it. The pass commits without waiting for the WAL flush (the
// statement says so): if Postgres itself crashed before the flush, the whole pass — cursor
// and deliveries — is lost together and the next pass fans the same events out again, once;
// an attempt already sent meanwhile is then sent again under the same webhook-id (the
// event's id), which is what a receiver dedupes on. It saves a disk flush per pass.
const cursorSQL = `WITH s AS (SELECT set_config('synchronous_commit', 'off', true)),
	i AS (INSERT INTO webhook_cursors (org_id, seq) SELECT $1, 0 FROM s ON CONFLICT DO NOTHING RETURNING seq),
	c AS (SELECT seq FROM webhook_cursors WHERE org_id = $1 FOR UPDATE SKIP LOCKED)
	SELECT seq FROM c UNION ALL SELECT seq FROM i`

// advanceSQL records a pass's deliveries in one statement, leased for their first attempt,
// and moves the cursor past the pass's events.
const advanceSQL = `WITH d AS (
		INSERT INTO webhook_deliveries
			(org_id, id, subscription_id, event_id, event_seq, event_type, body, attempts, lease_until, created_at, updated_at)
		SELECT $1, u.id, u.sub, u.event_id, u.seq, u.type, u.body, 1, $3, $2, $2
		FROM unnest($4::uuid[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::text[]) AS u(id, sub, event_id, seq, type, body))
	UPDATE webhook_cursors SET seq = $10, updated_at = now() WHERE org_id = $1`

// dispatchOrg fans out up to dispatchBatch events after org's cursor and returns their
// deliveries, leased for a first attempt. more: another batch may follow. A cursor locked
// by another replica is left to it. Four round trips whatever the batch holds: the cursor,
// the events and subscriptions (one batch), the deliveries with the cursor's move, COMMIT.
func (d *Dispatcher) dispatchOrg(ctx context.Context, org string) (cs []claimed, head int64, more bool, err error) {
	err = pg.InOrgTx(ctx, d.Pool, org, func(tx pgx.Tx) error {
		var cursor int64
		err := tx.QueryRow(ctx, cursorSQL, org).Scan(&cursor)
		if err == pgx.ErrNoRows {
			return nil // another replica is on it
		}
		if err != nil {
			return err
		}
		head = cursor
		var evs []outbox.Event
		var subs []subTarget
		b := &pgx.Batch{}
		sql, args := outbox.ListQuery(org, outbox.Filter{After: cursor, Limit: dispatchBatch})
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			evs, err = outbox.CollectEvents(rows)
			return err
		})
		b.Queue(activeTargetsSQL, org).Query(func(rows pgx.Rows) error {
			subs, err = d.Store.collectTargets(org, rows)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		now := d.Store.now()
		var ids, subIDs, eventIDs, types, bodies []string
		var seqs []int64
		for _, e := range evs {
			var body []byte
			for _, s := range subs {
				if !outbox.Matches(s.types, e.Type) {
					continue
				}
				if body == nil {
					if body, err = json.Marshal(e); err != nil {
						return err
					}
				}
				id, err := uuid.NewV7()
				if err != nil {
					return err
				}
				ids, subIDs, eventIDs, types, bodies = append(ids, id.String()), append(subIDs, s.id), append(eventIDs, e.ID),
					append(types, e.Type), append(bodies, string(body))
				seqs = append(seqs, e.Seq)
				cs = append(cs, claimed{org: org, body: body, t: s.t, d: Delivery{ID: id.String(), SubscriptionID: s.id,
					EventID: e.ID, EventSeq: e.Seq, EventType: e.Type, Status: "pending", Attempts: 1, CreatedAt: now, UpdatedAt: now}})
			}
		}
		head = evs[len(evs)-1].Seq
		if _, err := tx.Exec(ctx, advanceSQL, org, now, now.Add(d.Deliverer.lease()), ids, subIDs, eventIDs, seqs, types, bodies, head); err != nil {
			return err
		}
		more = len(evs) == dispatchBatch
		return nil
	})
	if err != nil {
		cs = nil
	}
	return cs, head, more, pg.Interpret(err)
}

// send hands leased deliveries to the senders (without a running pipeline, as in a test
// calling RunOnce alone: attempts them here, one after the other).
func (d *Dispatcher) send(ctx context.Context, cs []claimed) {
	if len(cs) == 0 {
		return
	}
	d.mu.Lock()
	p := d.pipe
	d.mu.Unlock()
	if p == nil {
		os := make([]outcome, len(cs))
		for i, c := range cs {
			os[i] = d.Deliverer.attempt(ctx, c, true)
		}
		d.Deliverer.recordAll(os)
		return
	}
	for _, c := range cs {
		select {
		case p.in <- c:
		case <-ctx.Done():
			return // left leased: claimed again once the lease runs out
		}
	}
}

// ClaimDue leases org's due deliveries and sends them; it returns how many.
func (d *Dispatcher) ClaimDue(ctx context.Context, org string) (int, error) {
	total := 0
	for {
		cs, next, err := d.Deliverer.claim(ctx, org, "", claimBatch)
		if err != nil {
			return total, fmt.Errorf("claiming webhook deliveries of org %s: %w", org, err)
		}
		d.mu.Lock()
		if d.due != nil {
			if next.IsZero() {
				delete(d.due, org)
			} else {
				d.due[org] = next
			}
		}
		d.mu.Unlock()
		d.send(ctx, cs)
		total += len(cs)
		if len(cs) < claimBatch {
			return total, nil
		}
	}
}

// retryAt schedules a claim pass over org at at.
func (d *Dispatcher) retryAt(org string, at time.Time) {
	d.mu.Lock()
	w := d.wake
	if cur, ok := d.due[org]; w != nil && (!ok || at.Before(cur)) {
		d.due[org] = at
	} else {
		w = nil
	}
	d.mu.Unlock()
	if w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// claimDue runs the claim pass over the orgs whose retry time came; it returns the next
// such time (zero: none scheduled).
func (d *Dispatcher) claimDue(ctx context.Context) (time.Time, error) {
	now := time.Now()
	var orgs []string
	d.mu.Lock()
	for o, at := range d.due {
		if !at.After(now) {
			orgs = append(orgs, o)
			delete(d.due, o)
		}
	}
	d.mu.Unlock()
	var firstErr error
	for _, o := range orgs {
		if _, err := d.ClaimDue(ctx, o); err != nil {
			d.retryAt(o, now.Add(time.Second))
			firstErr = cmp.Or(firstErr, err)
		}
	}
	var next time.Time
	d.mu.Lock()
	for _, at := range d.due {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	d.mu.Unlock()
	return next, firstErr
}

// Sweep runs the claim pass over every org: deliveries whose attempt was cut off (their
// lease ran out), retries another replica scheduled, pings and redeliveries whose job was
// lost.
func (d *Dispatcher) Sweep(ctx context.Context) (int, error) {
	orgs, err := queue.Orgs(ctx, d.Pool, d.ExtraOrg)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, org := range orgs {
		n, err := d.ClaimDue(ctx, org)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Start runs passes and the Deliverer's senders until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := d.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	pipe := d.Deliverer.startPipeline(ctx)
	d.mu.Lock()
	d.seen, d.woken, d.due, d.wake, d.pipe = map[string]int64{}, map[string]struct{}{}, map[string]time.Time{}, make(chan struct{}, 1), pipe
	wake := d.wake
	d.mu.Unlock()
	retry := d.retryAt
	d.Deliverer.retry.Store(&retry)
	poll, sweepEvery := d.Poll, d.SweepEvery
	if poll <= 0 {
		poll = time.Second
	}
	if sweepEvery <= 0 {
		sweepEvery = 10 * time.Second
	}
	go func() {
		started()
		defer stopped()
		defer func() {
			d.Deliverer.retry.Store(nil)
			d.mu.Lock()
			d.pipe = nil
			d.mu.Unlock()
			close(pipe.in)
			<-pipe.done // the attempts in flight recorded, those not begun released
		}()
		t := time.NewTicker(poll)
		defer t.Stop()
		dueTimer := time.NewTimer(time.Hour) // the next retry's claim pass (Reset per pass)
		defer dueTimer.Stop()
		lastSweep := time.Time{}
		full := true // a pass over every org: at start and every poll
		for {
			run := d.runWoken
			if full {
				run = d.RunOnce
			}
			if n, err := run(ctx); err != nil && ctx.Err() == nil {
				d.Log.Warn("webhook dispatch failed; will retry", "err", err)
			} else if n > 0 {
				d.TestSignals.Dispatched.Signal(n)
			}
			next, err := d.claimDue(ctx)
			if err != nil && ctx.Err() == nil {
				d.Log.Warn("webhook retries: claiming failed; will retry", "err", err)
			}
			if time.Since(lastSweep) >= sweepEvery {
				lastSweep = time.Now()
				if n, err := d.Sweep(ctx); err != nil && ctx.Err() == nil {
					d.Log.Warn("webhook sweep failed; will retry", "err", err)
				} else if n > 0 {
					d.Log.Info("webhooks: claimed due deliveries in the sweep", "count", n)
				}
			}
			var due <-chan time.Time
			if !next.IsZero() {
				dueTimer.Reset(max(time.Until(next), 0))
				due = dueTimer.C
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
				full = false
				// Coalesce a burst: at hundreds of events a second one pass per event
				// would be a transaction per event; one per 10 ms fans them out in batches.
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			case <-due:
				full = false
			case <-t.C:
				full = true
			}
		}
	}()
	return nil
}
