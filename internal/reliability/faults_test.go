package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	_ "github.com/Shopify/toxiproxy/v2/toxics" // registers the toxic types
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/testenv"
)

// Faults between the server and its stores, injected by toxiproxy running in this process:
// every request succeeds or gets a clear 503/504 problem within a bound, no write is
// partial (checked in the database), the service recovers by itself within seconds, and
// after shutdown no goroutine or Postgres connection is left.

const (
	requestTimeout = 3 * time.Second
	answerBound    = requestTimeout + 2*time.Second // no request may take longer than this
	recoverBound   = 10 * time.Second
)

type toxi struct {
	t     *testing.T
	proxy *toxiproxy.Proxy
}

func newToxi(t *testing.T, srv *toxiproxy.ApiServer, name, upstream string) *toxi {
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &toxi{t: t, proxy: p}
}

func (x *toxi) add(name, typ, stream string, attrs string) {
	_, err := x.proxy.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attrs)))
	require.NoError(x.t, err)
}

func (x *toxi) clear() { x.proxy.Toxics.ResetToxics(context.Background()) }
func (x *toxi) down()  { x.proxy.Stop() }
func (x *toxi) up()    { require.NoError(x.t, x.proxy.Start()) }

// outcome of one request in a fault phase.
type outcome struct {
	kind   string // events, kv, state, memory, resume
	status int
	took   time.Duration
	idem   string
	req    request
}

type request struct {
	method, path string
	body         any
	markers      []string
	idem         string
}

type faultRun struct {
	t      *testing.T
	c      *client
	mu     sync.Mutex
	n      int
	unack  []outcome // writes not acknowledged (to check, then retry)
	acked  map[string]bool
	counts map[string]map[int]int // phase → status → count
}

func (f *faultRun) next() int { f.mu.Lock(); defer f.mu.Unlock(); f.n++; return f.n }

func (f *faultRun) requests() []request {
	n := f.next()
	key := fmt.Sprintf("f%d", n)
	var evs []map[string]any
	var markers []string
	for j := 0; j < batchSize; j++ {
		m := fmt.Sprintf("%s-e%d", key, j)
		markers = append(markers, m)
		evs = append(evs, map[string]any{"op": "edit", "params": map[string]any{"m": m}})
	}
	return []request{
		{"POST", "/v1/jobs/faults/events", evs, markers, "ev-" + key},
		{"PUT", "/v1/kv/faults/" + key, map[string]any{"value": key}, []string{key}, "kv-" + key},
		{"PUT", "/v1/sessions/s-" + key + "/state", map[string]any{"state": map[string]any{"k": key}}, []string{key}, "st-" + key},
		{"POST", "/v1/memories", map[string]any{"text": "fault memory " + key, "user_id": "u-" + key}, []string{"fault memory " + key}, "mem-" + key},
		{"GET", "/v1/jobs/faults/resume", nil, nil, ""},
	}
}

// burst sends rounds × 5 requests concurrently and checks each answer: 2xx, or a 503 with
// Retry-After / 504, as a problem, within answerBound. It returns the outcomes.
func (f *faultRun) burst(phase string, rounds int) []outcome {
	t := f.t
	var wg sync.WaitGroup
	out := make(chan outcome, rounds*5)
	for r := 0; r < rounds; r++ {
		for _, rq := range f.requests() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				idem := rq.idem
				var hdr []string
				if idem != "" {
					hdr = []string{"Idempotency-Key", idem}
				}
				began := time.Now()
				resp, err := f.c.do(rq.method, rq.path, rq.body, hdr...)
				took := time.Since(began)
				require.NoError(t, err, "%s: %s %s got no answer", phase, rq.method, rq.path)
				o := outcome{kind: strings.Split(rq.path, "/")[2], status: resp.status, took: took, idem: idem, req: rq}
				require.LessOrEqual(t, took, answerBound, "%s: %s %s took %s", phase, rq.method, rq.path, took)
				switch {
				case resp.status < 300:
				case resp.status == 503:
					require.NotEmpty(t, resp.header.Get("Retry-After"), "%s: 503 without Retry-After: %s", phase, resp.body)
					require.Equal(t, "application/problem+json", resp.header.Get("Content-Type"))
				case resp.status == 504:
					require.Equal(t, "application/problem+json", resp.header.Get("Content-Type"))
				default:
					t.Errorf("%s: %s %s answered %d: %s", phase, rq.method, rq.path, resp.status, resp.body)
				}
				out <- o
			}()
		}
	}
	wg.Wait()
	close(out)
	var all []outcome
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts[phase] == nil {
		f.counts[phase] = map[int]int{}
	}
	for o := range out {
		all = append(all, o)
		f.counts[phase][o.status]++
		if o.req.method == "GET" {
			continue
		}
		if o.status < 300 {
			f.acked[o.idem] = true
		} else {
			f.unack = append(f.unack, o)
		}
	}
	return all
}

