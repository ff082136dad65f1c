package deploytest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/strata-mem/strata/internal/loadtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// plan is how long and how hard: the bounded variant runs in `go test ./...`, the full
// one in `make deploy-test` (STRATA_DEPLOY_TEST=full).
type plan struct {
	name          string
	rate          int           // load-mix requests per second
	clients       int           // verifier clients
	pause         time.Duration // between one verifier client's writes
	warm, settle  time.Duration // before the first change; after each
	cut           time.Duration // Postgres unreachable
	restartRounds int           // rolling SIGTERM restarts of the new release after the deploy
	chunk         time.Duration // the load mix runs in attacks of this length
}

func choosePlan() plan {
	if os.Getenv("STRATA_DEPLOY_TEST") == "full" {
		return plan{name: "full", rate: 60, clients: 4, pause: 20 * time.Millisecond, warm: 10 * time.Second,
			settle: 8 * time.Second, cut: 10 * time.Second, restartRounds: 2, chunk: 2 * time.Second}
	}
	return plan{name: "bounded", rate: 20, clients: 3, pause: 50 * time.Millisecond, warm: 3 * time.Second,
		settle: 3 * time.Second, cut: 5 * time.Second, restartRounds: 1, chunk: 2 * time.Second}
}

// phaseBook names the phase every request is counted in.
type phaseBook struct {
	mu      sync.Mutex
	cur     string
	order   []string
	strict  map[string]bool // phases in which no client may see an error
	chunkAt atomic.Pointer[string]
}

func (b *phaseBook) get() string { b.mu.Lock(); defer b.mu.Unlock(); return b.cur }

// enter starts a phase and waits until the load mix's next attack counts in it, so no
// request of the previous phase's attack is counted in this one.
func (b *phaseBook) enter(name string, strict bool) {
	b.mu.Lock()
	b.cur = name
	b.order = append(b.order, name)
	b.strict[name] = strict
	b.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // kept: waits for the load generator's attack boundary
		if p := b.chunkAt.Load(); p != nil && *p == name {
			return
		}
	}
}

// loadBook sums the load mix's attacks by phase.
type loadBook struct {
	mu       sync.Mutex
	requests map[string]uint64
	byStatus map[string]map[string]int // phase → status → count (errors only)
	texts    map[string][]string
	err      error
}

func (l *loadBook) add(phase string, p *loadtest.Phase) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests[phase] += p.Requests
	for code, n := range p.ByStatus {
		if !strings.HasPrefix(code, "2") && !strings.HasPrefix(code, "3") {
			if l.byStatus[phase] == nil {
				l.byStatus[phase] = map[string]int{}
			}
			l.byStatus[phase][code] += n
		}
	}
	for ep, r := range p.Endpoints {
		if r.Errors > 0 && len(l.texts[phase]) < 6 {
			l.texts[phase] = append(l.texts[phase], fmt.Sprintf("%s %v %v", ep, r.ByStatus, r.ErrorTexts))
		}
	}
}

func say(format string, args ...any) { fmt.Printf("deploytest: "+format+"\n", args...) }

