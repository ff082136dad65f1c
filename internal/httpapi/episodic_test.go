package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

type epEvent struct {
	JobID          string          `json:"job_id"`
	Seq            int64           `json:"seq"`
	Op             string          `json:"op"`
	Params         json.RawMessage `json:"params"`
	Result         json.RawMessage `json:"result"`
	Fingerprint    string          `json:"fingerprint"`
	IdempotencyKey string          `json:"idempotency_key"`
	RevertsSeq     int64           `json:"reverts_seq"`
	Replayed       bool            `json:"replayed"`
	AgentID        string          `json:"agent_id"`
}

type epList struct {
	Items      []epEvent `json:"items"`
	NextCursor string    `json:"next_cursor"`
}

type epProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

func epLocations(t *testing.T, r *apptest.Response) []string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), string(r.Body))
	var p epProblem
	r.JSON(t, &p)
	var locs []string
	for _, e := range p.Errors {
		locs = append(locs, e.Location)
	}
	return locs
}

func epCount(t *testing.T, s *apptest.Server, table string) int {
	t.Helper()
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestEventAppendReadApplied(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")

	// One event → the event, 201.
	r := s.Do("POST", "/v1/jobs/job-1/events", key, map[string]any{
		"op": "video.crop", "params": map[string]any{"x": 10, "y": 20, "w": 1280}, "result": map[string]any{"ok": true},
		"agent_id": "editor", "user_id": "u1", "session_id": "s1"})
	require.Equal(t, 201, r.Status, string(r.Body))
	var e1 epEvent
	r.JSON(t, &e1)
	require.Equal(t, int64(1), e1.Seq)
	require.Equal(t, "job-1", e1.JobID)
	require.Len(t, e1.Fingerprint, 64)
	require.Equal(t, "editor", e1.AgentID)

	// An array → {"items": [...]}, in order, one transaction.
	r = s.Do("POST", "/v1/jobs/job-1/events", key, `[{"op":"color.grade","params":{"lut":"warm"}},{"op":"caption","params":{"text":"héllo"}}]`)
	require.Equal(t, 201, r.Status, string(r.Body))
	var l epList
	r.JSON(t, &l)
	require.Len(t, l.Items, 2)
	require.Equal(t, []int64{2, 3}, []int64{l.Items[0].Seq, l.Items[1].Seq})

	// Read back: stable seq order, pagination by cursor and after_seq, op filter.
	r = s.Do("GET", "/v1/jobs/job-1/events?limit=2", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r.JSON(t, &l)
	require.Equal(t, []int64{1, 2}, []int64{l.Items[0].Seq, l.Items[1].Seq})
	require.Equal(t, "2", l.NextCursor)
	r = s.Do("GET", "/v1/jobs/job-1/events?limit=2&cursor="+l.NextCursor, key, nil)
	l = epList{}
	r.JSON(t, &l)
	require.Len(t, l.Items, 1)
	require.Equal(t, int64(3), l.Items[0].Seq)
	require.Empty(t, l.NextCursor)
	r = s.Do("GET", "/v1/jobs/job-1/events?after_seq=1&op=caption", key, nil)
	r.JSON(t, &l)
	require.Len(t, l.Items, 1)
	require.Equal(t, "caption", l.Items[0].Op)
	r = s.Do("GET", "/v1/jobs/job-1/events?since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r.JSON(t, &l)
	require.Empty(t, l.Items)
	r = s.Do("GET", "/v1/jobs/job-1/events?since=2000-01-01T00:00:00Z", key, nil)
	r.JSON(t, &l)
	require.Len(t, l.Items, 3)

	// applied: by op + params in another spelling (key order, 10 vs 10.0, 1280 vs 1.28e3), and by fingerprint.
	q := url.Values{"op": {"video.crop"}, "params": {`{"w":1.28e3,"y":20,"x":10.0}`}}
	r = s.Do("GET", "/v1/jobs/job-1/applied?"+q.Encode(), key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var ap struct {
		Applied     bool     `json:"applied"`
		Fingerprint string   `json:"fingerprint"`
		Event       *epEvent `json:"event"`
	}
	r.JSON(t, &ap)
	require.True(t, ap.Applied)
	require.Equal(t, e1.Fingerprint, ap.Fingerprint)
	require.Equal(t, int64(1), ap.Event.Seq)
	r = s.Do("GET", "/v1/jobs/job-1/applied?fingerprint="+e1.Fingerprint, key, nil)
	r.JSON(t, &ap)
	require.True(t, ap.Applied)
	// Unicode escape vs literal is one edit.
	q = url.Values{"op": {"caption"}, "params": {`{"text":"h\u00e9llo"}`}}
	r = s.Do("GET", "/v1/jobs/job-1/applied?"+q.Encode(), key, nil)
	r.JSON(t, &ap)
	require.True(t, ap.Applied)
	// Another value is not applied; an unknown job has applied nothing.
	q = url.Values{"op": {"video.crop"}, "params": {`{"w":1280,"y":20,"x":11}`}}
	r = s.Do("GET", "/v1/jobs/job-1/applied?"+q.Encode(), key, nil)
	r.JSON(t, &ap)
	require.False(t, ap.Applied)
	require.Nil(t, ap.Event)
	require.Contains(t, string(r.Body), `"event":null`)
	r = s.Do("GET", "/v1/jobs/nope/applied?op=x", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r.JSON(t, &ap)
	require.False(t, ap.Applied)

	// An unknown job's log is 404.
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/nope/events", key, nil).Status)

	// The OpenAPI document describes the endpoints.
	r = s.Do("GET", "/openapi.json", "", nil)
	require.Equal(t, 200, r.Status)
	for _, p := range []string{"/v1/jobs/{job}/events", "/v1/jobs/{job}/applied", "/v1/jobs/{job}/events/{seq}/revert",
		"/v1/assets/{asset}", "/v1/assets/{asset}/versions", `"oneOf"`, "EventInput"} {
		require.Contains(t, string(r.Body), p)
	}
}

func TestEventRevert(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	crop := map[string]any{"op": "crop", "params": map[string]any{"x": 1}}
	r := s.Do("POST", "/v1/jobs/j/events", key, crop)
	require.Equal(t, 201, r.Status, string(r.Body))
	var e epEvent
	r.JSON(t, &e)

	applied := func() bool {
		var ap struct {
			Applied bool `json:"applied"`
		}
		s.Do("GET", "/v1/jobs/j/applied?fingerprint="+e.Fingerprint, key, nil).JSON(t, &ap)
		return ap.Applied
	}
	require.True(t, applied())

	r = s.Do("POST", "/v1/jobs/j/events/1/revert", key, map[string]any{"reason": "wrong crop", "agent_id": "a1"})
	require.Equal(t, 201, r.Status, string(r.Body))
	var rev epEvent
	r.JSON(t, &rev)
	require.Equal(t, int64(2), rev.Seq)
	require.Equal(t, "revert", rev.Op)
	require.Equal(t, int64(1), rev.RevertsSeq)
	require.JSONEq(t, `{"reason":"wrong crop"}`, string(rev.Result))
	require.False(t, applied())

	// Idempotent: the same revert event again, 200, nothing appended. No body is fine.
	r = s.Do("POST", "/v1/jobs/j/events/1/revert", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var again epEvent
	r.JSON(t, &again)
	require.Equal(t, rev.Seq, again.Seq)

	// The original stays in the log.
	var l epList
	s.Do("GET", "/v1/jobs/j/events", key, nil).JSON(t, &l)
	require.Len(t, l.Items, 2)
	require.Equal(t, "crop", l.Items[0].Op)

	// Re-applying the same edit makes it applied again (seq 3).
	r = s.Do("POST", "/v1/jobs/j/events", key, crop)
	require.Equal(t, 201, r.Status)
	require.True(t, applied())

	// Reverting a revert, a missing seq, a missing job; appending "revert" directly.
	r = s.Do("POST", "/v1/jobs/j/events/2/revert", key, nil)
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Equal(t, []string{"path.seq"}, epLocations(t, r))
	require.Equal(t, 404, s.Do("POST", "/v1/jobs/j/events/99/revert", key, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/jobs/nope/events/1/revert", key, nil).Status)
	r = s.Do("POST", "/v1/jobs/j/events", key, map[string]any{"op": "revert", "params": map[string]any{"seq": 3}})
	require.Equal(t, 422, r.Status)
	require.Equal(t, []string{"body.op"}, epLocations(t, r))
}

func TestEventIdempotentReplay(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")

	ev := map[string]any{"op": "render", "params": map[string]any{"frame": 7}, "idempotency_key": "render-7"}
	r := s.Do("POST", "/v1/jobs/j/events", key, ev)
	require.Equal(t, 201, r.Status, string(r.Body))
	var first epEvent
	r.JSON(t, &first)

	// Same per-event key (even with another result, params spelled differently) → the original, 200.
	ev2 := map[string]any{"op": "render", "params": map[string]any{"frame": 7.0}, "result": "x", "idempotency_key": "render-7"}
	r = s.Do("POST", "/v1/jobs/j/events", key, ev2)
	require.Equal(t, 200, r.Status, string(r.Body))
	var replay epEvent
	r.JSON(t, &replay)
	require.Equal(t, first.Seq, replay.Seq)
	require.True(t, replay.Replayed)

	// In a batch: the known key replays, the new ones append, a duplicate inside the batch is one event.
	r = s.Do("POST", "/v1/jobs/j/events", key, []any{ev,
		map[string]any{"op": "render", "params": map[string]any{"frame": 8}, "idempotency_key": "render-8"},
		map[string]any{"op": "render", "params": map[string]any{"frame": 8}, "idempotency_key": "render-8"},
		map[string]any{"op": "note"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	var l epList
	r.JSON(t, &l)
	require.Equal(t, []int64{1, 2, 2, 3}, []int64{l.Items[0].Seq, l.Items[1].Seq, l.Items[2].Seq, l.Items[3].Seq})
	require.Equal(t, []bool{true, false, true, false}, []bool{l.Items[0].Replayed, l.Items[1].Replayed, l.Items[2].Replayed, l.Items[3].Replayed})

	// The same key for another edit is refused, and nothing of the batch is written.
	r = s.Do("POST", "/v1/jobs/j/events", key, []any{map[string]any{"op": "x"},
		map[string]any{"op": "render", "params": map[string]any{"frame": 9}, "idempotency_key": "render-7"}})
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Equal(t, []string{"body[1].idempotency_key"}, epLocations(t, r))
	require.Equal(t, 3, epCount(t, s, "episodic_events"))

	// The Idempotency-Key header replays the whole response.
	body := `[{"op":"a"},{"op":"b"}]`
	r = s.Do("POST", "/v1/jobs/j/events", key, body, "Idempotency-Key", "req-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	r2 := s.Do("POST", "/v1/jobs/j/events", key, body, "Idempotency-Key", "req-1")
	require.Equal(t, 201, r2.Status)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(r.Body), string(r2.Body))
	require.Equal(t, 5, epCount(t, s, "episodic_events"))
}

// 16 writers × 500 events through HTTP, in batches of 1-25: seqs are exactly 1..8000.
func TestEventConcurrentHTTPGapFree(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	const writers, each = 16, 500
	var wg sync.WaitGroup
	errs := make(chan string, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for sent := 0; sent < each; {
				n := min(1+rng.IntN(25), each-sent)
				batch := make([]map[string]any, n)
				for i := range batch {
					batch[i] = map[string]any{"op": "step", "params": map[string]any{"w": w, "i": sent + i}}
				}
				r := s.Do("POST", "/v1/jobs/busy/events", key, batch)
				if r.Status != 201 {
					errs <- fmt.Sprintf("%d %s", r.Status, r.Body)
					return
				}
				var l epList
				if json.Unmarshal(r.Body, &l) != nil || len(l.Items) != n {
					errs <- "bad response " + string(r.Body)
					return
				}
				for i := 1; i < n; i++ {
					if l.Items[i].Seq != l.Items[i-1].Seq+1 {
						errs <- "batch seqs not consecutive"
						return
					}
				}
				sent += n
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		require.Fail(t, e)
	}
	var seqs []int64
	for cursor := ""; ; {
		r := s.Do("GET", "/v1/jobs/busy/events?limit=1000&cursor="+cursor, key, nil)
		require.Equal(t, 200, r.Status)
		var l epList
		r.JSON(t, &l)
		for _, e := range l.Items {
			seqs = append(seqs, e.Seq)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	require.Len(t, seqs, writers*each)
	for i, sq := range seqs {
		require.Equal(t, int64(i+1), sq)
	}
}

func TestEventBadInput(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	cases := []struct {
		name, method, path string
		body               any
		status             int
		loc                string
	}{
		{"missing op", "POST", "/v1/jobs/j/events", `{"params":{}}`, 422, "body.op"},
		{"missing op in array", "POST", "/v1/jobs/j/events", `[{"op":"a"},{"op":"b"},{"op":"c"},{"params":{}}]`, 422, "body[3].op"},
		{"op too long", "POST", "/v1/jobs/j/events", map[string]any{"op": strings.Repeat("x", 201)}, 422, "body.op"},
		{"op not a string", "POST", "/v1/jobs/j/events", `[{"op":5}]`, 422, "body[0].op"},
		{"NUL in op", "POST", "/v1/jobs/j/events", `{"op":"a\u0000b"}`, 422, "body.op"},
		{"NUL in params", "POST", "/v1/jobs/j/events", `[{"op":"a"},{"op":"a","params":{"k":"\u0000"}}]`, 422, "body[1].params"},
		{"params not an object", "POST", "/v1/jobs/j/events", `{"op":"a","params":"{\"x\":1}"}`, 422, "body.params"},
		{"params duplicate keys", "POST", "/v1/jobs/j/events", `{"op":"a","params":{"x":1,"x":2}}`, 422, "body.params"},
		{"lone surrogate in result", "POST", "/v1/jobs/j/events", `{"op":"a","result":"\ud800"}`, 422, "body.result"},
		{"huge number", "POST", "/v1/jobs/j/events", `{"op":"a","params":{"n":1e999999}}`, 422, "body.params"},
		{"bad agent id", "POST", "/v1/jobs/j/events", `[{"op":"a","agent_id":"a b"}]`, 422, "body[0].agent_id"},
		{"bad idempotency key", "POST", "/v1/jobs/j/events", `{"op":"a","idempotency_key":"has space"}`, 422, "body.idempotency_key"},
		{"unknown field", "POST", "/v1/jobs/j/events", `{"op":"a","opp":1}`, 422, "body.opp"},
		{"empty array", "POST", "/v1/jobs/j/events", `[]`, 422, "body"},
		{"not an object", "POST", "/v1/jobs/j/events", `[1]`, 422, "body[0]"},
		{"malformed JSON", "POST", "/v1/jobs/j/events", `{"op":`, 400, "body"},
		{"bad job id", "POST", "/v1/jobs/bad%20id/events", `{"op":"a"}`, 422, "path.job"},
		{"limit too big", "GET", "/v1/jobs/j/events?limit=1001", nil, 422, "query.limit"},
		{"bad cursor", "GET", "/v1/jobs/j/events?cursor=abc", nil, 422, "query.cursor"},
		{"bad since", "GET", "/v1/jobs/j/events?since=yesterday", nil, 422, "query.since"},
		{"applied without op", "GET", "/v1/jobs/j/applied", nil, 422, "query.op"},
		{"applied params not JSON", "GET", "/v1/jobs/j/applied?op=a&params=%7Bnope", nil, 422, "query.params"},
		{"applied bad fingerprint", "GET", "/v1/jobs/j/applied?fingerprint=xyz", nil, 422, "query.fingerprint"},
		{"revert bad seq", "POST", "/v1/jobs/j/events/0/revert", nil, 422, "path.seq"},
	}
	for _, c := range cases {
		r := s.Do(c.method, c.path, key, c.body)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Contains(t, epLocations(t, r), c.loc, "%s: %s", c.name, r.Body)
	}
	// Nothing was written.
	require.Equal(t, 0, epCount(t, s, "episodic_events"))
	require.Equal(t, 0, epCount(t, s, "episodic_jobs"))
}

func TestEventTenantIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	a, b := s.NewKey("org-a", "agent"), s.NewKey("org-b", "agent")
	r := s.Do("POST", "/v1/jobs/shared/events", a, map[string]any{"op": "secret", "params": map[string]any{"k": 1}})
	require.Equal(t, 201, r.Status)
	var e epEvent
	r.JSON(t, &e)
	require.Equal(t, 201, s.Do("PUT", "/v1/assets/clip", a, map[string]any{"uri": "s3://a/clip.mp4"}).Status)

	require.Equal(t, 404, s.Do("GET", "/v1/jobs/shared/events", b, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/jobs/shared/events/1/revert", b, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/assets/clip", b, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/assets/clip/versions", b, nil).Status)
	var ap struct {
		Applied bool `json:"applied"`
	}
	s.Do("GET", "/v1/jobs/shared/applied?fingerprint="+e.Fingerprint, b, nil).JSON(t, &ap)
	require.False(t, ap.Applied)
	// An asset may not point at another org's event.
	r = s.Do("POST", "/v1/assets/x/versions", b, map[string]any{"uri": "s3://b/x", "job_id": "shared", "seq": 1})
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Equal(t, []string{"body.seq"}, epLocations(t, r))

	// Org B's own job with the same id is its own log, starting at 1.
	r = s.Do("POST", "/v1/jobs/shared/events", b, map[string]any{"op": "mine"})
	require.Equal(t, 201, r.Status)
	r.JSON(t, &e)
	require.Equal(t, int64(1), e.Seq)
	var l epList
	s.Do("GET", "/v1/jobs/shared/events", a, nil).JSON(t, &l)
	require.Len(t, l.Items, 1)
	require.Equal(t, "secret", l.Items[0].Op)

	// Row-level security backs it: B's transaction sees none of A's rows.
	own := testenv.OwnerConn(t, s.DBURL)
	tx, err := own.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(context.Background(), "SET LOCAL ROLE strata_app; SELECT set_config('app.org_id', 'org-b', true)")
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), "SELECT count(*) FROM episodic_events WHERE org_id = 'org-a'").Scan(&n))
	require.Equal(t, 0, n)
}
