// Package watch turns conditions found by scanning into outbox events: a job that becomes
// stalled (job.stalled, with where — the step, its owner and fencing token — and why:
// lease_expired or no_progress) and an erasure past 80 % of its deadline or past it
// (erasure.deadline_near, erasure.overdue). Nothing writes these conditions, time does, so a
// periodic pass finds them; each is emitted once (a dedupe key per stall and per erasure),
// however many replicas run the watcher. Each pass also prunes events and finished webhook
// deliveries older than Retention. It is a service on internal/service's start/stop.
package watch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/service"
	"github.com/strata-mem/strata/internal/webhooks"
)

// Watcher scans every org each Interval.
type Watcher struct {
	Pool     *pgxpool.Pool
	Jobs     *jobs.Store
	Interval time.Duration
	// Retention is how long events and finished webhook deliveries are kept (0: for ever).
	Retention time.Duration
	ExtraOrg  string // the bootstrap admin key's org
	Log       *slog.Logger
	Now       func() time.Time

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals TestSignals
}

// TestSignals are the watcher's points of interest for tests.
type TestSignals struct {
	Scanned service.TestSignal[int] // a pass ended; the value is events emitted
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now().UTC()
	}
	return time.Now().UTC()
}

// StallKey is the dedupe key of a stall: one event per lost lease (job, step, fencing token)
// and per quiet spell (job, last progress).
func StallKey(it jobs.JobListItem) string {
	st := it.Stalled
	if st.Reason == "lease_expired" {
		return fmt.Sprintf("job.stalled:%s:lease:%s:%d", it.JobID, st.StepID, st.FencingToken)
	}
	return fmt.Sprintf("job.stalled:%s:quiet:%d", it.JobID, it.ProgressAt.UnixMicro())
}

// RunOnce scans every org once and returns how many events it emitted.
func (w *Watcher) RunOnce(ctx context.Context) (int, error) {
	orgs, err := queue.Orgs(ctx, w.Pool, w.ExtraOrg)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, org := range orgs {
		err := pg.InOrgTx(ctx, w.Pool, org, func(tx pgx.Tx) error {
			n, err := w.stalls(ctx, tx, org)
			total += n
			if err != nil {
				return err
			}
			n, err = gdpr.DeadlineEvents(ctx, tx, org, w.now())
			total += n
			if err != nil || w.Retention <= 0 {
				return err
			}
			if _, err := outbox.Prune(ctx, tx, org, w.now().Add(-w.Retention)); err != nil {
				return err
			}
			_, err = webhooks.Prune(ctx, tx, org, w.now().Add(-w.Retention))
			return err
		})
		if err != nil {
			return total, fmt.Errorf("watching org %s: %w", org, err)
		}
	}
	return total, nil
}

func (w *Watcher) stalls(ctx context.Context, tx pgx.Tx, org string) (int, error) {
	n, after := 0, ""
	for {
		items, err := w.Jobs.ListJobs(ctx, tx, org, jobs.ListFilter{Stalled: true, After: after, Limit: 500})
		if err != nil || len(items) == 0 {
			return n, err
		}
		keys := make([]string, len(items))
		for i, it := range items {
			keys[i] = StallKey(it)
		}
		done, err := outbox.Emitted(ctx, tx, org, keys)
		if err != nil {
			return n, err
		}
		for i, it := range items {
			if done[keys[i]] {
				continue
			}
			st := it.Stalled
			data := map[string]any{"job_id": it.JobID, "reason": st.Reason, "stalled_for": st.StalledFor,
				"step_id": st.StepID, "step_status": st.Status, "owner": st.Owner, "fencing_token": st.FencingToken,
				"attempts": st.Attempts, "progress_at": it.ProgressAt}
			if st.LeaseExpiresAt != nil {
				data["lease_expires_at"] = st.LeaseExpiresAt
			}
			if err := outbox.Emit(ctx, tx, org, outbox.New{Type: outbox.JobStalled, JobID: it.JobID, DedupeKey: keys[i], Data: data}); err != nil {
				return n, err
			}
			n++
		}
		if len(items) < 500 {
			return n, nil
		}
		after = items[len(items)-1].JobID
	}
}

// Start runs RunOnce every Interval until Stop.
func (w *Watcher) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := w.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		service.Every(ctx, w.Interval, func(ctx context.Context) {
			n, err := w.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				w.Log.Warn("event watcher pass failed; will retry", "err", err)
			}
			w.TestSignals.Scanned.Signal(n)
		})
	}()
	return nil
}
