package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/webhooks"
)

// hookReceiver records deliveries by webhook-id; the delivery of blockJob's event is held
// (the first time) until the test has SIGKILLed the server that sent it, and its webhook-id
// and body are kept (held) to compare with the redelivery.
type hookReceiver struct {
	mu       sync.Mutex
	byID     map[string]int    // webhook-id → deliveries
	jobOf    map[string]string // webhook-id → the event's job
	bodyOf   map[string][]byte // webhook-id → the body delivered last
	heldID   string            // the webhook-id of the delivery in flight when the server was killed
	heldBody []byte            // and its body
	badSig   int
	secret   string
	blockJob string
	blocked  chan struct{}
	release  chan struct{}
	once     sync.Once
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	id := r.Header.Get("webhook-id")
	ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	var ev struct {
		Type string
		Data map[string]any
	}
	_ = json.Unmarshal(b, &ev)
	job, _ := ev.Data["job_id"].(string)
	h.mu.Lock()
	secret := h.secret
	h.mu.Unlock()
	if !webhooks.Verify(secret, id, ts, b, r.Header.Get("webhook-signature")) {
		h.mu.Lock()
		h.badSig++
		h.mu.Unlock()
		w.WriteHeader(400)
		return
	}
	if job == h.blockJob {
		first := false
		h.once.Do(func() { first = true })
		if first {
			h.mu.Lock()
			h.heldID, h.heldBody = id, b
			h.mu.Unlock()
			close(h.blocked)
			<-h.release // the server that sent this is killed meanwhile: this answer goes nowhere
			w.WriteHeader(200)
			return
		}
	}
	h.mu.Lock()
	h.byID[id]++
	h.jobOf[id] = job
	h.bodyOf[id] = b
	h.mu.Unlock()
	w.WriteHeader(200)
}

