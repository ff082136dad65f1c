package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// Issue 41.1: every event type the other tests leave out is emitted by its cause, once, with
// its envelope, and nothing else reaches the org's stream. Each test reads the org's whole
// stream (orgStream) and compares the exact list of types, after causing the event a
// second time the way it can happen in production (a replayed request, a second ack, a
// resumed erasure, another watcher pass, the same failed extraction attempt).

// envelope is one event as the stream serves it, with its raw JSON.
type envelope struct {
	Seq       int64          `json:"seq"`
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	OrgID     string         `json:"org_id"`
	JobID     string         `json:"job_id"`
	Data      map[string]any `json:"data"`
	CreatedAt time.Time      `json:"created_at"`
	raw       string
}

// typesServer is a server whose streams send a heartbeat every 100ms, so orgStream knows
// when it has read everything committed.
func typesServer(t *testing.T, extra ...apptest.Option) *apptest.Server {
	return apptest.Start(t, append([]apptest.Option{apptest.Env("STRATA_EVENTS_HEARTBEAT", "100ms")}, extra...)...)
}

// orgStream reads key's org's whole event stream from the start: every event committed
// before the stream opened is written before the stream's first heartbeat, so reading up to
// that heartbeat reads them all.
func orgStream(t *testing.T, s *apptest.Server, key string) []envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []envelope
	var id int64
	var typ string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ": heartbeat":
			return out
		case strings.HasPrefix(line, "id: "):
			id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var e envelope
			e.raw = strings.TrimPrefix(line, "data: ")
			require.NoError(t, json.Unmarshal([]byte(e.raw), &e))
			require.Equal(t, id, e.Seq, "the SSE id is the seq")
			require.Equal(t, typ, e.Type, "the SSE event is the type")
			out = append(out, e)
		}
	}
	t.Fatalf("the stream ended before its first heartbeat: %v", sc.Err())
	return nil
}

// waitStream reads the org's stream until it holds at least n events (a worker's event is
// emitted after the request that caused it has answered).
func waitStream(t *testing.T, s *apptest.Server, key string, n int) []envelope {
	t.Helper()
	var evs []envelope
	require.Eventually(t, func() bool {
		evs = orgStream(t, s, key)
		return len(evs) >= n
	}, 30*time.Second, 50*time.Millisecond, "fewer than %d events: %v", n, &evs)
	return evs
}

func typesOf(evs []envelope) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// requireEnvelope checks what every event has: its type and org, a unique id, a seq and a
// time, and no raw user id anywhere in it.
func requireEnvelope(t *testing.T, e envelope, typ, org string, rawUsers ...string) {
	t.Helper()
	require.Equal(t, typ, e.Type)
	require.Equal(t, org, e.OrgID)
	require.NotEmpty(t, e.ID)
	require.Positive(t, e.Seq)
	require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)
	for _, u := range rawUsers {
		require.NotContains(t, e.raw, u, "an event never carries a raw user id")
	}
}

// TestEventQuarantineCreated: POST /v1/admin/quarantines emits quarantine.created with the
// quarantine's id and what it holds; a replay of the request (same Idempotency-Key) emits
// nothing, a refused one nothing.
func TestEventQuarantineCreated(t *testing.T) {
	t.Parallel()
	s := typesServer(t)
	admin := s.NewKey("ev-quar", "admin")
	body := map[string]any{"agent_id": "rogue-agent", "since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "reason": "poisoned"}
	r := need(t, s.Do("POST", "/v1/admin/quarantines", admin, body, "Idempotency-Key", "q-1"), 201)
	q := r.Map(t)
	r = need(t, s.Do("POST", "/v1/admin/quarantines", admin, body, "Idempotency-Key", "q-1"), 201)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, q["id"], r.Map(t)["id"])
	// Refused (both key_id and agent_id): rolled back, no event.
	requireProblem(t, s.Do("POST", "/v1/admin/quarantines", admin, map[string]any{"agent_id": "a", "key_id": "root",
		"since": body["since"]}), 422, "body")

	evs := orgStream(t, s, admin)
	require.Equal(t, []string{"quarantine.created"}, typesOf(evs))
	e := evs[0]
	requireEnvelope(t, e, "quarantine.created", "ev-quar")
	require.Empty(t, e.JobID)
	require.Equal(t, map[string]any{"quarantine_id": q["id"], "key_id": "", "agent_id": "rogue-agent"}, e.Data)
	require.NotContains(t, e.raw, "poisoned", "no free text")
	// Another org's stream has nothing.
	require.Empty(t, orgStream(t, s, s.NewKey("ev-quar-other", "admin")))
}

