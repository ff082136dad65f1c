package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/loadtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkEmissionCost measures what webhook subscriptions cost the write path, on the
// load-test mix at a fixed rate: one real server process (cmd/server, built for the run, so
// its CPU is its own and not the load generator's), the mix plus handoffs (each emits
// handoff.pending or handoff.acknowledged; 5 % of requests), rounds alternating between no subscription and a
// subscription to `*` delivering to a local receiver (created before, deleted after each
// "with" round), at least 3 rounds each, the order flipped every round. Per side: the server
// process's CPU per request (utime+stime from /proc), the server's Postgres backends' CPU
// per request, and the mix's p99; then the ratios with ÷ without: the median over the pairs
// of adjacent rounds (one with, one without) of each pair's ratio, the verdict, robust to a
// spell of load from elsewhere, and beside it the pooled ratio of the sides' sums. Between rounds, as a
// diagnostic, 150 sequential handoffs on a fresh job (the cheapest write that emits; the
// job's PUT is not timed) on this server alternating with 150 on a second server with
// STRATA_EVENTS=false: the write's extra time (median − median) over no emission at all,
// with a subscription and without.
//
//	go test -run '^$' -bench BenchmarkEmissionCost -benchtime 1x -timeout 20m ./internal/loadtest/
//
// STRATA_BENCH_EMIT_RATE (requests/s, default 200), STRATA_BENCH_EMIT_ROUND (default 20s)
// and STRATA_BENCH_EMIT_ROUNDS (per side, default 3) shorten or lengthen it.
func BenchmarkEmissionCost(b *testing.B) {
	rate := envInt("STRATA_BENCH_EMIT_RATE", 200)
	rounds := max(envInt("STRATA_BENCH_EMIT_ROUNDS", 3), 1)
	round := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("STRATA_BENCH_EMIT_ROUND")); err == nil && d > 0 {
		round = d
	}
	ctx := context.Background()
	bin := buildServerBinary(b)
	on := startServerProcess(b, bin, "STRATA_WEBHOOK_ALLOW_PRIVATE=true")
	off := startServerProcess(b, bin, "STRATA_EVENTS=false")

	var delivered atomic.Int64
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
		w.WriteHeader(204)
	}))
	defer rc.Close()

	const org = "emitbench"
	mix := withWeight(loadtest.DefaultMix, loadtest.EpHandoff, 5)
	wl, err := loadtest.Prepare(ctx, loadtest.Config{URL: on.url, AdminKey: on.admin, Org: org, Mix: mix, Concurrency: 64})
	require.NoError(b, err)
	require.Empty(b, wl.Notes())
	orgAdmin := on.newKey(b, org, "admin")
	// The diagnostic's writes are in the subscribed org: with a subscription, their events
	// are delivered too (they run between the rounds' CPU windows).
	agentOn, agentOff := on.newKey(b, org, "agent"), off.newKey(b, "diag", "agent")
	var handoffs atomic.Int64
	write := func(s *serverProcess, key string) time.Duration {
		id := fmt.Sprint("d", handoffs.Add(1))
		s.must(b, "PUT", "/v1/jobs/"+id, key, map[string]any{"goal": "g"}, 201) // untimed
		t0 := time.Now()
		s.must(b, "POST", "/v1/jobs/"+id+"/handoffs", key, map[string]any{"id": id, "from": "a1", "to": "a2"}, 201)
		return time.Since(t0)
	}
	// cheapest times n handoffs on each server, one after the other, alternating.
	cheapest := func(n int) (onL, offL latencyList) {
		for range n {
			onL, offL = append(onL, write(on, agentOn)), append(offL, write(off, agentOff))
		}
		return onL, offL
	}
	// Warm-up: the mix and both servers' cheapest write.
	_, err = wl.Attack(ctx, "warm-up", rate, min(round/2, 5*time.Second))
	require.NoError(b, err)
	cheapest(50)

	type side struct {
		cpu, pgCPU time.Duration
		requests   uint64
		p99s       []float64
		errors     uint64
		write      latencyList // the cheapest write on this side
		noEmit     latencyList // the same write, alternating with it, on the STRATA_EVENTS=false server
	}
	var with, without side
	// Per round, in order: what the pairs' ratios are made of.
	type roundFig struct {
		subscribed      bool
		cpu, pgCPU, p99 float64 // µs per request, µs per request, ms
	}
	var figs []roundFig
	pgOn := testenv.OwnerConn(b, on.dsn)
	b.ResetTimer()
	for i := range 2 * rounds {
		subscribed := (i%4 == 1) || (i%4 == 2) // without, with, with, without, ...
		sd, name := &without, "without"
		var subID string
		if subscribed {
			sd, name = &with, "with"
			r := on.must(b, "POST", "/v1/admin/webhooks", orgAdmin, map[string]any{"url": rc.URL, "event_types": []string{"*"}}, 201)
			var sub struct{ ID string }
			require.NoError(b, json.Unmarshal(r, &sub))
			subID = sub.ID
		}
		before := delivered.Load()
		cpu0, pg0 := procCPU(b, on.cmd.Process.Pid), pgBackendCPU(b, pgOn)
		ph, err := wl.Attack(ctx, fmt.Sprintf("round %d %s", i, name), rate, round)
		require.NoError(b, err)
		if subscribed { // the round's deliveries are its cost: wait for them (bounded)
			var want int64
			for _, ep := range []string{loadtest.EpHandoff, loadtest.EpHandoffAck} {
				if e := ph.Endpoints[ep]; e != nil {
					want += int64(e.Requests - e.Errors)
				}
			}
			for deadline := time.Now().Add(15 * time.Second); delivered.Load()-before < want && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond) // kept: waits (bounded) for the round's deliveries to the receiver
			}
			b.Logf("round %d: %d of %d events delivered", i, delivered.Load()-before, want)
		}
		cpu, pgc := procCPU(b, on.cmd.Process.Pid)-cpu0, pgBackendCPU(b, pgOn).since(pg0)
		sd.cpu, sd.pgCPU, sd.requests = sd.cpu+cpu, sd.pgCPU+pgc, sd.requests+ph.Requests
		sd.p99s, sd.errors = append(sd.p99s, ph.P99Ms), sd.errors+ph.Errors
		figs = append(figs, roundFig{subscribed: subscribed, cpu: float64(cpu.Microseconds()) / float64(ph.Requests),
			pgCPU: float64(pgc.Microseconds()) / float64(ph.Requests), p99: ph.P99Ms})
		b.Logf("round %d %-7s: %d requests (%.0f/s of %d offered), %d errors, p50 %.1f ms, p99 %.1f ms, server CPU %.0f µs/req, Postgres backends %.0f µs/req",
			i, name, ph.Requests, ph.Throughput, rate, ph.Errors, ph.P50Ms, ph.P99Ms,
			float64(cpu.Microseconds())/float64(ph.Requests), float64(pgc.Microseconds())/float64(ph.Requests))
		for ep, e := range ph.Endpoints {
			if e.Errors > 0 {
				b.Logf("round %d %s: %d errors %v %q", i, ep, e.Errors, e.ByStatus, e.ErrorTexts)
			}
		}
		onL, offL := cheapest(150)
		sd.write, sd.noEmit = append(sd.write, onL...), append(sd.noEmit, offL...)
		if subscribed {
			on.must(b, "DELETE", "/v1/admin/webhooks/"+subID, orgAdmin, nil, 200)
		}
	}
	b.StopTimer()
	require.Zero(b, with.errors+without.errors, "the mix answered errors")
	perReq := func(d time.Duration, n uint64) float64 { return float64(d.Microseconds()) / float64(n) }
	cpuW, cpuWo := perReq(with.cpu, with.requests), perReq(without.cpu, without.requests)
	pgW, pgWo := perReq(with.pgCPU, with.requests), perReq(without.pgCPU, without.requests)
	// The verdict: rounds 2k and 2k+1 are one with and one without, next to each other in
	// time; each pair gives a ratio, and the median of the pairs' ratios is reported, so a
	// spell of load from elsewhere on the machine moves one pair, not the verdict. The
	// pooled ratios (every round of a side summed) are reported beside them.
	var cpuR, cpuPgR, p99R []float64
	for k := 0; k+1 < len(figs); k += 2 {
		w, wo := figs[k], figs[k+1]
		if !w.subscribed {
			w, wo = wo, w
		}
		cpuR, cpuPgR, p99R = append(cpuR, w.cpu/wo.cpu), append(cpuPgR, (w.cpu+w.pgCPU)/(wo.cpu+wo.pgCPU)), append(p99R, w.p99/wo.p99)
	}
	b.Logf("pairs (with ÷ without, adjacent rounds): CPU %.3f, CPU+Postgres %.3f, p99 %.3f", cpuR, cpuPgR, p99R)
	b.ReportMetric(float64(rate), "offered-req/s")
	b.ReportMetric(cpuW, "with-cpu-µs/req")
	b.ReportMetric(cpuWo, "without-cpu-µs/req")
	b.ReportMetric(medianOf(cpuR), "cpu-with/without")
	b.ReportMetric(medianOf(cpuPgR), "cpu+pg-with/without")
	b.ReportMetric(medianOf(p99R), "p99-with/without")
	b.ReportMetric(cpuW/cpuWo, "cpu-with/without-pooled")
	b.ReportMetric((cpuW+pgW)/(cpuWo+pgWo), "cpu+pg-with/without-pooled")
	b.ReportMetric(mean(with.p99s)/mean(without.p99s), "p99-with/without-pooled")
	b.ReportMetric(pgW, "with-pg-cpu-µs/req")
	b.ReportMetric(pgWo, "without-pg-cpu-µs/req")
	b.ReportMetric(medianOf(with.p99s), "with-p99-ms")
	b.ReportMetric(medianOf(without.p99s), "without-p99-ms")
	// Diagnostic: the cheapest emitting write, sequential, between rounds.
	b.ReportMetric(float64(without.noEmit.median().Microseconds()), "write-no-events-p50-µs")
	b.ReportMetric(float64(with.write.median().Microseconds()), "write-with-p50-µs")
	b.ReportMetric(float64(without.write.median().Microseconds()), "write-without-p50-µs")
	b.ReportMetric(float64((without.write.median() - without.noEmit.median()).Microseconds()), "write-extra-without-µs")
	b.ReportMetric(float64((with.write.median() - with.noEmit.median()).Microseconds()), "write-extra-with-µs")
}