// TestCrashWebhooksAtLeastOnceAndStreamResumes SIGKILLs the server in the middle of a
// delivery, right after acknowledged writes and in the middle of a write: every committed
// event is delivered at least once under one webhook-id (receivers dedupe on it) — the
// delivery in flight at the kill comes again with the webhook-id and body the receiver saw
// — a refused write emits nothing, a write killed before its commit (no response reached
// the client) rolls back and emits nothing, and an SSE reader resuming with Last-Event-ID
// after the restart sees every event once, in order.
func TestCrashWebhooksAtLeastOnceAndStreamResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills a server binary")
	}
	t.Parallel()
	bin := buildServer(t)
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	port := freePort(t)
	admin := "sk_admin_" + testenv.RandomID(16)
	srv := &server{t: t, bin: bin, url: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: filepath.Join(t.TempDir(), "server.log"),
		byReason: map[string]int{},
		env: append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisURL(),
			"STRATA_REDIS_PREFIX="+prefix, fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port),
			"STRATA_ADMIN_KEY="+admin, "STRATA_LOG_LEVEL=warn", "STRATA_SHUTDOWN_TIMEOUT=2s", "STRATA_SHUTDOWN_DELAY=0",
			"STRATA_WEBHOOK_ALLOW_PRIVATE=true", "STRATA_WEBHOOK_BACKOFF=100ms", "STRATA_WEBHOOK_TIMEOUT=1s")}
	srv.start()
	t.Cleanup(srv.stop)
	defer func() {
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(srv.logPath))
		}
	}()
	const n = 12
	rc := &hookReceiver{byID: map[string]int{}, jobOf: map[string]string{}, bodyOf: map[string][]byte{}, blockJob: "ev-3",
		blocked: make(chan struct{}), release: make(chan struct{})}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)

	hc := &http.Client{Timeout: 5 * time.Second}
	adminC := &client{t: t, base: srv.url, key: admin, hc: hc}
	r := adminC.retry("POST", "/v1/admin/keys", map[string]any{"org_id": "ev-org", "role": "admin"})
	require.Equal(t, 201, r.status, string(r.body))
	var key struct {
		Key string `json:"key"`
	}
	r.decode(t, &key)
	c := &client{t: t, base: srv.url, key: key.Key, hc: hc}
	r = c.retry("POST", "/v1/admin/webhooks", map[string]any{"url": hs.URL, "event_types": []string{"step.failed"}},
		"Idempotency-Key", "sub")
	require.Equal(t, 201, r.status, string(r.body))
	var sub struct{ Secret string }
	r.decode(t, &sub)
	rc.mu.Lock()
	rc.secret = sub.Secret
	rc.mu.Unlock()

	failJob := func(job string) {
		r := c.retry("PUT", "/v1/jobs/"+job, map[string]any{"goal": "g"}, "Idempotency-Key", "put-"+job)
		require.Less(t, r.status, 300, string(r.body))
		r = c.retry("POST", "/v1/jobs/"+job+"/steps/s/start", map[string]any{"owner": "w"}, "Idempotency-Key", "start-"+job)
		require.Equal(t, 200, r.status, string(r.body))
		var claim struct {
			FencingToken int64 `json:"fencing_token"`
		}
		r.decode(t, &claim)
		r = c.retry("POST", "/v1/jobs/"+job+"/steps/s/fail", map[string]any{"fencing_token": claim.FencingToken,
			"error": "e", "disposition": "manual_review"}, "Idempotency-Key", "fail-"+job)
		require.Equal(t, 200, r.status, string(r.body))
	}

	// A write refused (stale token): its transaction rolls back, no event.
	failJob("ev-0")
	r = c.retry("POST", "/v1/jobs/ev-0/steps/s/fail", map[string]any{"fencing_token": 41, "error": "e", "disposition": "retryable"})
	require.Equal(t, 409, r.status, string(r.body))

	var sseSeen []sseItem
	for i := 1; i <= n; i++ {
		failJob(fmt.Sprintf("ev-%d", i))
		switch i {
		case 3: // kill while the receiver holds ev-3's delivery
			select {
			case <-rc.blocked:
			case <-time.After(30 * time.Second):
				t.Fatal("ev-3 was not delivered")
			}
			srv.killAndRestart("mid-delivery")
			close(rc.release)
		case 6: // read part of the stream, then kill right after an acknowledged write
			sseSeen = readStream(t, srv.url, key.Key, 0, 4)
			srv.killAndRestart("after-write")
		case 9:
			srv.killAndRestart("after-write")
		case 10: // kill in the middle of a write whose transaction has not committed
			killMidWrite(t, srv, c, dsn, "ev-lost")
		}
	}

	// Every committed event is delivered, at least once, each under one webhook-id.
	want := map[string]bool{"ev-0": true}
	wantJobs := []string{"ev-0"}
	for i := 1; i <= n; i++ {
		want[fmt.Sprintf("ev-%d", i)] = true
		wantJobs = append(wantJobs, fmt.Sprintf("ev-%d", i))
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		rc.mu.Lock()
		got := map[string]string{}
		for id, job := range rc.jobOf {
			got[job] = id
		}
		ids := len(rc.jobOf)
		rc.mu.Unlock()
		if len(got) == len(want) {
			require.Equal(t, len(want), ids, "one webhook-id per event")
			for job := range want {
				require.Contains(t, got, job)
			}
			break
		}
		require.True(t, time.Now().Before(deadline), "delivered %d of %d events: %v", len(got), len(want), got)
		time.Sleep(100 * time.Millisecond) // kept: waits on a real receiver fed by a child server process
	}
	rc.mu.Lock()
	require.Zero(t, rc.badSig)
	// The delivery in flight at the kill came again after the restart under the same
	// webhook-id with the same body: a receiver deduping on the id processes it once.
	require.NotEmpty(t, rc.heldID)
	require.Equal(t, "ev-3", rc.jobOf[rc.heldID], "the redelivery of the held event carries its webhook-id")
	require.GreaterOrEqual(t, rc.byID[rc.heldID], 1, "delivered after the restart (at least once: a later kill may repeat it)")
	require.Equal(t, rc.heldBody, rc.bodyOf[rc.heldID], "and its body")
	for id, job := range rc.jobOf {
		require.NotEqual(t, "ev-lost", job, "no delivery for the rolled-back write (%s)", id)
	}
	rc.mu.Unlock()
	t.Logf("kills %v; deliveries per webhook-id %v", srv.byReason, rc.byID)

	// The stream across the restarts: resuming after what was read gives the rest, no
	// duplicate, no gap against a full read.
	full := readStream(t, srv.url, key.Key, 0, n+1)
	var jobs []string
	for _, it := range full {
		jobs = append(jobs, it.job)
	}
	require.Equal(t, wantJobs, jobs, "the stream holds every acknowledged write's event, in order, and nothing else")
	require.Equal(t, sseSeen, full[:len(sseSeen)])
	rest := readStream(t, srv.url, key.Key, sseSeen[len(sseSeen)-1].id, n+1-len(sseSeen))
	require.Equal(t, full[len(sseSeen):], rest)
	for i := 1; i < len(full); i++ {
		require.Less(t, full[i-1].id, full[i].id)
	}
}

