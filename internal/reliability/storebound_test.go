package reliability

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/testenv"
)

// A hung store (a black hole: connections accepted, bytes dropped, no reset) must cost a
// request STRATA_STORE_TIMEOUT, not STRATA_REQUEST_TIMEOUT: the server runs with a 1 s store
// timeout and a 20 s request timeout, so a bound that is not enforced shows as a 20 s hang.
// And a write whose COMMIT reached Postgres but whose answer was lost must say so, and its
// Idempotency-Key retry must answer what was committed.

const (
	boundStoreTimeout   = time.Second
	boundRequestTimeout = 20 * time.Second
	// boundAnswer: the store timeout plus a margin for a second, shorter call (the
	// transaction's rollback runs off the path) and a loaded 2-core machine.
	boundAnswer = boundStoreTimeout + 1500*time.Millisecond
)

var quietOnce sync.Once

// boundStack is one test's server in-process, reaching its own database and Redis prefix
// through its own toxiproxies.
type boundStack struct {
	t        *testing.T
	pg, rds  *toxi
	base     string
	dsn      string
	c        *client
	logs     *strings.Builder
	logMu    sync.Mutex
	pgListen string
}

func newBoundStack(t *testing.T, org string, hooks func(*boundStack) app.Hooks) *boundStack {
	quietOnce.Do(func() { redis.SetLogger(quietRedis{}) })
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	du, err := url.Parse(dsn)
	require.NoError(t, err)
	ru, err := url.Parse(testenv.RedisURL())
	require.NoError(t, err)
	tsrv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	st := &boundStack{t: t, dsn: dsn, logs: &strings.Builder{}}
	st.pg = newToxi(t, tsrv, "postgres", du.Host)
	st.rds = newToxi(t, tsrv, "redis", ru.Host)
	st.pgListen = st.pg.proxy.Listen
	proxied, rproxied := *du, *ru
	proxied.Host, rproxied.Host = st.pg.proxy.Listen, st.rds.proxy.Listen
	admin := "sk_admin_" + testenv.RandomID(16)
	env := map[string]string{
		"STRATA_DATABASE_URL": proxied.String(), "STRATA_REDIS_URL": rproxied.String(), "STRATA_REDIS_PREFIX": prefix,
		"STRATA_HTTP_ADDR": "127.0.0.1:0", "STRATA_ADMIN_KEY": admin, "STRATA_LOG_LEVEL": "warn",
		"STRATA_STORE_TIMEOUT": boundStoreTimeout.String(), "STRATA_REQUEST_TIMEOUT": boundRequestTimeout.String(),
		"STRATA_DB_MAX_CONNS": "8", "STRATA_SHUTDOWN_TIMEOUT": "3s",
	}
	var h app.Hooks
	if hooks != nil {
		h = hooks(st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := app.RunWith(ctx, []string{"server"}, func(k string) string { return env[k] }, pw, writerFunc(func(p []byte) (int, error) {
			st.logMu.Lock()
			defer st.logMu.Unlock()
			return st.logs.Write(p)
		}), h)
		pw.CloseWithError(fmt.Errorf("server exited: %v", err))
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "Strata listening on "); ok {
			st.base = u
			break
		}
	}
	require.NotEmpty(t, st.base, "server did not start")
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		st.pg.clear()
		st.rds.clear()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("server did not shut down")
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			st.logMu.Lock()
			l := st.logs.String()
			st.logMu.Unlock()
			t.Logf("server log (tail):\n%s", l[max(0, len(l)-4000):])
		}
	})
	key, _ := newKey(t, st.base, admin, org, "agent")
	st.c = newClient(st.base, key)
	st.c.hc.Timeout = 8 * time.Second // well under the request timeout: a hang fails the test, not the run
	return st
}

// probe is one request kind sent while a store is hung.
type probe struct {
	name, method, path string
	body               any
	idem               bool
	pgWrite            bool // a Postgres write: it cannot succeed while Postgres is hung
}