// recovered waits until a full burst succeeds and returns how long that took.
func (f *faultRun) recovered(phase string) time.Duration {
	began := time.Now()
	for time.Since(began) < recoverBound {
		ok := true
		for _, o := range f.burst(phase+" (recovering)", 1) {
			ok = ok && o.status < 300
		}
		if ok {
			return time.Since(began)
		}
		time.Sleep(100 * time.Millisecond) // kept: the recovery time after a real fault is what is measured
	}
	f.t.Fatalf("%s: not recovered within %s", phase, recoverBound)
	return 0
}

func statusesOf(os []outcome, kinds ...string) map[int]int {
	m := map[int]int{}
	for _, o := range os {
		for _, k := range kinds {
			if o.kind == k {
				m[o.status]++
			}
		}
	}
	return m
}

// TestFaultsBetweenServerAndStores is deliberately not parallel: it counts the process's
// goroutines before and after, so it runs alone in this package (parallel tests wait).
func TestFaultsBetweenServerAndStores(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	du, err := url.Parse(dsn)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(du.Path, "/")
	ru, err := url.Parse(testenv.RedisURL())
	require.NoError(t, err)

	redis.SetLogger(quietRedis{}) // its dial failures are the point here
	tsrv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	pgx1 := newToxi(t, tsrv, "postgres", du.Host)
	rds := newToxi(t, tsrv, "redis", ru.Host)
	proxied := *du
	proxied.Host = pgx1.proxy.Listen
	rproxied := *ru
	rproxied.Host = rds.proxy.Listen

	monitor, err := pgx.Connect(context.Background(), testenv.BaseDatabaseURL())
	require.NoError(t, err)
	defer monitor.Close(context.Background())
	conns := func() int {
		var n int
		require.NoError(t, monitor.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, dbName).Scan(&n))
		return n
	}

	baseGoroutines := ourGoroutines()
	admin := "sk_admin_" + testenv.RandomID(16)
	env := map[string]string{
		"STRATA_DATABASE_URL": proxied.String(), "STRATA_REDIS_URL": rproxied.String(), "STRATA_REDIS_PREFIX": prefix,
		"STRATA_HTTP_ADDR": "127.0.0.1:0", "STRATA_ADMIN_KEY": admin, "STRATA_LOG_LEVEL": "error",
		"STRATA_STORE_TIMEOUT": "1s", "STRATA_REQUEST_TIMEOUT": requestTimeout.String(), "STRATA_DB_MAX_CONNS": "8",
		"STRATA_SHUTDOWN_TIMEOUT": "3s", "STRATA_SHUTDOWN_DELAY": "0",
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	logs := &strings.Builder{}
	var logMu sync.Mutex
	go func() {
		err := app.Run(ctx, []string{"server"}, func(k string) string { return env[k] }, pw, writerFunc(func(p []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			return logs.Write(p)
		}))
		pw.CloseWithError(fmt.Errorf("server exited: %v", err))
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	var base string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "Strata listening on "); ok {
			base = u
			break
		}
	}
	require.NotEmpty(t, base, "server did not start")
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("server did not shut down")
			}
		}
	}
	defer stop()
	defer func() {
		if t.Failed() {
			logMu.Lock()
			l := logs.String()
			t.Logf("server log (tail):\n%s", l[max(0, len(l)-4000):])
			logMu.Unlock()
		}
	}()

	key, _ := newKey(t, base, admin, "faults", "agent")
	f := &faultRun{t: t, c: newClient(base, key), acked: map[string]bool{}, counts: map[string]map[int]int{}}
	f.c.must(t, "PUT", "/v1/jobs/faults", map[string]any{"goal": "survive"})
	recovery := map[string]time.Duration{}

	// 1. Healthy.
	for _, o := range f.burst("healthy", 4) {
		require.Less(t, o.status, 300, "healthy: %+v", o)
	}
	// 2. Added latency that fits the budget: everything still succeeds.
	pgx1.add("lat", "latency", "downstream", `{"latency":40,"jitter":10}`)
	rds.add("lat", "latency", "downstream", `{"latency":20}`)
	for _, o := range f.burst("latency 40ms", 2) {
		require.Less(t, o.status, 300, "modest latency: %+v", o)
	}
	pgx1.clear()
	rds.clear()
	// 3. Postgres latency beyond the request timeout, then a black hole (connections held,
	// no bytes), then connections reset: clear 503/504 within the bound, never a hang.
	for _, ph := range []struct{ name, typ, attrs string }{
		{"postgres latency 6s", "latency", `{"latency":6000}`},
		{"postgres black hole", "timeout", `{"timeout":0}`},
		{"postgres reset", "reset_peer", `{"timeout":0}`},
	} {
		pgx1.add("t", ph.typ, "upstream", ph.attrs)
		os := f.burst(ph.name, 2)
		require.Zero(t, statusesOf(os, "jobs", "kv", "memories")[200]+statusesOf(os, "jobs", "kv", "memories")[201],
			"%s: no Postgres write can succeed", ph.name)
		pgx1.clear()
		recovery[ph.name] = f.recovered(ph.name)
	}
	// 4. Postgres down (nothing listens), then back.
	pgx1.down()
	f.burst("postgres down", 2)
	r, err := f.c.do("GET", "/readyz", nil)
	require.NoError(t, err)
	require.Equal(t, 503, r.status, "readyz says Postgres is down")
	pgx1.up()
	recovery["postgres down"] = f.recovered("postgres down")
	// 5. Redis slow beyond its per-call timeout, then down: working state answers 503,
	// Postgres-only calls keep working, readyz says degraded; then back.
	rds.add("t", "latency", "downstream", `{"latency":3000}`)
	os := f.burst("redis latency 3s", 2)
	require.Positive(t, statusesOf(os, "sessions")[503], "working state needs Redis")
	require.Zero(t, statusesOf(os, "kv")[503]+statusesOf(os, "jobs")[503], "Postgres-only calls do not need Redis")
	rds.clear()
	recovery["redis latency"] = f.recovered("redis latency")
	rds.down()
	os = f.burst("redis down", 2)
	require.Equal(t, map[int]int{503: 2}, statusesOf(os, "sessions"))
	r, err = f.c.do("GET", "/readyz", nil)
	require.NoError(t, err)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), `"degraded"`)
	rds.up()
	recovery["redis down"] = f.recovered("redis down")

	// No leak while running: the pool stays within its size (+ the cache-invalidation listener).
	require.LessOrEqual(t, conns(), 8+2, "Postgres connections after the faults")

	// No partial write: an unacknowledged event batch is all there or not at all, and so
	// is its audit record; then every retry with its key succeeds and nothing doubles.
	ctxb := context.Background()
	db := testenv.OwnerConn(t, dsn)
	count := func(q string, args ...any) int {
		var n int
		require.NoError(t, db.QueryRow(ctxb, q, args...).Scan(&n))
		return n
	}
	for _, o := range f.unack {
		if o.kind == "jobs" {
			n := count(`SELECT count(*) FROM episodic_events WHERE org_id = 'faults' AND params->>'m' = ANY($1)`, o.req.markers)
			require.Contains(t, []int{0, batchSize}, n, "unacknowledged batch %v half-exists", o.req.markers)
		}
	}
	for _, o := range f.unack {
		resp := f.c.must(t, o.req.method, o.req.path, o.req.body, "Idempotency-Key", o.idem)
		require.Less(t, resp.status, 300, "retry of %s %s: %s", o.req.method, o.req.path, resp.body)
		f.acked[o.idem] = true
	}
	require.Equal(t, 0, count(`SELECT count(*) FROM (SELECT params->>'m' FROM episodic_events WHERE org_id = 'faults'
		GROUP BY 1 HAVING count(*) > 1) d`), "an event was applied twice")
	var maxSeq, events int
	require.NoError(t, db.QueryRow(ctxb, `SELECT coalesce(max(seq), 0), count(*) FROM episodic_events WHERE org_id = 'faults' AND job_id = 'faults'`).Scan(&maxSeq, &events))
	require.Equal(t, events, maxSeq, "seqs are gap-free")
	require.Equal(t, f.n*batchSize, events, "every batch is there exactly once after retries")
	require.Equal(t, f.n, count(`SELECT count(*) FROM memories WHERE org_id = 'faults' AND text LIKE 'fault memory %'`))
	require.Equal(t, f.n, count(`SELECT count(*) FROM kv_entries WHERE org_id = 'faults' AND namespace = 'faults'`))
	require.Equal(t, f.n, count(`SELECT count(*) FROM audit_log WHERE org_id = 'faults' AND action = 'append-events'`),
		"one audit record per committed batch")

	// Shut down; nothing is left behind.
	f.c.hc.CloseIdleConnections()
	stop()
	var goroutines int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) { // kept: goroutines of closed connections exit in real time
		goroutines = ourGoroutines()
		if goroutines <= baseGoroutines+2 || time.Now().After(deadline) {
			break
		}
	}
	if goroutines > baseGoroutines+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after shutdown\n%s", baseGoroutines, goroutines, buf[:runtime.Stack(buf, true)])
	}
	var left int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // kept: Postgres ends closed backends in real time
		if left = conns(); left <= 1 || time.Now().After(deadline) { // 1: the OwnerConn above
			break
		}
	}
	require.LessOrEqual(t, left, 1, "Postgres connections after shutdown")
	t.Logf("statuses by phase: %v", f.counts)
	t.Logf("recovery after the store returned: %v; goroutines %d → %d; unacknowledged writes retried: %d",
		recovery, baseGoroutines, goroutines, len(f.unack))
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// ourGoroutines counts the process's goroutines except toxiproxy's own (its links outlive
// a closed connection by a moment; they belong to the test's fault injector, not to Strata).
func ourGoroutines() int {
	runtime.GC()
	buf := make([]byte, 8<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.TrimSpace(g) != "" && !strings.Contains(g, "github.com/Shopify/toxiproxy") {
			n++
		}
	}
	return n
}
