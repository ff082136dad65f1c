package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

func countRows(t *testing.T, s *apptest.Server, table string) int {
	t.Helper()
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")

	r := s.Do("PUT", "/v1/jobs/video-1", k, map[string]any{"goal": "cut, colour, export", "owner": "editor",
		"user_id": "u1", "metadata": map[string]any{"source": "s3://in.mp4"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	job := r.Map(t)
	require.Equal(t, "running", job["status"])
	require.Equal(t, "editor", job["owner"])

	// Same PUT again: nothing changed, same version. A stale If-Match: 409.
	r = s.Do("PUT", "/v1/jobs/video-1", k, map[string]any{"goal": "cut, colour, export", "user_id": "u1",
		"metadata": map[string]any{"source": "s3://in.mp4"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	requireProblem(t, s.Do("PUT", "/v1/jobs/video-1", k, map[string]any{"goal": "x"}, "If-Match", `"7"`), 409, "")
	requireProblem(t, s.Do("PUT", "/v1/jobs/video-1", k, map[string]any{"goal": "x", "owner": "thief"}), 409, "")
	r = s.Do("PUT", "/v1/jobs/video-1", k, map[string]any{"goal": "cut and export", "user_id": "u1"}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = s.Do("GET", "/v1/jobs/video-1", k, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "cut and export", r.Map(t)["goal"])

	// Steps: start → complete; start again → completed with the result.
	r = s.Do("POST", "/v1/jobs/video-1/steps/cut/start", k, map[string]any{"owner": "editor", "lease_seconds": 30,
		"input": map[string]any{"tool": "ffmpeg", "model": "none", "params": map[string]any{"from": 0, "to": 10}}})
	require.Equal(t, 200, r.Status, string(r.Body))
	claim := r.Map(t)
	require.Equal(t, "claimed", claim["status"])
	require.EqualValues(t, 1, claim["fencing_token"])
	require.EqualValues(t, 1, claim["attempt"])
	require.NotEmpty(t, claim["lease_expires_at"])
	r = s.Do("POST", "/v1/jobs/video-1/steps/cut/complete", k, map[string]any{"fencing_token": 1, "result": map[string]any{"uri": "s3://cut.mp4"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	r = s.Do("POST", "/v1/jobs/video-1/steps/cut/start", k, map[string]any{"owner": "editor"})
	require.Equal(t, 200, r.Status)
	claim = r.Map(t)
	require.Equal(t, "completed", claim["status"])
	require.Equal(t, map[string]any{"uri": "s3://cut.mp4"}, claim["result"])

	// In flight + failed.
	r = s.Do("POST", "/v1/jobs/video-1/steps/colour/start", k, map[string]any{"owner": "editor", "input": map[string]any{"tool": "grade"}})
	require.Equal(t, 200, r.Status)
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/video-1/steps/colour/fail", k, map[string]any{"fencing_token": 1, "error": "LUT missing", "disposition": "manual_review"}).Status)
	requireProblem(t, s.Do("POST", "/v1/jobs/video-1/steps/colour/start", k, map[string]any{"owner": "editor"}), 409, "")
	// Only operators (admin) clear; then it can run again.
	require.Equal(t, 403, s.Do("POST", "/v1/jobs/video-1/steps/colour/clear", k, nil).Status)
	admin := s.NewKey("acme", "admin")
	r = s.Do("POST", "/v1/jobs/video-1/steps/colour/clear", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, "retryable", r.Map(t)["disposition"])
	r = s.Do("POST", "/v1/jobs/video-1/steps/colour/start", k, map[string]any{"owner": "editor", "input": map[string]any{"tool": "grade", "params": map[string]any{"lut": "b"}}})
	require.Equal(t, 200, r.Status)
	require.EqualValues(t, 2, r.Map(t)["fencing_token"])

	// Checkpoints: If-Match on the previous version.
	r = s.Do("PUT", "/v1/jobs/video-1/checkpoint", k, map[string]any{"goal": "cut and export", "current_step": "colour",
		"done": []string{"cut"}, "pending": []string{"colour", "export"}, "next_action": "grade with LUT b",
		"state": map[string]any{"lut": "b"}, "working_state": map[string]any{"draft": 3}}, "If-Match", `"0"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	requireProblem(t, s.Do("PUT", "/v1/jobs/video-1/checkpoint", k, map[string]any{"next_action": "x"}, "If-Match", `"0"`), 409, "")
	r = s.Do("PUT", "/v1/jobs/video-1/checkpoint", k, map[string]any{"next_action": "export", "working_state": map[string]any{"draft": 4}}, "If-Match", `"1"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	r = s.Do("GET", "/v1/jobs/video-1/checkpoints/1", k, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "grade with LUT b", r.Map(t)["next_action"])
	r = s.Do("GET", "/v1/jobs/video-1/checkpoints?limit=1", k, nil)
	require.Equal(t, 200, r.Status)
	var cps struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"next_cursor"`
	}
	r.JSON(t, &cps)
	require.Len(t, cps.Items, 1)
	require.Equal(t, "1", cps.NextCursor)
	r = s.Do("GET", "/v1/jobs/video-1/checkpoints?cursor=1", k, nil)
	cps.NextCursor = ""
	r.JSON(t, &cps)
	require.Len(t, cps.Items, 1)
	require.EqualValues(t, 2, cps.Items[0]["version"])
	require.Empty(t, cps.NextCursor)

	// Resume: everything in one call.
	r = s.Do("GET", "/v1/jobs/video-1/resume", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	var res struct {
		Job            map[string]any   `json:"job"`
		Checkpoint     map[string]any   `json:"checkpoint"`
		NextAction     string           `json:"next_action"`
		WorkingState   map[string]any   `json:"working_state"`
		CompletedSteps []map[string]any `json:"completed_steps"`
		InFlight       []map[string]any `json:"in_flight"`
		FailedSteps    []map[string]any `json:"failed_steps"`
		Handoffs       []map[string]any `json:"pending_handoffs"`
		Events         []map[string]any `json:"events"`
	}
	r.JSON(t, &res)
	require.Equal(t, "export", res.NextAction)
	require.EqualValues(t, 4, res.WorkingState["draft"])
	require.Len(t, res.CompletedSteps, 1)
	require.Equal(t, map[string]any{"uri": "s3://cut.mp4"}, res.CompletedSteps[0]["result"])
	require.Len(t, res.InFlight, 1)
	require.Equal(t, "live", res.InFlight[0]["lease"])
	require.Equal(t, map[string]any{"tool": "grade", "params": map[string]any{"lut": "b"}}, res.InFlight[0]["input"])
	require.Empty(t, res.FailedSteps)
	require.NotNil(t, res.Events)

	// Complete the job: done, outbox row in the same transaction, once.
	r = s.Do("POST", "/v1/jobs/video-1/complete", k, map[string]any{"outcome": map[string]any{"uri": "s3://out.mp4"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, "completed", r.Map(t)["status"])
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/video-1/complete", k, map[string]any{}).Status)
	requireProblem(t, s.Do("POST", "/v1/jobs/video-1/complete", k, map[string]any{"status": "cancelled"}), 409, "")
	var kind, status string
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*), min(kind), min(payload->>'status') FROM job_outbox WHERE org_id = 'acme' AND job_id = 'video-1'`).Scan(&n, &kind, &status))
	require.Equal(t, 1, n)
	require.Equal(t, "consolidate_job", kind)
	require.Equal(t, "completed", status)
	// A finished job takes no more work.
	requireProblem(t, s.Do("POST", "/v1/jobs/video-1/steps/export/start", k, map[string]any{"owner": "editor"}), 409, "")
	requireProblem(t, s.Do("PUT", "/v1/jobs/video-1/checkpoint", k, map[string]any{}), 409, "")

	// Listing by status.
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/video-2", k, map[string]any{"goal": "other"}).Status)
	r = s.Do("GET", "/v1/jobs?status=running", k, nil)
	var list struct {
		Items []map[string]any `json:"items"`
	}
	r.JSON(t, &list)
	require.Len(t, list.Items, 1)
	require.Equal(t, "video-2", list.Items[0]["job_id"])
}

func TestStepStaleTokenAndIdempotencyKeyReplay(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j", k, map[string]any{}).Status)

	start := map[string]any{"owner": "a", "lease_seconds": 60, "input": map[string]any{"tool": "t"}}
	first := s.Do("POST", "/v1/jobs/j/steps/s/start", k, start, "Idempotency-Key", "start-s-1")
	require.Equal(t, 200, first.Status, string(first.Body))
	again := s.Do("POST", "/v1/jobs/j/steps/s/start", k, start, "Idempotency-Key", "start-s-1")
	require.Equal(t, 200, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))

	// Another owner: 409 with holder and until.
	r := s.Do("POST", "/v1/jobs/j/steps/s/start", k, map[string]any{"owner": "b"})
	requireProblem(t, r, 409, "")
	require.Contains(t, string(r.Body), `"holder":"a"`)
	require.Contains(t, string(r.Body), `"until"`)

	// Stale tokens: refused, nothing written.
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 2, "result": 1}), 409, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/heartbeat", k, map[string]any{"fencing_token": 5}), 409, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/fail", k, map[string]any{"fencing_token": 9, "error": "x", "disposition": "retryable"}), 409, "")
	r = s.Do("GET", "/v1/jobs/j/steps/s", k, nil)
	require.Equal(t, "running", r.Map(t)["status"])

	require.Equal(t, 200, s.Do("POST", "/v1/jobs/j/steps/s/heartbeat", k, map[string]any{"fencing_token": 1, "lease_seconds": 120}).Status)
	done := s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 1, "result": "ok"}, "Idempotency-Key", "complete-s-1")
	require.Equal(t, 200, done.Status, string(done.Body))
	replay := s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 1, "result": "ok"}, "Idempotency-Key", "complete-s-1")
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(done.Body), string(replay.Body))
	// Same key, other body → 422.
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 1, "result": "other"}, "Idempotency-Key", "complete-s-1"), 422, "header.Idempotency-Key")
	// Without a key, completing again with the same token answers the stored step.
	r = s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 1, "result": "different"})
	require.Equal(t, 200, r.Status)
	require.Equal(t, "ok", r.Map(t)["result"])
}

func TestCheckpointIfMatchRaceHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j", k, map[string]any{}).Status)
	for v := 0; v < 3; v++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{"next_action": fmt.Sprint(i)}, "If-Match", fmt.Sprintf(`"%d"`, v))
				mu.Lock()
				codes[r.Status]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		require.Equal(t, map[int]int{201: 1, 409: 7}, codes, "version %d", v+1)
	}
	require.Equal(t, 3, countRows(t, s, "job_checkpoints"))
}

// A checkpoint write without If-Match writes only a job's first checkpoint: on a job that has
// one it is refused with 428 (nothing written) and says how to go on; If-Match: * overwrites.
func TestCheckpointWithoutIfMatchNeedsAnExplicitOverwrite(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j", k, map[string]any{}).Status)

	r := s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{"next_action": "first"})
	require.Equal(t, 201, r.Status, "the first checkpoint needs no If-Match: %s", r.Body)
	require.Equal(t, `"1"`, r.Header.Get("ETag"))

	r = s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{"next_action": "blind"})
	requireProblem(t, r, 428, "header.If-Match")
	detail := fmt.Sprint(r.Map(t)["detail"])
	require.Contains(t, detail, `If-Match: "1"`)
	require.Contains(t, detail, "If-Match: *")
	require.Equal(t, 1, countRows(t, s, "job_checkpoints"), "a refused write wrote nothing")

	r = s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{"next_action": "built on 1"}, "If-Match", `"1"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	r = s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{"next_action": "overwrite"}, "If-Match", "*")
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"3"`, r.Header.Get("ETag"))
	requireProblem(t, s.Do("PUT", "/v1/jobs/j/checkpoint", k, map[string]any{}, "If-Match", `"1"`), 409, "")

	// The OpenAPI document says so.
	doc := s.Do("GET", "/openapi.json", "", nil).Map(t)
	put := doc["paths"].(map[string]any)["/v1/jobs/{job}/checkpoint"].(map[string]any)["put"].(map[string]any)
	require.Contains(t, put["responses"], "428")
	require.Contains(t, put["description"], "If-Match: *")
}