// TestEventHandoffAcknowledged: the receiver's ack emits handoff.acknowledged (after the
// creation's handoff.pending); the ack sent again, and replayed with its Idempotency-Key,
// emits nothing more; an ack by the wrong agent is refused and emits nothing.
func TestEventHandoffAcknowledged(t *testing.T) {
	t.Parallel()
	s := typesServer(t)
	key := s.NewKey("ev-hand", "agent")
	need(t, s.Do("PUT", "/v1/jobs/hand-1", key, map[string]any{"goal": "cut the trailer", "user_id": "raw-user-7"}), 200, 201)
	need(t, s.Do("POST", "/v1/jobs/hand-1/handoffs", key, map[string]any{"id": "h1", "from": "planner", "to": "editor",
		"context": map[string]any{"note": "secret context"}}), 201)
	requireProblem(t, s.Do("POST", "/v1/jobs/hand-1/handoffs/h1/ack", key, map[string]any{"agent_id": "intruder"}), 409, "")
	ack := need(t, s.Do("POST", "/v1/jobs/hand-1/handoffs/h1/ack", key, map[string]any{"agent_id": "editor"}, "Idempotency-Key", "ack-1"), 200).Map(t)
	require.Equal(t, "acknowledged", ack["handoff"].(map[string]any)["status"])
	r := need(t, s.Do("POST", "/v1/jobs/hand-1/handoffs/h1/ack", key, map[string]any{"agent_id": "editor"}, "Idempotency-Key", "ack-1"), 200)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	r = need(t, s.Do("POST", "/v1/jobs/hand-1/handoffs/h1/ack", key, map[string]any{"agent_id": "editor"}), 200) // a second ack
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))

	evs := orgStream(t, s, key)
	require.Equal(t, []string{"handoff.pending", "handoff.acknowledged"}, typesOf(evs))
	e := evs[1]
	requireEnvelope(t, e, "handoff.acknowledged", "ev-hand", "raw-user-7")
	require.Equal(t, "hand-1", e.JobID)
	require.Equal(t, map[string]any{"job_id": "hand-1", "handoff_id": "h1", "from": "planner", "to": "editor"}, e.Data)
	require.NotContains(t, e.raw, "secret context")
	require.Less(t, evs[0].Seq, e.Seq)
	require.NotEqual(t, evs[0].ID, e.ID)
}

