package watch_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/watch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(testenv.Exit)) }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func events(t *testing.T, ctx context.Context, w *watch.Watcher, org string) []outbox.Event {
	t.Helper()
	var out []outbox.Event
	require.NoError(t, pg.InOrgTx(ctx, w.Pool, org, func(tx pgx.Tx) error {
		var err error
		out, err = outbox.List(ctx, tx, org, outbox.Filter{})
		return err
	}))
	return out
}

func TestWatcherEmitsStallsAndDeadlinesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	const org = "watch-org"
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	store := jobs.NewStore(time.Hour, clk.now)
	w := &watch.Watcher{Pool: pool, Jobs: store, ExtraOrg: org, Now: clk.now, Log: slog.Default()}
	pseudo := audit.NewPseudonymizer("k")

	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		if _, _, err := store.PutJob(ctx, tx, org, "j1", jobs.JobSpec{Goal: "g", UserID: "u1"}, nil); err != nil {
			return err
		}
		_, err := store.Start(ctx, tx, org, "j1", "render", jobs.StartInput{Owner: "worker-7", LeaseSeconds: 10})
		return err
	}))
	n, err := w.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n) // nothing stalled yet

	clk.add(30 * time.Second) // the lease ran out
	n, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n) // once per stall
	evs := events(t, ctx, w, org)
	require.Len(t, evs, 1)
	require.Equal(t, outbox.JobStalled, evs[0].Type)
	require.Equal(t, "j1", evs[0].JobID)
	require.JSONEq(t, `"lease_expired"`, string(must(t, evs[0], "reason")))
	require.JSONEq(t, `"render"`, string(must(t, evs[0], "step_id")))
	require.JSONEq(t, `"worker-7"`, string(must(t, evs[0], "owner")))
	require.NotContains(t, string(evs[0].Data), "u1")

	// Erasures: one requested 25 of its 30 days ago is near its deadline; another 31 days
	// ago is overdue; a fresh one is neither.
	var near, over gdpr.Erasure
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		var err error
		if near, err = gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: "alice", Subject: pseudo.Subject(org, "alice"),
			RequestedBy: "k", At: clk.now().Add(-25 * 24 * time.Hour)}); err != nil {
			return err
		}
		if over, err = gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: "bob", Subject: pseudo.Subject(org, "bob"),
			RequestedBy: "k", At: clk.now().Add(-31 * 24 * time.Hour)}); err != nil {
			return err
		}
		_, err = gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: "carol", Subject: pseudo.Subject(org, "carol"),
			RequestedBy: "k", At: clk.now()})
		return err
	}))
	n, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	clk.add(6 * 24 * time.Hour) // the near one is now overdue too (the stall key is unchanged)
	n, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	evs = events(t, ctx, w, org)
	var types []string
	for _, e := range evs[1:] {
		types = append(types, e.Type)
		require.NotContains(t, string(e.Data), "alice")
		require.NotContains(t, string(e.Data), "bob")
	}
	require.ElementsMatch(t, []string{outbox.ErasureDeadlineNear, outbox.ErasureOverdue, outbox.ErasureOverdue}, types)
	for _, e := range evs[1:] {
		if e.Type == outbox.ErasureDeadlineNear {
			require.JSONEq(t, `"`+near.ID+`"`, string(must(t, e, "erasure_id")))
			require.JSONEq(t, `"`+pseudo.Subject(org, "alice")+`"`, string(must(t, e, "subject")))
		}
	}

	// The list flags and the gauge.
	es := []gdpr.Erasure{near, over}
	gdpr.FlagDeadlines(es, clk.now().Add(-6*24*time.Hour))
	require.True(t, es[0].DeadlineNear)
	require.False(t, es[0].Overdue)
	require.True(t, es[1].Overdue)
	require.False(t, es[1].DeadlineNear)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(gdpr.OverdueCollector(pool, clk.now, 5*time.Second))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Equal(t, "strata_gdpr_erasures_overdue", mfs[0].GetName())
	require.Equal(t, 2.0, mfs[0].GetMetric()[0].GetGauge().GetValue())

	// A permanently failing erasure ends failed with its error and an erasure.failed event.
	eng := &gdpr.Engine{Pool: pool, Pseudo: pseudo}
	require.NoError(t, eng.Fail(ctx, org, over.ID, errors.New("redis: connection refused")))
	var got gdpr.Erasure
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		var err error
		got, err = gdpr.GetErasure(ctx, tx, org, over.ID)
		return err
	}))
	require.Equal(t, "failed", got.Status)
	require.Equal(t, "redis: connection refused", got.LastError)
	evs = events(t, ctx, w, org)
	require.Equal(t, outbox.ErasureFailed, evs[len(evs)-1].Type)
	require.NoError(t, eng.Fail(ctx, org, over.ID, errors.New("again"))) // no second event
	require.Len(t, events(t, ctx, w, org), len(evs))

	// Another org sees none of these events.
	require.Empty(t, events(t, ctx, w, "other-org"))

	// Retention: six days on, a one-day retention prunes them all (the head keeps counting).
	w.Retention = 24 * time.Hour
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, events(t, ctx, w, org))
}