func TestForkSharesHistoryAndEvents(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	ctx := context.Background()
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/p", k, map[string]any{"goal": "report"}).Status)
	pool, err := pg.NewPool(ctx, s.DBURL, pg.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	ep := episodic.NewStore(episodic.Options{})
	appendEvents := func(job string, ops ...string) {
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			var in []episodic.EventInput
			for _, op := range ops {
				in = append(in, episodic.EventInput{Op: op, Params: json.RawMessage(`{}`)})
			}
			_, err := ep.Append(ctx, tx, "acme", job, in)
			return err
		}))
	}
	appendEvents("p", "outline", "draft")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/p/checkpoint", k, map[string]any{"next_action": "review"}).Status)
	appendEvents("p", "review")
	r := s.Do("PUT", "/v1/jobs/p/checkpoint", k, map[string]any{"next_action": "publish"}, "If-Match", `"1"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	require.EqualValues(t, 3, r.Map(t)["event_seq"])

	r = s.Do("POST", "/v1/jobs/p/checkpoints/1/fork", k, map[string]any{"new_job_id": "p-alt"})
	require.Equal(t, 201, r.Status, string(r.Body))
	var fork struct {
		Job        map[string]any `json:"job"`
		Checkpoint map[string]any `json:"checkpoint"`
	}
	r.JSON(t, &fork)
	require.Equal(t, "p", fork.Job["parent_job_id"])
	require.EqualValues(t, 1, fork.Job["parent_version"])
	require.EqualValues(t, 2, fork.Job["parent_event_seq"])
	require.Equal(t, "review", fork.Checkpoint["next_action"])

	appendEvents("p-alt", "rewrite")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/p-alt/checkpoint", k, map[string]any{"next_action": "alt"}, "If-Match", `"1"`).Status)
	r = s.Do("GET", "/v1/jobs/p-alt/resume", k, nil)
	var res struct {
		NextAction   string           `json:"next_action"`
		Events       []map[string]any `json:"events"`
		LastEventSeq int64            `json:"last_event_seq"`
	}
	r.JSON(t, &res)
	require.Equal(t, "alt", res.NextAction)
	var ops []string
	for _, e := range res.Events {
		ops = append(ops, fmt.Sprint(e["seq"], e["op"]))
	}
	require.Equal(t, []string{"1outline", "2draft", "3rewrite"}, ops, "shares the parent's events up to the checkpoint")
	require.EqualValues(t, 3, res.LastEventSeq)

	// The parent never sees the fork's writes.
	r = s.Do("GET", "/v1/jobs/p/resume", k, nil)
	r.JSON(t, &res)
	require.Equal(t, "publish", res.NextAction)
	ops = nil
	for _, e := range res.Events {
		ops = append(ops, fmt.Sprint(e["seq"], e["op"]))
	}
	require.Equal(t, []string{"1outline", "2draft", "3review"}, ops)
	r = s.Do("GET", "/v1/jobs/p/checkpoints/2", k, nil)
	require.Equal(t, "publish", r.Map(t)["next_action"])
	r = s.Do("GET", "/v1/jobs/p-alt/checkpoints/2", k, nil)
	require.Equal(t, "alt", r.Map(t)["next_action"])

	requireProblem(t, s.Do("POST", "/v1/jobs/p/checkpoints/9/fork", k, map[string]any{"new_job_id": "x"}), 404, "path.version")
	requireProblem(t, s.Do("POST", "/v1/jobs/p/checkpoints/1/fork", k, map[string]any{"new_job_id": "p-alt"}), 409, "")
}

func TestHandoffHTTP(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j", k, map[string]any{"owner": "planner"}).Status)
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/j/steps/s/start", k, map[string]any{"owner": "planner"}).Status)

	requireProblem(t, s.Do("POST", "/v1/jobs/j/handoffs", k, map[string]any{"from": "intruder", "to": "x"}), 409, "")
	r := s.Do("POST", "/v1/jobs/j/handoffs", k, map[string]any{"id": "h1", "from": "planner", "to": "writer", "context": map[string]any{"brief": "b"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	r = s.Do("POST", "/v1/jobs/j/handoffs", k, map[string]any{"id": "h1", "from": "planner", "to": "writer"})
	require.Equal(t, 200, r.Status, "a re-send")
	require.EqualValues(t, 2, r.Map(t)["sent_count"])
	requireProblem(t, s.Do("POST", "/v1/jobs/j/handoffs", k, map[string]any{"id": "h2", "from": "planner", "to": "critic"}), 409, "")

	// Unacknowledged: visible in resume; the job still belongs to planner.
	r = s.Do("GET", "/v1/jobs/j/resume", k, nil)
	var res struct {
		Job      map[string]any   `json:"job"`
		Handoffs []map[string]any `json:"pending_handoffs"`
	}
	r.JSON(t, &res)
	require.Len(t, res.Handoffs, 1)
	require.Equal(t, "planner", res.Job["owner"])

	// Racing acks: the receiver's all answer the same outcome; the owner is writer, once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := []string{"writer", "critic"}[i%2]
			r := s.Do("POST", "/v1/jobs/j/handoffs/h1/ack", k, map[string]any{"agent_id": agent})
			mu.Lock()
			codes[fmt.Sprint(agent, r.Status)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"writer200": 5, "critic409": 5}, codes)
	r = s.Do("GET", "/v1/jobs/j", k, nil)
	require.Equal(t, "writer", r.Map(t)["owner"])
	require.Equal(t, `"2"`, r.Header.Get("ETag"), "ownership moved exactly once")
	// The old owner is fenced; the new one holds the step under a new token.
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/complete", k, map[string]any{"fencing_token": 1}), 409, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/j/steps/s/start", k, map[string]any{"owner": "planner"}), 409, "")
	r = s.Do("POST", "/v1/jobs/j/steps/s/start", k, map[string]any{"owner": "writer"})
	require.Equal(t, 200, r.Status)
	require.EqualValues(t, 2, r.Map(t)["fencing_token"])

	r = s.Do("GET", "/v1/jobs/j/handoffs?status=acknowledged", k, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), `"h1"`)
	requireProblem(t, s.Do("POST", "/v1/jobs/j/handoffs/nope/ack", k, map[string]any{"agent_id": "writer"}), 404, "")
}

func TestJobTenantIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	a := s.NewKey("org-a", "agent")
	b := s.NewKey("org-b", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/secret", a, map[string]any{"goal": "classified"}).Status)
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/secret/checkpoint", a, map[string]any{"next_action": "x"}).Status)
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/secret/steps/s/start", a, map[string]any{"owner": "x"}).Status)

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/jobs/secret"}, {"GET", "/v1/jobs/secret/resume"}, {"GET", "/v1/jobs/secret/checkpoints"},
		{"GET", "/v1/jobs/secret/checkpoints/1"}, {"GET", "/v1/jobs/secret/steps"}, {"GET", "/v1/jobs/secret/steps/s"},
		{"GET", "/v1/jobs/secret/handoffs"},
	} {
		requireProblem(t, s.Do(c.method, c.path, b, nil), 404, "")
	}
	requireProblem(t, s.Do("POST", "/v1/jobs/secret/steps/s/start", b, map[string]any{"owner": "x"}), 404, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/secret/steps/s/complete", b, map[string]any{"fencing_token": 1}), 404, "")
	requireProblem(t, s.Do("PUT", "/v1/jobs/secret/checkpoint", b, map[string]any{}), 404, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/secret/checkpoints/1/fork", b, map[string]any{"new_job_id": "mine"}), 404, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/secret/handoffs", b, map[string]any{"from": "x", "to": "y"}), 404, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/secret/complete", b, map[string]any{}), 404, "")
	r := s.Do("GET", "/v1/jobs", b, nil)
	require.Equal(t, 200, r.Status)
	require.JSONEq(t, `{"items":[]}`, string(r.Body))
	// org-b may use the same job id for its own job.
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/secret", b, map[string]any{"goal": "mine"}).Status)
	r = s.Do("GET", "/v1/jobs/secret", a, nil)
	require.Equal(t, "classified", r.Map(t)["goal"])
}

func TestJobBadInput(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j", k, map[string]any{}).Status)
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/j/steps/s/start", k, map[string]any{"owner": "a"}).Status)
	tables := []string{"jobs", "job_steps", "job_checkpoints", "job_handoffs", "job_outbox"}
	before := map[string]int{}
	for _, tb := range tables {
		before[tb] = countRows(t, s, tb)
	}
	long := strings.Repeat("x", 201)
	cases := []struct {
		method, path string
		body         any
		status       int
		field        string
		hdr          []string
	}{
		{"PUT", "/v1/jobs/bad%20id", map[string]any{}, 422, "path.job", nil},
		{"PUT", "/v1/jobs/" + long, map[string]any{}, 422, "path.job", nil},
		{"PUT", "/v1/jobs/j2", map[string]any{"status": "paused"}, 422, "body.status", nil},
		{"PUT", "/v1/jobs/j2", map[string]any{"goal": "a\u0000b"}, 422, "body.goal", nil},
		{"PUT", "/v1/jobs/j2", map[string]any{"metadata": []int{1}}, 422, "body.metadata", nil},
		{"PUT", "/v1/jobs/j2", map[string]any{"owner": "has space"}, 422, "body.owner", nil},
		{"PUT", "/v1/jobs/j2", map[string]any{}, 400, "header.If-Match", []string{"If-Match", "abc"}},
		{"POST", "/v1/jobs/j/steps/bad$id/start", map[string]any{"owner": "a"}, 422, "path.step", nil},
		{"POST", "/v1/jobs/j/steps/t/start", map[string]any{"owner": "a", "lease_seconds": 0}, 422, "body.lease_seconds", nil},
		{"POST", "/v1/jobs/j/steps/t/start", map[string]any{"owner": "a", "lease_seconds": 86401}, 422, "body.lease_seconds", nil},
		{"POST", "/v1/jobs/j/steps/t/start", map[string]any{"lease_seconds": 10}, 422, "body.owner", nil}, // a missing property is located at itself
		{"POST", "/v1/jobs/j/steps/t/start", map[string]any{"owner": "a", "input": map[string]any{"params": map[string]any{"k": "\u0000"}}}, 422, "body.input.params.k", nil},
		{"POST", "/v1/jobs/j/steps/s/fail", map[string]any{"fencing_token": 1, "error": "e", "disposition": "shrug"}, 422, "body.disposition", nil},
		{"POST", "/v1/jobs/j/steps/s/complete", map[string]any{"fencing_token": 0}, 422, "body.fencing_token", nil},
		{"POST", "/v1/jobs/j/steps/s/heartbeat", map[string]any{"fencing_token": 1, "lease_seconds": -1}, 422, "body.lease_seconds", nil},
		{"PUT", "/v1/jobs/j/checkpoint", map[string]any{"done": "cut"}, 422, "body.done", nil},
		{"PUT", "/v1/jobs/j/checkpoint", map[string]any{"state": []int{1}}, 422, "body.state", nil},
		{"PUT", "/v1/jobs/j/checkpoint", map[string]any{"next_action": "go\u0000"}, 422, "body.next_action", nil},
		{"GET", "/v1/jobs/j/checkpoints/0", nil, 422, "path.version", nil},
		{"GET", "/v1/jobs/j/checkpoints?cursor=abc", nil, 422, "query.cursor", nil},
		{"POST", "/v1/jobs/j/checkpoints/1/fork", map[string]any{"new_job_id": "no good"}, 422, "body.new_job_id", nil},
		{"POST", "/v1/jobs/j/handoffs", map[string]any{"from": "a", "to": "a"}, 422, "body.to", nil},
		{"POST", "/v1/jobs/j/handoffs", map[string]any{"from": "a", "to": "b", "context": []int{1}}, 422, "body.context", nil},
		{"POST", "/v1/jobs/j/complete", map[string]any{"status": "running"}, 422, "body.status", nil},
		{"GET", "/v1/jobs?status=sleeping", nil, 422, "query.status", nil},
		{"GET", "/v1/jobs/j/resume?events=5000", nil, 422, "query.events", nil},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path+" "+c.field, func(t *testing.T) {
			requireProblem(t, s.Do(c.method, c.path, k, c.body, c.hdr...), c.status, c.field)
		})
	}
	requireProblem(t, s.Do("GET", "/v1/jobs/nope", k, nil), 404, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/nope/steps/s/start", k, map[string]any{"owner": "a"}), 404, "")
	for _, tb := range tables {
		require.Equal(t, before[tb], countRows(t, s, tb), "bad input wrote nothing to %s", tb)
	}
}

func TestStalledJobsListAndMetric(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	for _, j := range []string{"a", "b", "c"} {
		require.Equal(t, 201, s.Do("PUT", "/v1/jobs/"+j, k, map[string]any{}).Status)
		require.Equal(t, 200, s.Do("POST", "/v1/jobs/"+j+"/steps/render/start", k, map[string]any{"owner": "w", "lease_seconds": 600,
			"input": map[string]any{"tool": "render", "params": map[string]any{"job": j}}}).Status)
	}
	r := s.Do("GET", "/v1/jobs?status=running&stalled=true", k, nil)
	require.JSONEq(t, `{"items":[]}`, string(r.Body))

	// Simulate an outage: b's lease ran out an hour ago; c made no progress for a day.
	owner := testenv.OwnerConn(t, s.DBURL)
	_, err := owner.Exec(context.Background(), `UPDATE job_steps SET lease_expires_at = now() - interval '1 hour' WHERE job_id = 'b'`)
	require.NoError(t, err)
	_, err = owner.Exec(context.Background(), `UPDATE job_steps SET status = 'completed', finished_at = now() - interval '1 day' WHERE job_id = 'c'`)
	require.NoError(t, err)
	_, err = owner.Exec(context.Background(), `UPDATE jobs SET progress_at = now() - interval '1 day' WHERE job_id = 'c'`)
	require.NoError(t, err)

	r = s.Do("GET", "/v1/jobs?status=running&stalled=true&limit=1", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var page struct {
		Items []struct {
			JobID   string         `json:"job_id"`
			Stalled map[string]any `json:"stalled"`
		} `json:"items"`
		NextCursor string `json:"next_cursor"`
	}
	r.JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, "b", page.Items[0].JobID)
	require.Equal(t, "lease_expired", page.Items[0].Stalled["reason"])
	require.Equal(t, "render", page.Items[0].Stalled["step_id"])
	require.Equal(t, map[string]any{"tool": "render", "params": map[string]any{"job": "b"}}, page.Items[0].Stalled["input"])
	r = s.Do("GET", "/v1/jobs?status=running&stalled=true&cursor="+page.NextCursor, k, nil)
	r.JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, "c", page.Items[0].JobID)
	require.Equal(t, "no_progress", page.Items[0].Stalled["reason"])

	r = s.Do("GET", "/metrics", "", nil)
	require.Contains(t, string(r.Body), `strata_jobs_stalled{reason="lease_expired"} 1`)
	require.Contains(t, string(r.Body), `strata_jobs_stalled{reason="no_progress"} 1`)
}
