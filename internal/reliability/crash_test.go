package reliability

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestCrashUnderLoad: 16 clients write while the server binary is SIGKILLed and restarted
// several times; clients retry what was not acknowledged (or abandon it). Every
// acknowledged write is present exactly once, nothing unacknowledged half-exists, seqs and
// checkpoint versions are gap-free, and audit rows match committed writes one for one.
func TestCrashUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the server binary")
	}
	t.Parallel()
	s := seed(t)
	rng := newRand(s, 0xc4a5)
	st := newStack(t)
	srv := newProc(t, "server", st)
	key, _ := newKey(t, srv.url, st.admin, "load", "agent")

	clients, ops, kills := 16, 24, 5
	if soak() {
		ops, kills = 300, 40
	}
	w := newWorkload(t, clients, ops, s, func(int) *client { return newClient(srv.url, key) })
	w.setup()

	stop := make(chan struct{})
	var killer sync.WaitGroup
	var killing atomic.Bool
	killing.Store(true)
	w.more = killing.Load // the workload outlasts the kills however fast the machine is
	killer.Add(1)
	go func() {
		defer killer.Done()
		defer killing.Store(false)
		for k := 0; k < kills; k++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rng.IntN(500)) * time.Millisecond):
			}
			srv.kill()
			srv.start()
		}
	}()
	began := time.Now()
	w.run()
	close(stop)
	killer.Wait()
	require.False(t, t.Failed())
	// The kills must have landed in the run, not after it.
	require.GreaterOrEqual(t, srv.kills, min(kills, 3), "kills during the run")
	srv.kill() // one more, after everything was acknowledged
	srv.start()
	w.verify(st.dsn, "load")

	// A retry of an acknowledged write after all the kills replays, it does not re-apply.
	c := newClient(srv.url, key)
	r := c.must(t, "PUT", "/v1/jobs/own-0/checkpoint", map[string]any{"state": map[string]any{"n": 2}, "next_action": "after c0-n2"},
		"If-Match", `"0"`, "Idempotency-Key", "own-0-cp0")
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"), string(r.body))
	var slowest time.Duration
	for _, d := range srv.restarts {
		slowest = max(slowest, d)
	}
	t.Logf("%d clients × ≥%d ops in %s with %d SIGKILLs (slowest restart %s); %s", clients, ops,
		time.Since(began).Round(time.Millisecond), srv.kills, slowest.Round(time.Millisecond), w.summary())
}

