package gdpr_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/working"
)

// TestGDPRErasureFailsAfterItsLastAttempt: an erasure whose Redis is gone fails every
// attempt; before the last it stays open (River retries it), after the last it ends failed
// with its error and an erasure.failed event, instead of staying running for ever.
func TestGDPRErasureFailsAfterItsLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pseudo := audit.NewPseudonymizer("k")
	e := &gdpr.Engine{Pool: pool, Pseudo: pseudo, Log: log, Batch: 100, Lease: 5 * time.Second,
		Working: working.New(pool, dead, working.Options{Prefix: "x:"}), KV: keyvalue.New(pool, dead, keyvalue.Options{Prefix: "x:", Log: log})}
	const org = "fail-org"
	var er gdpr.Erasure
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		var err error
		er, err = gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: "u1", Subject: pseudo.Subject(org, "u1"),
			RequestedBy: "k", At: time.Now()})
		return err
	}))
	w := &gdpr.ErasureWorker{Engine: e}
	job := func(attempt int) *river.Job[gdpr.ErasureArgs] {
		return &river.Job[gdpr.ErasureArgs]{JobRow: &rivertype.JobRow{ID: 7, Attempt: attempt, MaxAttempts: gdpr.MaxAttempts},
			Args: gdpr.ErasureArgs{OrgID: org, ErasureID: er.ID}}
	}
	get := func() gdpr.Erasure {
		var got gdpr.Erasure
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			var err error
			got, err = gdpr.GetErasure(ctx, tx, org, er.ID)
			return err
		}))
		return got
	}

	err := w.Work(ctx, job(1))
	require.Error(t, err)
	var cancelled *river.JobCancelError
	require.False(t, errors.As(err, &cancelled), "an early attempt is retried")
	require.NotEqual(t, "failed", get().Status)

	err = w.Work(ctx, job(gdpr.MaxAttempts))
	require.ErrorAs(t, err, &cancelled)
	got := get()
	require.Equal(t, "failed", got.Status)
	require.NotEmpty(t, got.LastError)
	var evs []outbox.Event
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		var err error
		evs, err = outbox.List(ctx, tx, org, outbox.Filter{Types: []string{outbox.ErasureFailed}})
		return err
	}))
	require.Len(t, evs, 1)
	require.NotContains(t, string(evs[0].Data), "u1")
}
