package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/webhooks"
)

// receiver is a real HTTP endpoint that records what Strata POSTs and verifies signatures.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	status func(n int) int // the answer to the n-th request (1-based)
	seen   chan received
}

type received struct {
	id, ts, sig string
	body        []byte
	at          time.Time
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	rc := &receiver{status: status, seen: make(chan received, 100)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g := received{id: r.Header.Get("webhook-id"), ts: r.Header.Get("webhook-timestamp"),
			sig: r.Header.Get("webhook-signature"), body: b, at: time.Now()}
		rc.mu.Lock()
		rc.got = append(rc.got, g)
		n := len(rc.got)
		rc.mu.Unlock()
		code := 200
		if rc.status != nil {
			code = rc.status(n)
		}
		w.WriteHeader(code)
		rc.seen <- g
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) next(t *testing.T) received {
	t.Helper()
	select {
	case g := <-rc.seen:
		return g
	case <-time.After(20 * time.Second):
		t.Fatal("no webhook delivery within 20s")
		panic("unreachable")
	}
}

func eventServer(t *testing.T, extra ...apptest.Option) *apptest.Server {
	opts := append([]apptest.Option{apptest.Env("STRATA_WEBHOOK_ALLOW_PRIVATE", "true"),
		apptest.Env("STRATA_WEBHOOK_BACKOFF", "50ms"), apptest.Env("STRATA_WEBHOOK_TIMEOUT", "2s")}, extra...)
	return apptest.Start(t, opts...)
}

// failStep makes a job with a step that fails for manual review; it returns nothing the
// caller needs but the job id.
func failStep(t *testing.T, s *apptest.Server, key, job string) {
	t.Helper()
	r := s.Do("PUT", "/v1/jobs/"+job, key, map[string]any{"goal": "secret goal text", "user_id": "alice.example"})
	require.Less(t, r.Status, 300, string(r.Body))
	r = s.Do("POST", "/v1/jobs/"+job+"/steps/cut/start", key, map[string]any{"owner": "w1"})
	require.Equal(t, 200, r.Status, string(r.Body))
	tok := r.Map(t)["fencing_token"]
	r = s.Do("POST", "/v1/jobs/"+job+"/steps/cut/fail", key, map[string]any{"fencing_token": tok,
		"error": "alice.example file is corrupt", "disposition": "manual_review"})
	require.Equal(t, 200, r.Status, string(r.Body))
}

func TestWebhookDeliverySignedWithIDsOnly(t *testing.T) {
	t.Parallel()
	s := eventServer(t)
	admin, agent := s.NewKey("wh", "admin"), s.NewKey("wh", "agent")
	rc := newReceiver(t, nil)

	r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL + "/hook", "event_types": []string{"step.failed"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	var sub struct {
		ID, Secret string
		Version    int64
	}
	r.JSON(t, &sub)
	require.True(t, strings.HasPrefix(sub.Secret, "whsec_"))

	failStep(t, s, agent, "wh-job")
	g := rc.next(t)
	ts, err := strconv.ParseInt(g.ts, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), ts, 30)
	require.True(t, webhooks.Verify(sub.Secret, g.id, ts, g.body, g.sig), "signature %s", g.sig)
	require.False(t, webhooks.Verify("whsec_"+strings.Repeat("A", 32), g.id, ts, g.body, g.sig))
	var ev struct {
		ID, Type string
		Seq      int64
		Data     map[string]any
	}
	require.NoError(t, json.Unmarshal(g.body, &ev))
	require.Equal(t, g.id, ev.ID)
	require.Equal(t, "step.failed", ev.Type)
	require.Equal(t, "manual_review", ev.Data["disposition"])
	require.Equal(t, "wh-job", ev.Data["job_id"])
	// Ids only: no memory text, no error text, no raw subject.
	require.NotContains(t, string(g.body), "alice")
	require.NotContains(t, string(g.body), "secret goal")

	// The delivery log says delivered, 200, one attempt.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = s.Do("GET", "/v1/admin/webhooks/"+sub.ID+"/deliveries", admin, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		var page struct{ Items []webhooks.Delivery }
		r.JSON(t, &page)
		require.Len(t, page.Items, 1)
		d := page.Items[0]
		if d.Status == "delivered" {
			require.Equal(t, 200, d.LastStatusCode)
			require.Equal(t, g.id, d.EventID)
			require.Len(t, d.Log, 1)
			break
		}
		require.True(t, time.Now().Before(deadline), "delivery not marked delivered: %+v", d)
		time.Sleep(50 * time.Millisecond) // kept: the attempt's record commits just after the receiver answered
	}

	// The ping endpoint sends a signed webhook.ping.
	r = s.Do("POST", "/v1/admin/webhooks/"+sub.ID+"/ping", admin, nil)
	require.Equal(t, 202, r.Status, string(r.Body))
	g = rc.next(t)
	ts, _ = strconv.ParseInt(g.ts, 10, 64)
	require.True(t, webhooks.Verify(sub.Secret, g.id, ts, g.body, g.sig))
	require.Contains(t, string(g.body), `"type":"webhook.ping"`)

	// Only subscribed types are delivered: a job completion is not.
	r = s.Do("POST", "/v1/jobs/wh-job/complete", agent, map[string]any{"status": "completed"})
	require.Equal(t, 200, r.Status, string(r.Body))
	failStep(t, s, agent, "wh-job-2")
	g = rc.next(t)
	require.Contains(t, string(g.body), `"job_id":"wh-job-2"`)
}

