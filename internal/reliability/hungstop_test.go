package reliability

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A hung Postgres (a black hole: connections accepted, bytes acknowledged and dropped,
// nothing answered) must not keep a replica alive past its drain, must not keep its pool
// exhausted long after Postgres is back, and must not take /metrics down with it. Each test
// runs the real server binary against its own database through a toxiproxy, with a 1 s
// STRATA_STORE_TIMEOUT.

const (
	hungStoreTimeout    = time.Second
	hungShutdownTimeout = 2 * time.Second
)

// blackholeToxic drops every byte while it is in place and, unlike toxiproxy's timeout
// toxic, leaves the connections open when it is removed (the timeout toxic closes them,
// which hides what a real network partition that heals does: a connection, or a cancel
// request, whose bytes were lost waits for an answer that never comes).
type blackholeToxic struct{}

func init() { toxics.Register("blackhole", new(blackholeToxic)) }

func (blackholeToxic) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
		}
	}
}

// hungServer is one server process whose Postgres goes through px.
type hungServer struct {
	p  *proc
	px *toxi
	c  *client
}

func newHungServer(t *testing.T, org string, maxConns int) *hungServer {
	st := newStack(t)
	du, err := url.Parse(st.dsn)
	require.NoError(t, err)
	tsrv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := newToxi(t, tsrv, "postgres", du.Host)
	proxied := *du
	proxied.Host = px.proxy.Listen
	st.dsn = proxied.String()
	p := newProc(t, org, st, "STRATA_STORE_TIMEOUT="+hungStoreTimeout.String(), "STRATA_REQUEST_TIMEOUT=20s",
		fmt.Sprintf("STRATA_DB_MAX_CONNS=%d", maxConns), "STRATA_SHUTDOWN_DELAY=0", "STRATA_LOG_LEVEL=info",
		"STRATA_SHUTDOWN_TIMEOUT="+hungShutdownTimeout.String())
	t.Cleanup(px.clear) // before the process stops (cleanups run in reverse)
	key, _ := newKey(t, p.url, st.admin, org, "agent")
	c := newClient(p.url, key)
	c.hc.Timeout = 8 * time.Second
	return &hungServer{p: p, px: px, c: c}
}

// pgRequests sends n Postgres-backed requests at once and returns their statuses (0: no
// answer).
func (h *hungServer) pgRequests(round, n int) []int {
	out := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r *reply
			var err error
			if i%2 == 0 {
				r, err = h.c.do("PUT", fmt.Sprintf("/v1/kv/hung/k%d-%d", round, i), map[string]any{"value": i})
			} else {
				r, err = h.c.do("POST", "/v1/memories", map[string]any{"text": fmt.Sprintf("hung %d %d", round, i), "user_id": "u1"})
			}
			if err == nil {
				out[i] = r.status
			}
		}()
	}
	wg.Wait()
	return out
}

func allOK(statuses []int) bool {
	for _, s := range statuses {
		if s < 200 || s >= 300 {
			return false
		}
	}
	return true
}

// TestHungPostgresShutdownBounded: Postgres black-holed while the server works, then
// SIGTERM. The process must exit within STRATA_SHUTDOWN_DELAY + STRATA_SHUTDOWN_TIMEOUT
// and a small margin, however long Postgres stays hung.
func TestHungPostgresShutdownBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	t.Parallel()
	h := newHungServer(t, "hungstop", 4)
	require.True(t, allOK(h.pgRequests(0, 4)), "healthy")
	time.Sleep(1500 * time.Millisecond) // kept: the pool's connections go idle past pgx's ping threshold (1 s)

	h.px.add("hole", "timeout", "upstream", `{"timeout":0}`)
	h.pgRequests(1, 6)          // into the hole: connections and workers are now stuck on it
	time.Sleep(2 * time.Second) // kept: background workers poll into the hole in real time

	h.p.mu.Lock()
	cmd := h.p.cmd
	h.p.cmd = nil
	h.p.mu.Unlock()
	require.NotNil(t, cmd)
	exited := make(chan error, 1)
	began := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	go func() { exited <- cmd.Wait() }()
	const bound = hungShutdownTimeout + 3*time.Second // delay 0 + timeout + margin
	select {
	case <-exited:
		took := time.Since(began)
		t.Logf("exited %s after SIGTERM with Postgres hung (bound %s)", took.Round(time.Millisecond), bound)
		if took > bound {
			b, _ := os.ReadFile(h.p.logPath)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "shutdown") || strings.Contains(l, "WARN") || strings.Contains(l, `"level":"WARN"`) {
					t.Log(l)
				}
			}
		}
		require.LessOrEqual(t, took, bound, "shutdown with a hung Postgres took longer than delay + timeout + margin")
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGQUIT) // a goroutine dump in the log
		time.Sleep(time.Second)
		_ = cmd.Process.Kill()
		<-exited
		b, _ := os.ReadFile(h.p.logPath)
		if i := strings.Index(string(b), "goroutine "); i >= 0 {
			b = b[i:min(len(b), i+8000)]
		}
		t.Fatalf("still running 30 s after SIGTERM with Postgres hung (bound %s):\n%s", bound, b)
	}
}