func must(t *testing.T, e outbox.Event, key string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, jsonUnmarshal(e.Data, &m))
	v, ok := m[key]
	require.True(t, ok, "%s has no %s: %s", e.Type, key, e.Data)
	b, _ := jsonMarshal(v)
	return b
}

// TestWatcherNoProgressOnceAcrossWatchers: a running job whose step holds a live lease but
// that made no progress for StalledAfter is one job.stalled (no_progress), though two
// watchers (two replicas) pass over it at once and again; a heartbeat is progress, and the
// next quiet spell is a stall of its own.
func TestWatcherNoProgressOnceAcrossWatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	const org = "watch-quiet"
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	store := jobs.NewStore(time.Minute, clk.now)
	w1 := &watch.Watcher{Pool: pool, Jobs: store, ExtraOrg: org, Now: clk.now, Log: slog.Default()}
	w2 := &watch.Watcher{Pool: pool, Jobs: store, ExtraOrg: org, Now: clk.now, Log: slog.Default()}
	var claim jobs.Claim
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		if _, _, err := store.PutJob(ctx, tx, org, "q1", jobs.JobSpec{Goal: "g", UserID: "u-quiet"}, nil); err != nil {
			return err
		}
		var err error
		claim, err = store.Start(ctx, tx, org, "q1", "encode", jobs.StartInput{Owner: "worker-9", LeaseSeconds: 86400})
		return err
	}))
	// passes runs both watchers at once, twice. (What RunOnce returns is not compared: two
	// watchers that both found the stall before either committed each count the emission
	// the outbox's dedupe key then turned into nothing; the outbox is what counts.)
	passes := func() {
		for range 2 {
			var wg sync.WaitGroup
			for _, w := range []*watch.Watcher{w1, w2} {
				wg.Go(func() {
					_, err := w.RunOnce(ctx)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
		}
	}
	passes()
	require.Empty(t, events(t, ctx, w1, org), "quiet for less than StalledAfter")

	clk.add(2 * time.Minute)
	passes()
	evs := events(t, ctx, w1, org)
	require.Len(t, evs, 1, "one event for the stall, whichever watcher saw it first")
	e := evs[0]
	require.Equal(t, outbox.JobStalled, e.Type)
	require.Equal(t, "q1", e.JobID)
	require.JSONEq(t, `"no_progress"`, string(must(t, e, "reason")))
	require.JSONEq(t, `"encode"`, string(must(t, e, "step_id")))
	require.JSONEq(t, `"running"`, string(must(t, e, "step_status")))
	require.JSONEq(t, `"worker-9"`, string(must(t, e, "owner")))
	require.JSONEq(t, `"2m0s"`, string(must(t, e, "stalled_for")))
	require.NotContains(t, string(e.Data), "u-quiet")

	// A heartbeat is progress: no stall; quiet again for StalledAfter, a new one.
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		_, err := store.Heartbeat(ctx, tx, org, "q1", "encode", claim.FencingToken, 0)
		return err
	}))
	passes()
	require.Len(t, events(t, ctx, w1, org), 1)
	clk.add(2 * time.Minute)
	passes()
	evs = events(t, ctx, w1, org)
	require.Len(t, evs, 2)
	require.Equal(t, e.ID, evs[0].ID)
	require.NotEqual(t, string(must(t, e, "progress_at")), string(must(t, evs[1], "progress_at")))
}