func TestWebhookBackoffDeadLetterAndRedelivery(t *testing.T) {
	t.Parallel()
	s := eventServer(t, apptest.Env("STRATA_WEBHOOK_MAX_ATTEMPTS", "3"))
	admin, agent := s.NewKey("whd", "admin"), s.NewKey("whd", "agent")
	var healthy sync.Mutex
	failing := true
	rc := newReceiver(t, func(int) int {
		healthy.Lock()
		defer healthy.Unlock()
		if failing {
			return 500
		}
		return 204
	})
	r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL, "event_types": []string{"*"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	subID := r.Map(t)["id"].(string)
	failStep(t, s, agent, "dead-job")

	var gs []received
	for range 3 {
		gs = append(gs, rc.next(t))
	}
	for _, g := range gs {
		require.Equal(t, gs[0].id, g.id) // every attempt carries the same idempotency id
	}
	// Exponential backoff: 50ms then 100ms (at least).
	require.GreaterOrEqual(t, gs[1].at.Sub(gs[0].at), 45*time.Millisecond)
	require.GreaterOrEqual(t, gs[2].at.Sub(gs[1].at), 95*time.Millisecond)

	var d webhooks.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = s.Do("GET", "/v1/admin/webhooks/"+subID+"/deliveries?status=dead", admin, nil)
		var page struct{ Items []webhooks.Delivery }
		r.JSON(t, &page)
		if len(page.Items) == 1 {
			d = page.Items[0]
			break
		}
		require.True(t, time.Now().Before(deadline), "no dead delivery: %s", r.Body)
		time.Sleep(50 * time.Millisecond) // kept: the last attempt's record commits after the receiver answered
	}
	require.Equal(t, 3, d.Attempts)
	require.Len(t, d.Log, 3)
	require.Equal(t, 500, d.LastStatusCode)
	select {
	case g := <-rc.seen:
		t.Fatalf("a dead delivery was attempted again: %s", g.body)
	case <-time.After(300 * time.Millisecond):
	}

	// Manual redelivery: same webhook-id, and this time it is delivered.
	healthy.Lock()
	failing = false
	healthy.Unlock()
	r = s.Do("POST", "/v1/admin/webhooks/"+subID+"/deliveries/"+d.ID+"/redeliver", admin, nil)
	require.Equal(t, 202, r.Status, string(r.Body))
	g := rc.next(t)
	require.Equal(t, gs[0].id, g.id)
	require.Equal(t, 404, s.Do("POST", "/v1/admin/webhooks/"+subID+"/deliveries/nope/redeliver", admin, nil).Status)
}