// TestHungPostgresBlipsRecover: a small pool (4 connections), three black-hole blips
// longer than the store timeout (2 s against 1 s, so calls reach their deadline inside
// the hole) under a steady load, then Postgres is healthy again: requests must succeed
// again within about twice the store timeout, not once pgx's 15 s cancel request and
// drain of every connection that met the hole have run (each holds its pool slot).
func TestHungPostgresBlipsRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	t.Parallel()
	h := newHungServer(t, "hungblip", 4)
	require.True(t, allOK(h.pgRequests(0, 4)), "healthy")

	for blip := 1; blip <= 3; blip++ {
		h.px.add("hole", "blackhole", "upstream", `{}`)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); h.pgRequests(blip*100+i, 2) }()
			time.Sleep(250 * time.Millisecond) // kept: a steady load through the blip, in real time
		}
		h.px.clear()
		wg.Wait()
		time.Sleep(300 * time.Millisecond) // kept: healthy between blips
	}

	began := time.Now()
	var recovered time.Duration
	for round := 100; time.Since(began) < 20*time.Second; round++ {
		if allOK(h.pgRequests(round, 4)) {
			recovered = time.Since(began)
			break
		}
		time.Sleep(100 * time.Millisecond) // kept: recovery is measured in real time
	}
	require.NotZero(t, recovered, "not recovered within 20 s of the last blip")
	const bound = 2*hungStoreTimeout + 500*time.Millisecond
	t.Logf("every request succeeded again %s after the last blip (bound %s)", recovered.Round(time.Millisecond), bound)
	require.LessOrEqual(t, recovered, bound, "recovery after the blips took longer than about twice the store timeout")
}

// TestHungPostgresMetricsAnswer: /metrics answers 200 with Postgres hung, within the store
// timeout and a margin; the collectors that read Postgres leave their gauges out and count
// the failure.
func TestHungPostgresMetricsAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection")
	}
	t.Parallel()
	h := newHungServer(t, "hungmetrics", 4)
	r, err := newClient(h.p.url, "").do("GET", "/metrics", nil)
	require.NoError(t, err)
	require.Equal(t, 200, r.status, "healthy")
	require.Contains(t, string(r.body), "strata_jobs_stalled")

	h.px.add("hole", "timeout", "upstream", `{"timeout":0}`)
	for round := 1; round <= 2; round++ {
		began := time.Now()
		r, err := newClient(h.p.url, "").do("GET", "/metrics", nil)
		took := time.Since(began)
		require.NoError(t, err)
		t.Logf("round %d: /metrics answered %d in %s with Postgres hung", round, r.status, took.Round(time.Millisecond))
		require.Equal(t, 200, r.status, "/metrics with Postgres hung: %s", r.body)
		require.LessOrEqual(t, took, hungStoreTimeout+1500*time.Millisecond)
		body := string(r.body)
		require.Contains(t, body, "go_goroutines")
		require.NotContains(t, body, "strata_jobs_stalled{", "a gauge Postgres could not answer is left out, not made up")
		require.Contains(t, body, `strata_collector_errors_total{collector="jobs_stalled"} `+fmt.Sprint(round))
		require.Contains(t, body, `strata_collector_errors_total{collector="gdpr_overdue"} `+fmt.Sprint(round))
	}
}