func (st *boundStack) probes(n int) []probe {
	return []probe{
		{"memory write (Idempotency-Key)", "POST", "/v1/memories", map[string]any{"text": fmt.Sprintf("bound memory k%d", n), "user_id": "u1"}, true, true},
		{"memory write", "POST", "/v1/memories", map[string]any{"text": fmt.Sprintf("bound memory %d", n), "user_id": "u1"}, false, true},
		{"state write", "PUT", "/v1/sessions/s1/state", map[string]any{"state": map[string]any{"n": n}, "user_id": "u1"}, true, true},
		{"turn append", "POST", "/v1/sessions/s1/messages", map[string]any{"role": "user", "content": fmt.Sprint("hi ", n), "user_id": "u1"}, false, false},
		{"search", "POST", "/v1/memories/search", map[string]any{"query": "bound memory", "user_id": "u1"}, false, false},
		{"kv write", "PUT", fmt.Sprintf("/v1/kv/bound/k%d", n), map[string]any{"value": n}, true, true},
		{"kv read", "GET", "/v1/kv/bound/k0", nil, false, false},
		{"context", "POST", "/v1/context", map[string]any{"query": "bound memory", "user_id": "u1", "session_id": "s1", "similar_jobs": 0}, false, false},
		{"event append", "POST", "/v1/jobs/bound/events", []map[string]any{{"op": "edit", "params": map[string]any{"n": n}}}, true, true},
	}
}

// fire sends every probe at once and checks each answer: within boundAnswer, and either
// 2xx (a read a cache could serve, or a Redis-only call while Postgres is hung) or a 503
// problem with Retry-After; a Postgres write (while Postgres is hung) must be 503. It
// returns the status of each probe by name.
func (st *boundStack) fire(phase string, round int, pgHung bool) map[string]int {
	t := st.t
	ps := st.probes(round)
	out := make([]int, len(ps))
	took := make([]time.Duration, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hdr []string
			if p.idem {
				hdr = []string{"Idempotency-Key", strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(fmt.Sprintf("%s-%s-%d", phase, p.name, round))}
			}
			began := time.Now()
			resp, err := st.c.do(p.method, p.path, p.body, hdr...)
			if !assertNoErr(t, err, "%s: %s got no answer within %s (took %s)", phase, p.name, st.c.hc.Timeout, time.Since(began)) {
				return
			}
			out[i] = resp.status
			took[i] = time.Since(began)
			if took := took[i]; took > boundAnswer {
				t.Errorf("%s: %s answered %d after %s; the bound is %s (store timeout %s, request timeout %s)",
					phase, p.name, resp.status, took.Round(time.Millisecond), boundAnswer, boundStoreTimeout, boundRequestTimeout)
			}
			switch {
			case resp.status < 300 && !(pgHung && p.pgWrite):
			case resp.status == 503:
				if resp.header.Get("Retry-After") == "" || resp.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s: %s: 503 without Retry-After or not a problem: %v %s", phase, p.name, resp.header, resp.body)
				}
			default:
				t.Errorf("%s: %s answered %d: %s", phase, p.name, resp.status, resp.body)
			}
		}()
	}
	wg.Wait()
	m := map[string]int{}
	var slowest time.Duration
	for i, p := range ps {
		m[p.name] = out[i]
		slowest = max(slowest, took[i])
	}
	t.Logf("%s, round %d: slowest answer %s", phase, round, slowest.Round(time.Millisecond))
	return m
}

func assertNoErr(t *testing.T, err error, msg string, args ...any) bool {
	if err != nil {
		t.Errorf(msg+": %v", append(args, err)...)
		return false
	}
	return true
}

// recover waits (up to 15 s) for a round in which every probe succeeds.
func (st *boundStack) recover(phase string) time.Duration {
	began := time.Now()
	for round := 1000; time.Since(began) < 15*time.Second; round++ {
		ok := true
		for _, p := range st.probes(round) {
			r, err := st.c.do(p.method, p.path, p.body)
			ok = ok && err == nil && r.status < 300
		}
		if ok {
			return time.Since(began)
		}
		time.Sleep(100 * time.Millisecond) // kept: recovery after a real fault is measured in real time
	}
	st.t.Fatalf("%s: not recovered within 15 s", phase)
	return 0
}