func TestWebhookSSRFRefusedWithoutTheSetting(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("ssrf", "admin")
	rc := newReceiver(t, nil)
	for _, u := range []string{rc.URL, "http://localhost:9/x", "http://10.1.2.3/", "http://169.254.169.254/latest/meta-data",
		"http://[::1]:8080/", "http://0.0.0.0/", "http://192.168.1.1/"} {
		r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": u, "event_types": []string{"*"}})
		requireProblem(t, r, 422, "body.url")
		require.Contains(t, string(r.Body), `"refused: resolves to a private or loopback address"`, u)
	}
	// At dial time too (a name that resolved to a public address at subscribe time and to a
	// private one later is refused by the dialer).
	_, err := webhooks.NewClient(2*time.Second, false).Get(rc.URL)
	require.ErrorIs(t, err, webhooks.ErrBlockedAddress)
	resp, err := webhooks.NewClient(2*time.Second, true).Get(rc.URL)
	require.NoError(t, err)
	resp.Body.Close()
}

func TestWebhookAdminCRUD(t *testing.T) {
	t.Parallel()
	s := eventServer(t)
	admin, agent, other := s.NewKey("crud", "admin"), s.NewKey("crud", "agent"), s.NewKey("crud-b", "admin")
	rc := newReceiver(t, nil)
	base := map[string]any{"url": rc.URL, "event_types": []string{"job.stalled", "job.failed"}}

	// Validation: each field named, nothing written.
	requireProblem(t, s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"event_types": []string{"*"}}), 422, "body.url")
	requireProblem(t, s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL}), 422, "body.event_types")
	requireProblem(t, s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL, "event_types": []string{"job.nope"}}), 422, "body.event_types[0]")
	requireProblem(t, s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": "ftp://x/", "event_types": []string{"*"}}), 422, "body.url")
	requireProblem(t, s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL, "event_types": []string{"*"}, "secret": "short"}), 422, "body.secret")
	r := s.Do("GET", "/v1/admin/webhooks", admin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Map(t)["items"])
	require.Equal(t, 403, s.Do("POST", "/v1/admin/webhooks", agent, base).Status)
	require.Equal(t, 403, s.Do("GET", "/v1/admin/webhooks", agent, nil).Status)

	// A given secret is kept (and shown once); an Idempotency-Key replay answers the same
	// subscription without the secret.
	given := webhooks.NewSecret()
	body := map[string]any{"url": rc.URL, "event_types": []string{"job.stalled"}, "secret": given}
	r = s.Do("POST", "/v1/admin/webhooks", admin, body, "Idempotency-Key", "wh-create-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	created := r.Map(t)
	require.Equal(t, given, created["secret"])
	id := created["id"].(string)
	r2 := s.Do("POST", "/v1/admin/webhooks", admin, body, "Idempotency-Key", "wh-create-1")
	require.Equal(t, id, r2.Map(t)["id"])
	require.NotEqual(t, given, r2.Map(t)["secret"])
	require.Equal(t, 422, s.Do("POST", "/v1/admin/webhooks", admin, base, "Idempotency-Key", "wh-create-1").Status)
	r = s.Do("GET", "/v1/admin/webhooks", admin, nil)
	require.Len(t, r.Map(t)["items"], 1)
	require.NotContains(t, string(r.Body), given)

	// If-Match: stale → 409 and nothing written; current → updated, version + 1.
	requireProblem(t, s.Do("PATCH", "/v1/admin/webhooks/"+id, admin, map[string]any{"active": false}, "If-Match", `"7"`), 409, "")
	r = s.Do("PATCH", "/v1/admin/webhooks/"+id, admin, map[string]any{"active": false, "event_types": []string{"*"}}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	require.Equal(t, false, r.Map(t)["active"])
	requireProblem(t, s.Do("PATCH", "/v1/admin/webhooks/"+id, admin, map[string]any{"url": "http://"}, "If-Match", `"2"`), 422, "body.url")
	requireProblem(t, s.Do("PATCH", "/v1/admin/webhooks/"+id, admin, map[string]any{"secret": given}), 422, "body.secret")
	require.Equal(t, `"2"`, s.Do("GET", "/v1/admin/webhooks/"+id, admin, nil).Header.Get("ETag"))

	// Cross-org: another org's admin sees nothing of it.
	require.Equal(t, 404, s.Do("GET", "/v1/admin/webhooks/"+id, other, nil).Status)
	require.Equal(t, 404, s.Do("PATCH", "/v1/admin/webhooks/"+id, other, map[string]any{"active": true}).Status)
	require.Equal(t, 404, s.Do("DELETE", "/v1/admin/webhooks/"+id, other, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/admin/webhooks/"+id+"/deliveries", other, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/admin/webhooks/"+id+"/ping", other, nil).Status)
	require.Empty(t, s.Do("GET", "/v1/admin/webhooks", other, nil).Map(t)["items"])

	// Delete with a stale version is refused; with the current one it goes.
	requireProblem(t, s.Do("DELETE", "/v1/admin/webhooks/"+id, admin, nil, "If-Match", `"1"`), 409, "")
	require.Equal(t, 200, s.Do("DELETE", "/v1/admin/webhooks/"+id, admin, nil, "If-Match", `"2"`).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/admin/webhooks/"+id, admin, nil).Status)
}

// sseEvent is one event read from /v1/events/stream.
type sseEvent struct {
	id   int64
	typ  string
	data string
}

// readSSE reads n events from the stream (after lastID) and closes it.
func readSSE(t *testing.T, url, key string, lastID int64, query string, n int) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/events/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	var out []sseEvent
	var cur sseEvent
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.typ != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			cur.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	require.Len(t, out, n, "stream ended early: %v", sc.Err())
	return out
}

func TestEventStreamFiltersResumesAndSkipsRolledBackWrites(t *testing.T) {
	t.Parallel()
	s := eventServer(t)
	agent, other := s.NewKey("sse", "agent"), s.NewKey("sse-b", "agent")
	failStep(t, s, agent, "sse-a")
	// A refused write (stale fencing token) emits nothing.
	r := s.Do("POST", "/v1/jobs/sse-a/steps/cut/fail", agent, map[string]any{"fencing_token": 99, "error": "x", "disposition": "retryable"})
	require.Equal(t, 409, r.Status, string(r.Body))
	// A replay of the same fail emits nothing more.
	r = s.Do("POST", "/v1/jobs/sse-a/steps/cut/fail", agent, map[string]any{"fencing_token": 1,
		"error": "alice.example file is corrupt", "disposition": "manual_review"})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/sse-a/complete", agent, map[string]any{"status": "failed"}).Status)
	failStep(t, s, agent, "sse-b")

	all := readSSE(t, s.URL, agent, 0, "", 3)
	require.Equal(t, []string{"step.failed", "job.failed", "step.failed"}, []string{all[0].typ, all[1].typ, all[2].typ})
	require.Less(t, all[0].id, all[1].id)
	require.Less(t, all[1].id, all[2].id)
	// Resume after the first: the next two, no duplicate, no gap.
	rest := readSSE(t, s.URL, agent, all[0].id, "", 2)
	require.Equal(t, all[1:], rest)
	// Filters.
	only := readSSE(t, s.URL, agent, 0, "?job=sse-b", 1)
	require.Equal(t, all[2], only[0])
	only = readSSE(t, s.URL, agent, 0, "?types=job.failed,job.completed", 1)
	require.Equal(t, all[1], only[0])
	// Live: an event committed while the stream is open arrives.
	done := make(chan []sseEvent)
	go func() { done <- readSSE(t, s.URL, agent, all[2].id, "", 1) }()
	time.Sleep(200 * time.Millisecond) // kept: lets the stream reach its wait before the write
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/sse-b/complete", agent, map[string]any{"status": "completed"}).Status)
	live := <-done
	require.Equal(t, "job.completed", live[0].typ)
	require.Greater(t, live[0].id, all[2].id)

	// Another org's stream has none of them; bad filters are 422 naming the parameter.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+other)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotContains(t, string(b), "event:")
	for _, q := range []string{"?types=job.nope", "?job=a%20b", "?after=x", "?job=a%00b"} {
		req, _ := http.NewRequest("GET", s.URL+"/v1/events/stream"+q, nil)
		req.Header.Set("Authorization", "Bearer "+agent)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 422, resp.StatusCode, q)
	}
	req, _ = http.NewRequest("GET", s.URL+"/v1/events/stream", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
}