// withWeight is a copy of the mix m with endpoint k at weight v.
func withWeight(m map[string]int, k string, v int) map[string]int {
	out := maps.Clone(m)
	out[k] = v
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// medianOf is the median of xs (the mean of the middle two for an even count).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

type latencyList []time.Duration

func (l latencyList) median() time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[len(s)/2]
}

// clockTick is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 everywhere
// Go runs on Linux without a custom kernel).
const clockTick = 10 * time.Millisecond

// procCPU is the process's user + system CPU so far.
func procCPU(b *testing.B, pid int) time.Duration {
	d, err := readProcCPU(pid)
	require.NoError(b, err)
	return d
}

func readProcCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (in parentheses, which may hold spaces): state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// pgCPU is the CPU so far of each Postgres backend connected to one database.
type pgCPU map[int]time.Duration

// since is the CPU the backends used after before (a backend that appeared counts whole;
// one that disconnected in between is lost, which a pool that keeps its connections makes rare).
func (p pgCPU) since(before pgCPU) time.Duration {
	var d time.Duration
	for pid, c := range p {
		d += c - before[pid]
	}
	return d
}

func pgBackendCPU(b *testing.B, conn *pgx.Conn) pgCPU {
	rows, err := conn.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(b, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(b, err)
	out := pgCPU{}
	for _, pid := range pids {
		if d, err := readProcCPU(int(pid)); err == nil { // gone meanwhile: not counted
			out[int(pid)] = d
		}
	}
	return out
}

// ---- the server process ----------------------------------------------------------------

type serverProcess struct {
	cmd        *exec.Cmd
	url, admin string
	dsn        string
	client     *http.Client
}

func buildServerBinary(b *testing.B) string {
	b.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	require.NoError(b, err)
	bin := filepath.Join(b.TempDir(), "strata-server")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/server")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	o, err := cmd.CombinedOutput()
	require.NoError(b, err, "go build: %s", o)
	return bin
}

// startServerProcess runs the server binary on a fresh database and Redis prefix until the
// benchmark ends.
func startServerProcess(b *testing.B, bin string, env ...string) *serverProcess {
	b.Helper()
	dsn := testenv.DatabaseURL(b)
	_, prefix := testenv.Redis(b)
	port := testenv.FreePort(b)
	s := &serverProcess{url: fmt.Sprintf("http://127.0.0.1:%d", port), admin: "sk_admin_" + testenv.RandomID(16), dsn: dsn,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	logPath := filepath.Join(b.TempDir(), "server.log")
	logf, err := os.Create(logPath)
	require.NoError(b, err)
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisURL(),
		"STRATA_REDIS_PREFIX="+prefix, fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port),
		"STRATA_ADMIN_KEY="+s.admin, "STRATA_LOG_LEVEL=warn", "STRATA_DB_MAX_CONNS=16", "STRATA_SHUTDOWN_DELAY=0")
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	require.NoError(b, s.cmd.Start())
	b.Cleanup(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) { // kept: polls a real child server process for /readyz
		resp, err := s.client.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			b.Fatalf("server did not become ready; log:\n%s", testenv.Tail(string(log), 4000))
		}
	}
}

// must sends one request and fails unless the answer has status want; it returns the body.
func (s *serverProcess) must(b *testing.B, method, path, key string, body any, want int) []byte {
	b.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(b, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	require.NoError(b, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
	}
	return out
}

func (s *serverProcess) newKey(b *testing.B, org, role string) string {
	var k struct{ Key string }
	require.NoError(b, json.Unmarshal(s.must(b, "POST", "/v1/admin/keys", s.admin, map[string]any{"org_id": org, "role": role}, 201), &k))
	return k.Key
}