type sseItem struct {
	id  int64
	job string
}

// readStream reads n events of /v1/events/stream after lastID.
func readStream(t *testing.T, base, key string, lastID int64, n int) []sseItem {
	t.Helper()
	for attempt := 0; ; attempt++ {
		out, err := tryStream(base, key, lastID, n)
		if err == nil {
			return out
		}
		require.Less(t, attempt, 100, "stream: %v", err)
		time.Sleep(100 * time.Millisecond) // kept: the server is restarting
	}
}

func tryStream(base, key string, lastID int64, n int) ([]sseItem, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events/stream?types=step.failed", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var out []sseItem
	var cur sseItem
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && cur.id > 0:
			out = append(out, cur)
			cur = sseItem{}
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "data: "):
			var ev struct{ Data map[string]any }
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev)
			cur.job, _ = ev.Data["job_id"].(string)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("stream ended after %d of %d events: %v", len(out), n, sc.Err())
	}
	return out, nil
}

// killMidWrite SIGKILLs the server while a write is inside its transaction, so its response
// never reaches the client: it creates job with a running step, holds the step's row lock
// from an outside connection, sends the step's fail (which waits for that lock), and kills
// the server once Postgres shows the request waiting. With the server gone its transaction
// never commits: released, the waiting statement finds its client closed and rolls back.
// It checks that the client got no answer and the step is still running, and that no event
// exists for the job (the caller also checks deliveries and the stream).
func killMidWrite(t *testing.T, srv *server, c *client, dsn, job string) {
	t.Helper()
	r := c.retry("PUT", "/v1/jobs/"+job, map[string]any{"goal": "g"}, "Idempotency-Key", "put-"+job)
	require.Less(t, r.status, 300, string(r.body))
	r = c.retry("POST", "/v1/jobs/"+job+"/steps/s/start", map[string]any{"owner": "w"}, "Idempotency-Key", "start-"+job)
	require.Equal(t, 200, r.status, string(r.body))
	var claim struct {
		FencingToken int64 `json:"fencing_token"`
	}
	r.decode(t, &claim)

	ctx := context.Background()
	owner, watcher := testenv.OwnerConn(t, dsn), testenv.OwnerConn(t, dsn)
	lock, err := owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	var one int
	require.NoError(t, lock.QueryRow(ctx, `SELECT 1 FROM job_steps WHERE job_id = $1 AND step_id = 's' FOR UPDATE`, job).Scan(&one))

	answered := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"fencing_token": claim.FencingToken, "error": "e", "disposition": "manual_review"})
		req, _ := http.NewRequest("POST", c.base+"/v1/jobs/"+job+"/steps/s/fail", strings.NewReader(string(b)))
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the write was answered %d", resp.StatusCode)
		} else {
			err = nil
		}
		answered <- err
	}()
	var pid int
	require.Eventually(t, func() bool {
		err := watcher.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query ILIKE '%job_steps%' LIMIT 1`).Scan(&pid)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the write never waited for the step's lock")

	srv.killRunRestart("mid-write", func() {
		require.NoError(t, <-answered, "the killed write's response never reaches the client")
		require.NoError(t, lock.Rollback(ctx))
		require.Eventually(t, func() bool { // the orphaned statement ran, found no client and rolled back
			var n int
			require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n))
			return n == 0
		}, 10*time.Second, 5*time.Millisecond, "the killed server's backend is still there")
	})
	var status string
	require.NoError(t, watcher.QueryRow(ctx, `SELECT status FROM job_steps WHERE job_id = $1 AND step_id = 's'`, job).Scan(&status))
	require.Equal(t, "running", status, "the write rolled back")
	var events int
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE job_id = $1`, job).Scan(&events))
	require.Zero(t, events, "no event for a write that rolled back")
}