// TestDeploy is the rolling deploy: three replicas of the previous release behind a load
// balancer, replaced one at a time by this tree's server under load, then faults. Nothing
// acknowledged may be missing or duplicated; no client may see an error while replicas
// are stopped with SIGTERM.
func TestDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("the rolling deploy runs real server processes for minutes")
	}
	if v := os.Getenv("STRATA_DEPLOY_TEST"); v == "off" || v == "0" {
		t.Skip("STRATA_DEPLOY_TEST=" + v)
	}
	pl := choosePlan()
	began := time.Now()

	// 1. The binaries.
	root := moduleRoot(t)
	prev, notes := previousRelease(t, root)
	for _, n := range notes {
		say("previous release: %s", n)
	}
	say("phase build: previous release %.12s and this tree", prev)
	oldBin := buildAt(t, root, prev)
	newBin := buildCurrent(t, root)
	say("phase build: done in %s", time.Since(began).Round(time.Millisecond))

	// 2. The stores: one fresh, empty database (the old release migrates it), reached
	// through a TCP proxy the test can cut; a Redis prefix of the test's own.
	dsn := testenv.EmptyDatabaseURL(t)
	du, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tsrv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	pgProxy := toxiproxy.NewProxy(tsrv, "postgres", "127.0.0.1:0", du.Host)
	if err := pgProxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pgProxy.Stop)
	proxied := *du
	proxied.Host = pgProxy.Listen
	rdb, prefix := testenv.Redis(t)
	admin := "sk_admin_" + testenv.RandomID(16)
	env := []string{"STRATA_DATABASE_URL=" + proxied.String(), "STRATA_REDIS_URL=" + testenv.RedisURL(),
		"STRATA_REDIS_PREFIX=" + prefix, "STRATA_ADMIN_KEY=" + admin, "STRATA_LOG_LEVEL=warn",
		"STRATA_SHUTDOWN_TIMEOUT=5s", "STRATA_SHUTDOWN_DELAY=1s", "STRATA_STORE_TIMEOUT=2s",
		"STRATA_REQUEST_TIMEOUT=10s", "STRATA_DB_MAX_CONNS=8"}
	logDir := t.TempDir()
	if dir := os.Getenv("STRATA_DEPLOY_TEST_LOGS"); dir != "" {
		logDir = dir
	}

	// 3. Three replicas of the previous release behind the load balancer.
	const n = 3
	lb := newLB(t, n)
	var all []*replica
	var streamKey string // once set, every new replica gets an event stream held open on it
	live := make([]*replica, n)
	startIn := func(i int, release, bin string) *replica {
		r := startReplica(t, fmt.Sprintf("%s-%d", release, i+1), release, bin, env, logDir)
		if streamKey != "" {
			go holdStream(r, streamKey)
		}
		all = append(all, r)
		live[i] = r
		lb.set(i, r.url)
		return r
	}
	for i := 0; i < n; i++ {
		r := startIn(i, "old", oldBin)
		say("phase start: %s ready in %s", r.name, r.ready.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range all {
				t.Logf("%s log (tail):\n%s", r.name, tail(r.logPath))
			}
		}
	})

	// 4. The load: the load generator's mix in consecutive attacks, and the verifier.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wl, err := loadtest.Prepare(ctx, loadtest.Config{URL: lb.URL, AdminKey: admin, Org: "deploy-load", Agents: 4, Memories: 40,
		Concurrency: 8, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("load generator setup: %v", err)
	}
	book := &phaseBook{strict: map[string]bool{}}
	book.enter("warm-up", true)
	loads := &loadBook{requests: map[string]uint64{}, byStatus: map[string]map[string]int{}, texts: map[string][]string{}}
	var stopLoad atomic.Bool
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for !stopLoad.Load() {
			ph := book.get()
			book.chunkAt.Store(&ph)
			p, err := wl.Attack(ctx, ph, pl.rate, pl.chunk)
			if err != nil {
				loads.mu.Lock()
				loads.err = err
				loads.mu.Unlock()
				return
			}
			loads.add(ph, p)
		}
	}()
	vkey := newAgentKey(t, lb.URL, admin)
	ver := newVerifier(lb.URL, vkey, book.get)
	ver.setup(t, pl.clients)
	var clients sync.WaitGroup
	for i := 0; i < pl.clients; i++ {
		clients.Add(1)
		go func() { defer clients.Done(); ver.client(i, pl.pause) }()
	}
	for i := 0; i < 2; i++ {
		clients.Add(1)
		go func() { defer clients.Done(); ver.stateWriter(i, pl.pause) }()
	}
	// An open event stream on every replica: stopping must not wait for it.
	streamKey = vkey
	for _, r := range live {
		go holdStream(r, streamKey)
	}
	time.Sleep(pl.warm) // kept: the load runs against the old release before anything changes

	// 5. The rolling deploy: one replica at a time, SIGTERM the old, start the new in its
	// place (it applies the new migrations on start), wait until it is ready.
	var failures []string
	fail := func(format string, args ...any) {
		failures = append(failures, fmt.Sprintf(format, args...))
		t.Errorf(format, args...)
	}
	roll := func(round, release, bin string) {
		for i := 0; i < n; i++ {
			old := live[i]
			book.enter(fmt.Sprintf("%s %d/%d", round, i+1, n), true)
			if err := old.term(30 * time.Second); err != nil {
				fail("%v", err)
			}
			r := startIn(i, release, bin)
			say("phase %s %d/%d: %s drained in %s (%s); %s ready in %s", round, i+1, n, old.name, old.drain.Round(time.Millisecond),
				old.exit, r.name, r.ready.Round(time.Millisecond))
			time.Sleep(pl.settle) // kept: the load runs on the mixed fleet before the next replica goes
		}
	}
	roll("deploy", "new", newBin)
	for k := 0; k < pl.restartRounds; k++ {
		roll(fmt.Sprintf("restart round %d", k+1), "new", newBin)
	}

	// 6. Faults, each followed by a settle period counted in the same phase.
	book.enter("SIGKILL", false)
	victim := live[1]
	victim.kill()
	r := startIn(1, "new", newBin)
	say("phase SIGKILL: %s killed; %s ready in %s", victim.name, r.name, r.ready.Round(time.Millisecond))
	time.Sleep(pl.settle) // kept: load on the restarted fleet

	book.enter("Redis flushes", false)
	flushes, flushed := 0, 0
	for end := time.Now().Add(pl.settle); time.Now().Before(end); time.Sleep(250 * time.Millisecond) { // kept: the flush interval is the fault
		flushed += flushPrefix(ctx, t, rdb, prefix)
		flushes++
	}
	say("phase Redis flushes: %d flushes of the prefix, %d keys deleted", flushes, flushed)
	time.Sleep(pl.settle) // kept: load after the flushes (state restored from Postgres)

	book.enter("Postgres cut", false)
	pgProxy.Stop()
	say("phase Postgres cut: connections closed and refused for %s", pl.cut)
	time.Sleep(pl.cut) // kept: the length of the cut is the fault
	if err := pgProxy.Start(); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	for time.Since(recovered) < 60*time.Second && !(ready(live[0].url) && ready(live[1].url) && ready(live[2].url)) {
		time.Sleep(50 * time.Millisecond) // kept: waits for real processes to reconnect
	}
	say("phase Postgres cut: every replica ready %s after Postgres returned", time.Since(recovered).Round(time.Millisecond))
	time.Sleep(pl.settle) // kept: load after the cut

	book.enter("wind-down", true)
	time.Sleep(pl.settle) // kept: a last healthy period, every error here is a failure
	stopLoad.Store(true)
	ver.stop.Store(true)
	<-loadDone
	clients.Wait()

	// 7. The check: every acknowledged write exactly once, in Postgres and through the API.
	db := testenv.OwnerConn(t, dsn)
	out, err := ver.check(ctx, db)
	if err != nil {
		t.Fatalf("checking the ledger: %v", err)
	}

	// 8. The report.
	say("REPORT (%s, %s): previous release %.12s → this tree", pl.name, time.Since(began).Round(time.Second), prev)
	kinds := keys(out.Attempted)
	attempted, acked := 0, 0
	for _, k := range kinds {
		attempted += out.Attempted[k]
		acked += out.Acknowledged[k]
		say("  writes %-16s attempted %5d  acknowledged %5d", k, out.Attempted[k], out.Acknowledged[k])
	}
	say("  writes total            attempted %5d  acknowledged %5d  missing %d  duplicated %d  never answered %d  read back through the API %d",
		attempted, acked, len(out.Missing), len(out.Duplicated), out.Unknown, out.APIChecked)
	for _, m := range out.Missing {
		say("  MISSING %s", m)
	}
	for _, m := range out.Duplicated {
		say("  DUPLICATED %s", m)
	}
	for _, c := range ver.conflicts {
		say("  UNEXPECTED %s", c)
	}
	say("  client errors by phase (load mix: final answers, not retried; verifier: answers it retried to success):")
	for _, ph := range book.order {
		kind := "faults allowed"
		if book.strict[ph] {
			kind = "no error allowed"
		}
		say("    %-22s %-16s load mix %5d requests, errors %v; verifier retried %v", ph, kind, loads.requests[ph], loads.byStatus[ph], ver.seen[ph])
		for _, tx := range loads.texts[ph] {
			say("      %s", tx)
		}
	}
	say("  hot session: %d state writes acknowledged by two contending writers, %d refused with 409 (the other was first)",
		len(ver.states[hotSession]), ver.hotConflicts)
	say("  load balancer: %d requests sent again to another replica (%d after a 503), %d refused connections, %d answered 502",
		lb.retried.Load(), lb.retried5.Load(), lb.refused.Load(), lb.broken502.Load())
	for _, r := range all {
		drain := "-"
		if r.drain > 0 {
			drain = r.drain.Round(time.Millisecond).String()
		}
		say("  replica %-6s %s release: ready in %-8s drained in %-8s %s", r.name, r.release, r.ready.Round(time.Millisecond), drain, r.exit)
	}

	// 9. The verdict.
	if loads.err != nil {
		fail("load generator: %v", loads.err)
	}
	if len(out.Missing) > 0 || len(out.Duplicated) > 0 {
		fail("%d acknowledged writes missing, %d duplicated", len(out.Missing), len(out.Duplicated))
	}
	if len(ver.conflicts) > 0 {
		fail("%d verifier writes answered unexpectedly (first: %s)", len(ver.conflicts), ver.conflicts[0])
	}
	if len(ver.gaveUp) > 0 {
		fail("%d verifier writes never answered within %s (first: %s)", len(ver.gaveUp), retryFor, ver.gaveUp[0])
	}
	for _, ph := range book.order {
		if book.strict[ph] && (len(loads.byStatus[ph]) > 0 || len(ver.seen[ph]) > 0) {
			fail("phase %q: clients saw errors (load mix %v, verifier %v); none are allowed while replicas stop with SIGTERM",
				ph, loads.byStatus[ph], ver.seen[ph])
		}
	}
	for _, r := range all {
		// The previous release's stop is reported above; this tree's must exit 0 well
		// within STRATA_SHUTDOWN_TIMEOUT (5s) although an event stream was open on it.
		if r.release == "new" && r.drain > 0 && (r.exit != "exit 0" || r.drain > drainBound) {
			fail("%s: %s %s after SIGTERM (bound %s, with an event stream open)", r.name, r.exit, r.drain.Round(time.Millisecond), drainBound)
		}
	}
	if len(failures) == 0 {
		say("RESULT ok: nothing acknowledged missing or duplicated, no client error while replicas stopped with SIGTERM")
	} else {
		say("RESULT FAILED: %d findings", len(failures))
	}
}