// TestHungStoreAnswersWithinStoreTimeout black-holes Postgres (connections held, bytes
// dropped), then makes every new connection hang (a listener that accepts and never
// answers, with the pool's connections cut), then black-holes Redis: every request kind
// answers 503 with Retry-After within the store timeout (plus a margin), never at the
// request timeout, and the server recovers by itself when the fault ends.
func TestHungStoreAnswersWithinStoreTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	t.Parallel()
	st := newBoundStack(t, "bound", nil)
	st.c.must(t, "PUT", "/v1/jobs/bound", map[string]any{"goal": "stay bounded"})
	for _, p := range st.probes(0) {
		r := st.c.must(t, p.method, p.path, p.body)
		require.Less(t, r.status, 300, "healthy: %s: %s", p.name, r.body)
	}

	// 1. Postgres black hole on open connections.
	st.pg.add("hole", "timeout", "upstream", `{"timeout":0}`)
	for round := 1; round <= 2; round++ {
		got := st.fire("postgres black hole", round, true)
		t.Logf("postgres black hole, round %d: %v", round, got)
	}
	st.pg.clear()
	t.Logf("recovered from the Postgres black hole in %s", st.recover("postgres black hole"))

	// 2. New connections hang: the proxy stops (every pooled connection is cut) and a
	// listener on its address accepts connections and never answers.
	st.pg.down()
	ln, err := net.Listen("tcp", st.pgListen)
	require.NoError(t, err)
	var accepted atomic.Int64
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	for round := 3; round <= 4; round++ {
		got := st.fire("postgres connect hangs", round, true)
		t.Logf("postgres connect hangs, round %d: %v", round, got)
	}
	require.Positive(t, accepted.Load(), "the server opened new connections into the hang")
	require.NoError(t, ln.Close())
	heldMu.Lock()
	for _, c := range held {
		_ = c.Close()
	}
	heldMu.Unlock()
	st.pg.up()
	t.Logf("recovered from hanging connects in %s (%d connections accepted and held)", st.recover("postgres connect hangs"), accepted.Load())

	// 3. Redis black hole: the Redis-backed routes answer 503 within the bound.
	st.rds.add("hole", "timeout", "upstream", `{"timeout":0}`)
	got := st.fire("redis black hole", 5, false)
	t.Logf("redis black hole: %v", got)
	require.Equal(t, 503, got["state write"], "working state needs Redis")
	require.Equal(t, 503, got["turn append"], "turns need Redis")
	st.rds.clear()
	t.Logf("recovered from the Redis black hole in %s", st.recover("redis black hole"))
}

// A lost COMMIT, deterministically. The server's pool tracer (commitCutter) arms a key's
// cut when the batch that carries that key's idempotency record and COMMIT starts; the
// commitcut toxic on the Postgres proxy's upstream then acts on the first chunk of a
// connection holding the key (the batch's statements with their arguments; a
// statement-description round trip before it holds none): with drop_commit it drops that
// chunk and everything after on that connection (the COMMIT never arrives); otherwise it
// passes the chunk to Postgres and cuts the connection right behind it (the COMMIT runs;
// its answer cannot come back).
type cutState struct {
	dropCommit bool
	armed, cut atomic.Bool
	seen       chan struct{}
	seenOnce   sync.Once
}

var cuts sync.Map // key → *cutState

type commitCutToxic struct {
	Key string `json:"key"`
}

func init() { toxics.Register("commitcut", new(commitCutToxic)) }

func (x *commitCutToxic) Pipe(stub *toxics.ToxicStub) {
	v, _ := cuts.Load(x.Key)
	st, _ := v.(*cutState)
	dropping := false // this connection's COMMIT is being dropped (other connections pass)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if st != nil && st.armed.Load() && !st.cut.Load() && bytes.Contains(c.Data, []byte(x.Key)) {
				st.cut.Store(true)
				st.seenOnce.Do(func() { close(st.seen) })
				if st.dropCommit {
					dropping = true
					continue
				}
				stub.Output <- c // the COMMIT goes to Postgres,
				stub.Close()     // and the connection is cut behind it
				for {            // (what the client still sends goes nowhere)
					select {
					case <-stub.Interrupt:
						return
					case c := <-stub.Input:
						if c == nil {
							return
						}
					}
				}
			}
			if !dropping {
				stub.Output <- c
			}
		}
	}
}

// commitCutter is the server's pool tracer: it arms the cut of the key whose idempotency
// record travels in a batch that ends in COMMIT.
type commitCutter struct{}

