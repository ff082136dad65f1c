package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/service"
)

// Dispatcher fans each org's committed outbox events out into deliveries, one per matching
// active subscription, and enqueues their River jobs — in one transaction with the org's
// cursor, so each event is fanned out exactly once whatever crashes. Wake(org) asks for a
// pass over that org (the server calls it once a request that emitted has committed, and
// for the outbox's NOTIFY of a worker's emission); every Poll it passes over every org with
// events, in case a wake-up was missed (another replica's write whose server died before
// its dispatcher ran); every SweepEvery it re-enqueues pending deliveries whose attempt was
// cut off (a killed server).
type Dispatcher struct {
	Pool       *pgxpool.Pool
	Store      *Store
	Queue      *river.Client[pgx.Tx]
	Poll       time.Duration // default 1s
	SweepEvery time.Duration // default 10s
	// Stale is how long a pending delivery may sit without a live attempt before the sweep
	// enqueues it again (its River job died with a server); default 30s.
	Stale    time.Duration
	ExtraOrg string
	Log      *slog.Logger

	mu    sync.Mutex
	seen  map[string]int64    // org → head seq dispatched (this replica's view)
	woken map[string]struct{} // orgs to pass over at the next wake-up
	wake  chan struct{}

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
		n, head, more, err := d.dispatchOrg(ctx, org)
		total += n
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

// dispatchOrg fans out up to dispatchBatch events after org's cursor. more: another batch
// may follow. A cursor locked by another replica is left to it.
func (d *Dispatcher) dispatchOrg(ctx context.Context, org string) (queued int, head int64, more bool, err error) {
	err = pg.InOrgTx(ctx, d.Pool, org, func(tx pgx.Tx) error {
		// The pass commits without waiting for the WAL flush (its first statement says so):
		// if Postgres itself crashed before the flush, the whole pass — cursor, deliveries
		// and their jobs — is lost together and the next pass fans the same events out again,
		// once; and no attempt can reach a receiver first, since an attempt's claim commits
		// with a flush, which flushes this pass too. It saves a disk flush per pass.
		if _, err := tx.Exec(ctx, `WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
			INSERT INTO webhook_cursors (org_id, seq) SELECT $1, 0 FROM s ON CONFLICT DO NOTHING`, org); err != nil {
			return err
		}
		var cursor int64
		err := tx.QueryRow(ctx, `SELECT seq FROM webhook_cursors WHERE org_id = $1 FOR UPDATE SKIP LOCKED`, org).Scan(&cursor)
		if err == pgx.ErrNoRows {
			return nil // another replica is on it
		}
		if err != nil {
			return err
		}
		head = cursor
		evs, err := outbox.List(ctx, tx, org, outbox.Filter{After: cursor, Limit: dispatchBatch})
		if err != nil || len(evs) == 0 {
			return err
		}
		subs, err := d.Store.List(ctx, tx, org, "", 10000)
		if err != nil {
			return err
		}
		now := d.Store.now()
		var jobs []river.InsertManyParams
		for _, e := range evs {
			var body []byte
			for _, s := range subs {
				if !s.Active || !outbox.Matches(s.EventTypes, e.Type) {
					continue
				}
				if body == nil {
					if body, err = json.Marshal(e); err != nil {
						return err
					}
				}
				dl, err := d.Store.insertDelivery(ctx, tx, org, s.ID, e.ID, e.Seq, e.Type, body, now)
				if err != nil {
					return err
				}
				jobs = append(jobs, river.InsertManyParams{Args: DeliverArgs{OrgID: org, DeliveryID: dl.ID}})
			}
		}
		if len(jobs) > 0 {
			if _, err := d.Queue.InsertManyTx(ctx, tx, jobs); err != nil {
				return err
			}
		}
		head = evs[len(evs)-1].Seq
		if _, err := tx.Exec(ctx, `UPDATE webhook_cursors SET seq = $2, updated_at = now() WHERE org_id = $1`, org, head); err != nil {
			return err
		}
		queued, more = len(jobs), len(evs) == dispatchBatch
		return nil
	})
	return queued, head, more, pg.Interpret(err)
}

// Sweep re-enqueues pending deliveries whose attempt lease ran out (the server running it
// died) or whose retry is long overdue (its River job is gone).
func (d *Dispatcher) Sweep(ctx context.Context) (int, error) {
	orgs, err := queue.Orgs(ctx, d.Pool, d.ExtraOrg)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, org := range orgs {
		err := pg.InOrgTx(ctx, d.Pool, org, func(tx pgx.Tx) error {
			now := d.Store.now()
			stale := d.Stale
			if stale <= 0 {
				stale = 30 * time.Second
			}
			// An attempt whose lease ran out, or a delivery no attempt has touched for Stale
			// (its job was claimed by a server that died before the attempt began, or its
			// retry is long overdue). A duplicate job is harmless: an attempt needs the lease.
			rows, err := tx.Query(ctx, `UPDATE webhook_deliveries SET lease_until = NULL, retry_at = NULL, updated_at = $2
				WHERE org_id = $1 AND status = 'pending'
				  AND ((lease_until IS NOT NULL AND lease_until < $2)
				    OR (lease_until IS NULL AND coalesce(retry_at, updated_at) < $3))
				RETURNING id::text`, org, now, now.Add(-stale))
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(ids) == 0 {
				return err
			}
			jobs := make([]river.InsertManyParams, len(ids))
			for i, id := range ids {
				jobs[i] = river.InsertManyParams{Args: DeliverArgs{OrgID: org, DeliveryID: id}}
			}
			_, err = d.Queue.InsertManyTx(ctx, tx, jobs)
			total += len(ids)
			return err
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Start runs passes until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := d.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	d.mu.Lock()
	d.seen, d.woken, d.wake = map[string]int64{}, map[string]struct{}{}, make(chan struct{}, 1)
	wake := d.wake
	d.mu.Unlock()
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
		t := time.NewTicker(poll)
		defer t.Stop()
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
			if time.Since(lastSweep) >= sweepEvery {
				lastSweep = time.Now()
				if n, err := d.Sweep(ctx); err != nil && ctx.Err() == nil {
					d.Log.Warn("webhook sweep failed; will retry", "err", err)
				} else if n > 0 {
					d.Log.Info("webhooks: re-enqueued interrupted deliveries", "count", n)
				}
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
			case <-t.C:
				full = true
			}
		}
	}()
	return nil
}