// TestTwoReplicas: two server processes on one Postgres and Redis behind a round-robin
// proxy; the crash workload runs through the proxy and one replica is SIGKILLed mid-run.
// The other carries on, the invariants hold, a key revoked on one replica is refused at
// once by the other, and background work runs once: the periodic idempotency sweep is
// enqueued and executed once per period (River leader election + unique jobs), and the
// audit chain has one link per record.
func TestTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two server binaries")
	}
	t.Parallel()
	s := seed(t)
	st := newStack(t)
	r1 := newProc(t, "replica-1", st)
	r2 := newProc(t, "replica-2", st)
	lb := newRRProxy(t, r1.url, r2.url)

	// Revocation on one replica is seen at once by the other (LISTEN/NOTIFY drops caches).
	secret, id := newKey(t, r1.url, st.admin, "repl", "agent")
	on2 := newClient(r2.url, secret)
	require.Equal(t, 200, on2.must(t, "GET", "/v1/jobs", nil).status, "the key works (and is cached) on replica 2")
	require.Equal(t, 200, newClient(r1.url, st.admin).must(t, "DELETE", "/v1/admin/keys/"+id, nil).status)
	deadline := time.Now().Add(2 * time.Second)
	for {
		r := on2.must(t, "GET", "/v1/jobs", nil)
		if r.status == 401 {
			break
		}
		require.True(t, time.Now().Before(deadline), "replica 2 still accepts a revoked key: %d", r.status)
		time.Sleep(5 * time.Millisecond) // kept: polls a replica in another process; the propagation time is measured
	}
	t.Logf("revocation seen by the other replica in %s", time.Since(deadline.Add(-2*time.Second)).Round(time.Millisecond))

	key, _ := newKey(t, lb.URL, st.admin, "repl", "agent")
	clients, ops := 16, 24
	if soak() {
		ops = 300
	}
	w := newWorkload(t, clients, ops, s, func(int) *client { return newClient(lb.URL, key) })
	w.setup()
	var killed atomic.Bool
	w.more = func() bool { return !killed.Load() } // the kill lands mid-run however fast the machine is
	go func() {
		time.Sleep(time.Duration(300+newRand(s, 7).IntN(400)) * time.Millisecond) // kept: kill -9 harness pacing
		r1.kill()
		time.Sleep(200 * time.Millisecond) // kept (kill -9 harness pacing): and the survivor carries on for a while after it
		killed.Store(true)
	}()
	w.run()
	require.False(t, t.Failed())
	require.Equal(t, 1, r1.kills, "replica 1 was killed mid-run")
	w.verify(st.dsn, "repl")
	require.Positive(t, lb.served[1].Load())

	// Background work ran once.
	ctx := context.Background()
	db := testenv.OwnerConn(t, st.dsn)
	var sweeps, maxAttempt, periods, running int
	// River elects a leader before it schedules periodic jobs; on a loaded machine that can
	// take longer than the workload, so wait for the first sweep to have been taken. A sweep
	// replica 1 held when it was killed stays "running" until River rescues stuck jobs (an
	// hour by default): it was taken once, and nobody ran it twice, which is what is checked.
	deadline = time.Now().Add(60 * time.Second)
	var runningSince time.Time
	for {
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
			count(*) FILTER (WHERE state = 'running'), coalesce(max(attempt), 0),
			count(DISTINCT date_trunc('minute', created_at)) FROM river_job WHERE kind = 'sweep_idempotency'`).Scan(&sweeps, &running, &maxAttempt, &periods))
		if running > 0 && runningSince.IsZero() {
			runningSince = time.Now()
		}
		// A sweep runs in milliseconds: one still running after 5 s is the killed replica's.
		if sweeps > 0 || running > 0 && time.Since(runningSince) > 5*time.Second || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond) // kept: polls the killed replica's sweep in real time (kill -9 harness)
	}
	if sweeps+running == 0 {
		rows, err := db.Query(ctx, `SELECT state::text, attempt, coalesce(array_to_string(attempted_by, ','), '') FROM river_job WHERE kind = 'sweep_idempotency'`)
		require.NoError(t, err)
		for rows.Next() {
			var state, by string
			var attempt int
			require.NoError(t, rows.Scan(&state, &attempt, &by))
			t.Logf("sweep job: state %s, attempt %d, attempted by %s", state, attempt, by)
		}
		rows.Close()
	}
	require.Positive(t, sweeps+running, "the periodic sweep was taken by a worker")
	require.LessOrEqual(t, sweeps+running, periods, "one sweep per period although two replicas run the scheduler")
	require.LessOrEqual(t, maxAttempt, 1, "no sweep was executed twice")
	audit := newClient(lb.URL, "")
	comp, _ := newKey(t, lb.URL, st.admin, "repl", "compliance")
	audit.key = comp
	r := audit.must(t, "GET", "/v1/audit/verify", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, true, r.m()["ok"], string(r.body))
	var rows, chained, maxSeq int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*), count(seq), coalesce(max(seq), 0) FROM audit_log WHERE org_id = 'repl'`).Scan(&rows, &chained, &maxSeq))
	require.Equal(t, rows, chained, "every record chained (verify chains the pending ones)")
	require.Equal(t, rows, maxSeq, "one link per record: two chainers never chained a record twice or skipped one")
	t.Logf("replica-2 carried on after replica-1 was killed; proxy spread %d/%d; sweeps=%d (+%d held by the killed replica); audit links=%d; %s",
		lb.served[0].Load(), lb.served[1].Load(), sweeps, running, maxSeq, w.summary())
}