func (commitCutter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (commitCutter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (commitCutter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (commitCutter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (commitCutter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	qs := d.Batch.QueuedQueries
	if len(qs) == 0 || qs[len(qs)-1].SQL != "COMMIT" {
		return ctx
	}
	for _, q := range qs {
		if strings.Contains(q.SQL, "completing idempotency record") && len(q.Arguments) > 1 {
			if k, ok := q.Arguments[1].(string); ok {
				if v, ok := cuts.Load(k); ok {
					v.(*cutState).armed.Store(true)
				}
			}
		}
	}
	return ctx
}

// armCut prepares key's cut on px: its COMMIT lost (dropCommit) or its answer lost.
func armCut(px *toxi, key string, dropCommit bool) *cutState {
	st := &cutState{dropCommit: dropCommit, seen: make(chan struct{})}
	cuts.Store(key, st)
	px.add("cut", "commitcut", "upstream", fmt.Sprintf(`{"key":%q}`, key))
	return st
}

// TestCommitOutcomeUnknown loses the answer to a memory write's COMMIT (the COMMIT reached
// Postgres), then loses a COMMIT itself (it never arrived): both answer the typed 503 that
// says the outcome is unknown; after recovery the first one's retry with its
// Idempotency-Key replays the committed answer (same memory, stored once), and the second
// one's retry runs the write once.
func TestCommitOutcomeUnknown(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	t.Parallel()
	st := newBoundStack(t, "unknown", func(*boundStack) app.Hooks { return app.Hooks{PoolTracer: commitCutter{}} })
	db := testenv.OwnerConn(t, st.dsn)
	count := func(text string) int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(),
			`SELECT count(*) FROM memories WHERE org_id = 'unknown' AND text = $1`, text).Scan(&n))
		return n
	}
	write := func(text, key string) *reply {
		r, err := st.c.do("POST", "/v1/memories", map[string]any{"text": text, "user_id": "u1"}, "Idempotency-Key", key)
		require.NoError(t, err)
		return r
	}
	checkUnknown := func(r *reply, took time.Duration) {
		t.Helper()
		require.Equal(t, 503, r.status, "%s", r.body)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		m := r.m()
		require.Equal(t, "urn:strata:problem:commit-outcome-unknown", m["type"], "%s", r.body)
		require.Contains(t, m["detail"], "may have been applied")
		require.Contains(t, m["detail"], "same Idempotency-Key")
		require.LessOrEqual(t, took, boundAnswer, "a lost answer costs at most the store timeout")
	}

	// 1. The COMMIT reaches Postgres; its answer is lost.
	keyA := "lost-answer-" + testenv.RandomID(8)
	cut := armCut(st.pg, keyA, false)
	began := time.Now()
	r := write("committed, answer lost", keyA)
	took := time.Since(began)
	select {
	case <-cut.seen:
	default:
		t.Fatalf("the commit of the keyed write was not seen: %d %s", r.status, r.body)
	}
	checkUnknown(r, took)
	st.pg.clear()
	require.Equal(t, 1, count("committed, answer lost"), "the COMMIT reached Postgres: the memory is there")
	var replay *reply
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) { // kept: the pool reconnects in real time
		replay = write("committed, answer lost", keyA)
		if replay.status != 503 || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(t, 201, replay.status, "%s", replay.body)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"), "the retry answers what was committed")
	var id string
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT id::text FROM memories WHERE org_id = 'unknown' AND text = 'committed, answer lost'`).Scan(&id))
	require.Equal(t, id, replay.m()["id"], "the replay names the committed memory")
	require.Equal(t, 1, count("committed, answer lost"), "no second memory")

	// 2. The COMMIT never arrives.
	keyB := "lost-commit-" + testenv.RandomID(8)
	cut = armCut(st.pg, keyB, true)
	began = time.Now()
	r = write("never committed", keyB)
	took = time.Since(began)
	select {
	case <-cut.seen:
	default:
		t.Fatalf("the commit of the keyed write was not seen: %d %s", r.status, r.body)
	}
	checkUnknown(r, took)
	st.pg.clear()
	require.Equal(t, 0, count("never committed"), "the COMMIT never reached Postgres")
	var retry *reply
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) { // kept: the first attempt's backend ends in real time
		retry = write("never committed", keyB)
		if (retry.status != 503 && retry.status != 409) || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(t, 201, retry.status, "%s", retry.body)
	require.Empty(t, retry.header.Get("Idempotent-Replayed"), "nothing was committed: the write runs")
	require.Equal(t, 1, count("never committed"), "the write ran once")
	again := write("never committed", keyB)
	require.Equal(t, 201, again.status, "%s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, retry.m()["id"], again.m()["id"])
	require.Equal(t, 1, count("never committed"))
}
