package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/webhooks"
)

// counter is a pgx tracer counting what the delivery path sends: statements, round trips
// (a batch is one) and transactions (COMMITs).
type counter struct {
	on                    atomic.Bool
	stmts, trips, commits atomic.Int64
	mu                    sync.Mutex
	seen                  map[string]int // statement (first 60 characters) → count
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if c.on.Load() {
		c.trips.Add(1)
		c.stmt(d.SQL)
	}
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if c.on.Load() {
		c.trips.Add(1)
	}
	return ctx
}
func (c *counter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if c.on.Load() {
		c.stmt(d.SQL)
	}
}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *counter) stmt(sql string) {
	s := strings.Join(strings.Fields(sql), " ")
	if strings.EqualFold(s, "commit") {
		c.commits.Add(1)
	}
	c.stmts.Add(1)
	c.mu.Lock()
	c.seen[s[:min(len(s), 60)]]++
	c.mu.Unlock()
}

// TestBatchDeliveryStatementsPerDelivery proves the batch shape by count (issue 41): 300
// events of one org, fanned out to one subscription and delivered by the dispatcher and its
// Deliverer on a pool whose every statement is traced, cost a fraction of a statement and of a
// transaction per delivery — where the River-job path cost each delivery a River job
// (insert, fetch, completion) and two transactions of its own (claim: lease, body, target;
// record: attempt, state), 8+ statements. Then the same with every first attempt refused
// (HTTP 500) and retried after the backoff: each retry is claimed in a batch too. Every
// event arrives, and every delivery ends delivered with its attempts logged.
func TestBatchDeliveryStatementsPerDelivery(t *testing.T) {
	t.Parallel()
	const n = 300
	dsn := testenv.DatabaseURL(t)
	cnt := &counter{seen: map[string]int{}}
	pool, err := pg.NewPool(context.Background(), dsn, pg.PoolOptions{MaxConns: 8, Tracer: cnt})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	owner := testenv.OwnerConn(t, dsn)
	ctx := context.Background()
	org := "batch-" + testenv.RandomID(6)

	var mu sync.Mutex
	got := map[string]int{}   // webhook-id → arrivals
	refuse := atomic.Bool{}   // refuse each id's first arrival
	tried := map[string]int{} // webhook-id → requests
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		mu.Lock()
		tried[id]++
		first := tried[id] == 1
		if !(refuse.Load() && first) {
			got[id]++
		}
		mu.Unlock()
		if refuse.Load() && first {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(204)
	}))
	t.Cleanup(rc.Close)

	store := webhooks.NewStore([]byte("test seal"), true)
	url := rc.URL
	err = pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		_, _, err := store.Create(ctx, tx, org, "test", webhooks.Input{URL: &url, EventTypes: []string{"*"}})
		return err
	})
	require.NoError(t, err)
	emit := func(prefix string, n int) {
		t.Helper()
		err := pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			for i := range n {
				if err := outbox.Emit(ctx, tx, org, outbox.New{Type: outbox.HandoffPending, JobID: prefix,
					Data: map[string]any{"handoff_id": fmt.Sprint(prefix, "-", i)}}); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dl := &webhooks.Deliverer{Pool: pool, Store: store, Client: webhooks.NewClient(5*time.Second, true), MaxAttempts: 5,
		Backoff: 100 * time.Millisecond, RequestTimeout: 5 * time.Second, Workers: 8, Log: log}
	d := &webhooks.Dispatcher{Pool: pool, Store: store, Deliverer: dl, ExtraOrg: org, Log: log, Poll: time.Hour, SweepEvery: time.Hour}
	require.NoError(t, d.Start(ctx))
	t.Cleanup(d.Stop)

	delivered := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var k int
			require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE org_id = $1 AND status = 'delivered'`, org).Scan(&k))
			return k == want
		}, 60*time.Second, 20*time.Millisecond)
	}
	// measure counts the delivery path's statements for n events emitted in groups of
	// burst (each group delivered before the next is emitted), want delivered in the end.
	measure := func(name string, n, burst, want int) (perStmt, perTx float64) {
		t.Helper()
		cnt.stmts.Store(0)
		cnt.trips.Store(0)
		cnt.commits.Store(0)
		cnt.mu.Lock()
		clear(cnt.seen)
		cnt.mu.Unlock()
		for i := 0; i < n; i += burst {
			emit(fmt.Sprint(name, i), burst) // the writer's statements, not counted
			cnt.on.Store(true)
			d.Wake(org)
			delivered(want - n + i + burst)
			cnt.on.Store(false)
		}
		perStmt = float64(cnt.stmts.Load()) / float64(n)
		perTx = float64(cnt.commits.Load()) / float64(n)
		t.Logf("%s: %d deliveries: %d statements (%.3f per delivery), %d round trips (%.3f), %d transactions (%.3f)",
			name, n, cnt.stmts.Load(), perStmt, cnt.trips.Load(), float64(cnt.trips.Load())/float64(n), cnt.commits.Load(), perTx)
		cnt.mu.Lock()
		for s, k := range cnt.seen {
			t.Logf("  %4d × %s", k, s)
		}
		cnt.mu.Unlock()
		return perStmt, perTx
	}

	// One event at a time (a quiet org: nothing to batch): one dispatch pass (4 round trips)
	// and one record transaction per delivery.
	perStmt, perTx := measure("single", 20, 1, 20)
	require.LessOrEqual(t, perStmt, 12.5, "statements per delivery")
	require.LessOrEqual(t, perTx, 2.5, "transactions per delivery")

	// A burst: every attempt succeeds.
	perStmt, perTx = measure("first", n, n, 20+n)
	require.Less(t, perStmt, 1.0, "statements per delivery")
	require.Less(t, perTx, 0.5, "transactions per delivery")

	// Every first attempt is refused: each delivery is retried once, after its backoff.
	refuse.Store(true)
	perStmt, perTx = measure("retried", n, n, 20+2*n)
	require.Less(t, perStmt, 2.0, "statements per delivery, with a retry each")
	require.Less(t, perTx, 1.0, "transactions per delivery, with a retry each")

	mu.Lock()
	require.Len(t, got, 20+2*n, "every event arrived")
	for id, k := range got {
		require.Equal(t, 1, k, "webhook-id %s arrived %d times", id, k)
	}
	mu.Unlock()
	var attempts, rows int
	require.NoError(t, owner.QueryRow(ctx, `SELECT coalesce(sum(attempts), 0), (SELECT count(*) FROM webhook_attempts WHERE org_id = $1)
		FROM webhook_deliveries WHERE org_id = $1`, org).Scan(&attempts, &rows))
	require.Equal(t, 20+3*n, attempts, "one attempt per first delivery, two per retried one")
	require.Equal(t, 20+3*n, rows, "every attempt in the log")
	var leased int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE org_id = $1 AND lease_until IS NOT NULL`, org).Scan(&leased))
	require.Zero(t, leased)
}