// drainBound is how long this tree's server may take from SIGTERM to exit: the drain delay
// (STRATA_SHUTDOWN_DELAY=1s) plus the requests in flight, well under the 5 s timeout.
const drainBound = 4 * time.Second

// holdStream keeps an event stream open on one replica (directly, not through the load
// balancer), reconnecting while the replica lives, as a dashboard would.
func holdStream(r *replica, key string) {
	hc := &http.Client{}
	for r.alive() {
		req, err := http.NewRequest("GET", r.url+"/v1/events/stream", nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond) // kept: reconnect pause of a stream client
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// newAgentKey creates the verifier's agent key in its own org.
func newAgentKey(t *testing.T, base, admin string) string {
	v := newVerifier(base, admin, func() string { return "setup" })
	r := v.call("setup", "POST", "/v1/admin/keys", map[string]any{"org_id": verifyOrg, "role": "agent"}, "Idempotency-Key", "dv-key")
	if r == nil || r.status != 201 {
		t.Fatalf("creating the verifier's key: %+v", r)
	}
	k, _ := r.m()["key"].(string)
	return k
}

// flushPrefix deletes every key of the test's Redis prefix (what a FLUSHDB would do to a
// Redis of the deployment's own) and returns how many there were.
func flushPrefix(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix string) int {
	keys, err := testenv.RedisKeys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.RedisDel(ctx, rdb, keys); err != nil {
		t.Fatal(err)
	}
	return len(keys)
}