// TestEventErasureCompleted: a finished erasure emits erasure.completed with its id, the
// subject's pseudonym (never the raw user id) and the verification; a stale retry of its
// job emits nothing, and the erasure resumed after it was complete (a worker that lost its
// lease finishing it again) still one event. (The request's Idempotency-Key is no cause to
// replay here: the erasure deletes the subject's stored responses, its own included, so a
// retry after completion is a new request for a new erasure.)
func TestEventErasureCompleted(t *testing.T) {
	t.Parallel()
	s := typesServer(t, apptest.Env("STRATA_ERASURE_LEASE", "1s"))
	const org, user = "ev-erase", "raw-subject-42"
	agent, comp := s.NewKey(org, "agent"), s.NewKey(org, "compliance")
	need(t, s.Do("POST", "/v1/memories", agent, map[string]any{"text": "likes long takes", "user_id": user}), 201)
	need(t, s.Do("PUT", "/v1/kv/prefs/tone", agent, map[string]any{"value": "dry", "user_id": user}), 200, 201)
	er := need(t, s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": user}), 202).Map(t)
	id := er["id"].(string)
	done := waitErasure(t, s, comp, id)
	subject := done["subject"].(string)
	require.NotEmpty(t, subject)
	require.NotEqual(t, user, subject)

	evs := waitStream(t, s, comp, 1)
	require.Equal(t, []string{"erasure.completed"}, typesOf(evs))
	e := evs[0]
	requireEnvelope(t, e, "erasure.completed", org, user)
	require.Empty(t, e.JobID)
	require.Equal(t, map[string]any{"erasure_id": id, "subject": subject, "verified_clean": true}, e.Data)

	// The erasure's job again (a stale River retry): it is complete, nothing to do.
	ctx := context.Background()
	owner := testenv.OwnerConn(t, s.DBURL)
	_, err := owner.Exec(ctx, `INSERT INTO river_job (kind, args, state, queue, max_attempts, scheduled_at)
		VALUES ('gdpr_erasure', jsonb_build_object('org_id', $1::text, 'erasure_id', $2::text), 'available', 'default', 25, now())`, org, id)
	require.NoError(t, err)
	// Resumed after completing: as if the worker that completed it had lost its lease first,
	// the row is running again with an expired lease and its subject; the sweeper enqueues
	// it, a worker runs its completion again.
	var attempts int
	require.NoError(t, owner.QueryRow(ctx, `UPDATE gdpr_erasures SET status = 'running', user_id = $3, finished_at = NULL,
			lease_owner = 'dead-worker', lease_until = now() - interval '1 minute', enqueued_at = now() - interval '1 hour'
		WHERE org_id = $1 AND id = $2 RETURNING attempts`, org, id, user).Scan(&attempts))
	require.Eventually(t, func() bool {
		var st string
		var n int
		require.NoError(t, owner.QueryRow(ctx, `SELECT status, attempts FROM gdpr_erasures WHERE org_id = $1 AND id = $2`, org, id).Scan(&st, &n))
		return st == "completed" && n > attempts
	}, 30*time.Second, 50*time.Millisecond, "the resumed erasure did not complete again")
	var stale string
	require.Eventually(t, func() bool {
		require.NoError(t, owner.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = 'gdpr_erasure' AND args->>'erasure_id' = $1
			ORDER BY id DESC LIMIT 1`, id).Scan(&stale))
		return stale == "completed"
	}, 30*time.Second, 50*time.Millisecond, "the erasure's jobs did not finish: %s", &stale)
	var completions int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'erasure-completed' AND entity_id = $2`,
		org, id).Scan(&completions))
	require.GreaterOrEqual(t, completions, 2, "the completion ran again")

	evs = orgStream(t, s, comp)
	require.Equal(t, []string{"erasure.completed"}, typesOf(evs), "one event however often the erasure completes")
	require.Equal(t, e.ID, evs[0].ID)
}

// TestEventExtractionFailed: background extraction whose model answers garbage emits
// extraction.failed (malformed), and, when the model answers HTTP 500, another
// (not malformed, the next failure); the same failed attempt failing again — as a second
// replica that read the session's state before the first recorded its failure would —
// emits nothing more. The session's user appears in no event.
func TestEventExtractionFailed(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, func(llmtest.Prompt) string { return "I'd rather not answer in JSON today." })
	s := typesServer(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()),
		apptest.Env("STRATA_EXTRACTION_POLL", "100ms"))
	const org, user = "ev-extract", "raw-user-sam"
	admin, key := s.NewKey(org, "admin"), s.NewKey(org, "agent")
	need(t, s.Do("PUT", "/v1/admin/policies", admin, map[string]any{"extraction": map[string]any{"enabled": true, "debounce": "0s"}}), 200, 201)
	need(t, s.Do("POST", "/v1/sessions/xs-1/messages", key, map[string]any{"role": "user",
		"content": "I cut wedding films for Lumen Studio.", "user_id": user, "agent_id": "editor"}), 201)

	ctx := context.Background()
	owner := testenv.OwnerConn(t, s.DBURL)
	// state waits until the session's extraction state satisfies ok and returns it.
	state := func(ok func(failures int, lastRun time.Time) bool) (int, time.Time) {
		t.Helper()
		var failures int
		var lastRun *time.Time
		require.Eventually(t, func() bool {
			err := owner.QueryRow(ctx, `SELECT failures, last_run_at FROM extraction_state WHERE org_id = $1 AND session_id = 'xs-1'`,
				org).Scan(&failures, &lastRun)
			return err == nil && lastRun != nil && ok(failures, *lastRun)
		}, 30*time.Second, 20*time.Millisecond, "extraction state: failures %d", &failures)
		return failures, *lastRun
	}
	// recorded waits until n failed runs have committed their audit entry, in the
	// transaction of their emission (the state is recorded before, in one of its own).
	recorded := func(n int) {
		t.Helper()
		var got int
		require.Eventually(t, func() bool {
			require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1
				AND action = 'extract-memories-failed' AND entity_id = 'xs-1'`, org).Scan(&got))
			return got >= n
		}, 30*time.Second, 20*time.Millisecond, "failed runs recorded: %d", &got)
		require.Equal(t, n, got)
	}

	// 1. Garbage: the first failure.
	_, first := state(func(f int, _ time.Time) bool { return f == 1 })
	recorded(1)
	evs := waitStream(t, s, key, 1)
	require.Equal(t, []string{"extraction.failed"}, typesOf(evs))
	e := evs[0]
	requireEnvelope(t, e, "extraction.failed", org, user)
	require.Empty(t, e.JobID)
	require.Equal(t, map[string]any{"session_id": "xs-1", "agent_id": "editor", "failures": float64(1), "malformed": true}, e.Data)
	require.NotContains(t, e.raw, "wedding", "no turn content")

	// 2. The same attempt fails again: the state read by the attempt (no failure yet) is
	// back, and the session is due at once.
	_, err := owner.Exec(ctx, `UPDATE extraction_state SET failures = 0, retry_after = NULL WHERE org_id = $1 AND session_id = 'xs-1'`, org)
	require.NoError(t, err)
	_, again := state(func(f int, at time.Time) bool { return f == 1 && at.After(first) })
	recorded(2)
	require.Equal(t, []string{"extraction.failed"}, typesOf(orgStream(t, s, key)), "the same failed attempt emits once")

	// 3. HTTP 500: the next attempt, the second failure, not malformed.
	llm.FailWith(http.StatusInternalServerError)
	_, err = owner.Exec(ctx, `UPDATE extraction_state SET retry_after = NULL WHERE org_id = $1 AND session_id = 'xs-1'`, org)
	require.NoError(t, err)
	state(func(f int, at time.Time) bool { return f == 2 && at.After(again) })
	recorded(3)
	evs = waitStream(t, s, key, 2)
	require.Equal(t, []string{"extraction.failed", "extraction.failed"}, typesOf(evs))
	require.Equal(t, e, evs[0])
	e = evs[1]
	requireEnvelope(t, e, "extraction.failed", org, user)
	require.Equal(t, map[string]any{"session_id": "xs-1", "agent_id": "editor", "failures": float64(2), "malformed": false}, e.Data)
	// No error text: not the model's status (a bare "500"; ids are hex words that may contain
	// those digits, so the match is on a whole word) nor its reason.
	require.NotRegexp(t, `\b500\b|(?i)internal server error`, e.raw, "no error text")
}

// TestEventJobStalledNoProgress: a running job that makes no progress for
// STRATA_STALLED_AFTER (its step's lease still live) emits job.stalled with reason
// no_progress once, however many watcher passes — of this replica and of a second one on
// the same database — see it; progress ends the quiet spell, and the next one is a new
// stall with its own event.
func TestEventJobStalledNoProgress(t *testing.T) {
	t.Parallel()
	opts := []apptest.Option{apptest.Env("STRATA_STALLED_AFTER", "1s"), apptest.Env("STRATA_EVENTS_WATCH_INTERVAL", "50ms")}
	s := typesServer(t, opts...)
	const org = "ev-stall"
	key := s.NewKey(org, "agent")
	need(t, s.Do("PUT", "/v1/jobs/quiet-1", key, map[string]any{"goal": "render", "user_id": "raw-user-9"}), 200, 201)
	started := time.Now() // before the step's start, the job's last progress
	claim := need(t, s.Do("POST", "/v1/jobs/quiet-1/steps/render/start", key, map[string]any{"owner": "worker-3", "lease_seconds": 600}), 200).Map(t)

	evs := waitStream(t, s, key, 1)
	require.GreaterOrEqual(t, time.Since(started), time.Second, "not before STRATA_STALLED_AFTER")
	require.Equal(t, []string{"job.stalled"}, typesOf(evs))
	e := evs[0]
	requireEnvelope(t, e, "job.stalled", org, "raw-user-9")
	require.Equal(t, "quiet-1", e.JobID)
	d := e.Data
	require.Equal(t, "quiet-1", d["job_id"])
	require.Equal(t, "no_progress", d["reason"])
	require.Equal(t, "render", d["step_id"])
	require.Equal(t, "running", d["step_status"])
	require.Equal(t, "worker-3", d["owner"])
	require.Equal(t, claim["fencing_token"], d["fencing_token"])
	require.NotEmpty(t, d["progress_at"])
	require.NotEmpty(t, d["lease_expires_at"])
	stalledFor, err := time.ParseDuration(d["stalled_for"].(string))
	require.NoError(t, err)
	require.GreaterOrEqual(t, stalledFor, time.Second)

	// A second replica's watcher sees the same stall; both keep passing over it.
	s2 := apptest.Start(t, append(opts, apptest.Env("STRATA_DATABASE_URL", s.DBURL), apptest.Env("STRATA_REDIS_PREFIX", s.Prefix),
		apptest.Env("STRATA_ADMIN_KEY", s.AdminKey), apptest.Env("STRATA_EVENTS_HEARTBEAT", "100ms"))...)
	time.Sleep(500 * time.Millisecond) // kept: ten passes of each watcher over the same stall
	require.Equal(t, evs, orgStream(t, s2, key), "one event per stall")

	// Progress (the step completes) ends the quiet spell; the next one is a new stall.
	need(t, s.Do("POST", "/v1/jobs/quiet-1/steps/render/complete", key, map[string]any{"fencing_token": claim["fencing_token"],
		"result": map[string]any{"ok": true}}), 200)
	evs = waitStream(t, s, key, 2)
	require.Equal(t, []string{"job.stalled", "job.stalled"}, typesOf(evs))
	require.Equal(t, e, evs[0])
	require.Equal(t, "no_progress", evs[1].Data["reason"])
	require.Equal(t, "completed", evs[1].Data["step_status"])
	require.NotEqual(t, e.Data["progress_at"], evs[1].Data["progress_at"])
	time.Sleep(300 * time.Millisecond) // kept: more passes over the second stall
	require.Len(t, orgStream(t, s, key), 2)
}
