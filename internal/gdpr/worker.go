package gdpr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
)

// ErasureArgs is the River job that works one erasure. It names the erasure, never the
// subject: River's tables keep job args after completion, and the subject's id must not
// outlive the erasure there.
type ErasureArgs struct {
	OrgID     string `json:"org_id"`
	ErasureID string `json:"erasure_id"`
}

// Kind names the job (erasure skips gdpr_* jobs when it deletes River jobs naming the subject).
func (ErasureArgs) Kind() string { return "gdpr_erasure" }

// MaxAttempts is how many times a failing erasure is tried (River's exponential backoff,
// attempt⁴ seconds: about 22 days in all, inside the 30-day deadline) before it ends failed.
const MaxAttempts = 25

// InsertOpts: many attempts (a busy phase snoozes, a failure backs off and retries).
func (ErasureArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: MaxAttempts} }

// ErasureWorker runs ErasureArgs jobs on an Engine.
type ErasureWorker struct {
	river.WorkerDefaults[ErasureArgs]
	Engine *Engine
}

// Timeout: an erasure of a large subject runs as long as it needs; its lease, extended by
// every batch, is what tells others it is alive.
func (w *ErasureWorker) Timeout(*river.Job[ErasureArgs]) time.Duration { return -1 }

// Work runs the erasure; a live lease elsewhere or a busy phase snoozes the job.
func (w *ErasureWorker) Work(ctx context.Context, job *river.Job[ErasureArgs]) error {
	owner := fmt.Sprintf("river:%d", job.ID)
	err := w.Engine.Run(ctx, job.Args.OrgID, job.Args.ErasureID, owner)
	var held *LeaseHeldError
	var busy *BusyError
	switch {
	case errors.As(err, &held):
		return river.JobSnooze(time.Until(held.Until))
	case errors.As(err, &busy):
		return river.JobSnooze(busy.Wait)
	case errors.Is(err, ErrLeaseLost):
		return nil // the worker that took over finishes it
	}
	if err != nil && job.JobRow != nil && job.Attempt >= job.MaxAttempts && ctx.Err() == nil {
		// The last attempt failed: the erasure ends failed with its error (and an
		// erasure.failed event) instead of staying running for ever.
		if ferr := w.Engine.Fail(ctx, job.Args.OrgID, job.Args.ErasureID, err); ferr != nil {
			return fmt.Errorf("%w (and recording the failure: %v)", err, ferr)
		}
		return river.JobCancel(err)
	}
	return err
}

// Fail ends erasure id of org as failed with err's text (after its last attempt), emits
// erasure.failed and audits it. A completed erasure is left as it is.
func (e *Engine) Fail(ctx context.Context, org, id string, cause error) error {
	msg := cause.Error()
	if len(msg) > 500 {
		msg = msg[:500]
	}
	return pg.InOrgTx(context.WithoutCancel(ctx), e.Pool, org, func(tx pgx.Tx) error {
		var subject string
		err := tx.QueryRow(ctx, `UPDATE gdpr_erasures SET status = 'failed', last_error = $3, lease_owner = NULL, lease_until = NULL
			WHERE org_id = $1 AND id = $2 AND status IN ('pending', 'running') RETURNING subject`, org, id, msg).Scan(&subject)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := outbox.Emit(ctx, tx, org, outbox.New{Type: outbox.ErasureFailed, DedupeKey: "erasure.failed:" + id,
			Data: map[string]any{"erasure_id": id, "subject": subject}}); err != nil {
			return err
		}
		return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: "worker:gdpr", ActorRole: "system",
			Action: "erasure-failed", EntityType: "gdpr.erasure", EntityID: id, Subject: subject, Status: 500,
			Details: map[string]any{"attempts": MaxAttempts}})
	})
}

// Inserter is an insert-only River client (it works no jobs): the HTTP layer and the sweeper
// use it to enqueue erasures inside their own transactions.
type Inserter = river.Client[pgx.Tx]

// NewInserter makes an insert-only River client on pool; middleware wraps its inserts
// (tracing records the inserter's trace context on each job).
func NewInserter(pool *pgxpool.Pool, middleware ...rivertype.Middleware) (*Inserter, error) {
	return river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: middleware})
}

// Sweeper re-enqueues erasures whose worker died: pending or running rows whose lease
// expired (or that never had one) and that were not enqueued again within a lease. It runs
// on every replica; the enqueued_at update makes one replica win per period, and a
// duplicate job would only find the lease taken and do nothing.
type Sweeper struct {
	Pool     *pgxpool.Pool
	Inserter *Inserter
	Lease    time.Duration
	ExtraOrg string
	Log      *slog.Logger
	Now      func() time.Time

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals SweeperTestSignals
}

// SweeperTestSignals are the sweeper's points of interest for tests.
type SweeperTestSignals struct {
	Swept service.TestSignal[int] // a pass of RunOnce ended; the value is erasures enqueued
}

func (s *Sweeper) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// RunOnce enqueues a job for every stranded erasure of every org and returns how many.
func (s *Sweeper) RunOnce(ctx context.Context) (int, error) {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT $1`, s.ExtraOrg)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	orgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, pg.Interpret(err)
	}
	total := 0
	for _, org := range orgs {
		if org == "" {
			continue
		}
		err := pg.InOrgTx(ctx, s.Pool, org, func(tx pgx.Tx) error {
			now := s.now()
			rows, err := tx.Query(ctx, `UPDATE gdpr_erasures SET enqueued_at = $2
				WHERE org_id = $1 AND status IN ('pending', 'running')
				  AND (lease_until IS NULL OR lease_until < $2)
				  AND coalesce(enqueued_at, requested_at) < $3
				RETURNING id`, org, now, now.Add(-s.Lease))
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, id := range ids {
				if _, err := s.Inserter.InsertTx(ctx, tx, ErasureArgs{OrgID: org, ErasureID: id}, nil); err != nil {
					return err
				}
			}
			total += len(ids)
			return nil
		})
		if err != nil {
			return total, pg.Interpret(err)
		}
	}
	return total, nil
}

// Start runs RunOnce now and then every Lease until Stop.
func (s *Sweeper) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		t := time.NewTicker(s.Lease)
		defer t.Stop()
		for {
			if n, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
				s.Log.Warn("gdpr sweeper failed; will retry", "err", err)
			} else if n > 0 {
				s.Log.Info("gdpr: resumed stranded erasures", "count", n)
			}
			s.TestSignals.Swept.Signal(0)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}
