package httpapi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestStepWriteTrips counts what each step write (start, heartbeat, complete, fail) sends to
// Postgres (a pgx tracer on the server's pool, apptest.RoundTrips), so that the count cannot
// creep back (issue 42): a step write is 15 % of the load test's mix, and every step write of
// a job queues on the job's row lock for as long as the one ahead holds it.
//
// Before: 5 round trips — the job's lock (with BEGIN), the step's lock, the write, the job's
// progress_at on its own, then the audit record and COMMIT. Now 2: both locks in one pipeline
// (the job's first, as every step write takes them), then the write (the job's progress_at in
// the same statement), the audit record and COMMIT (jobs.StepWrite, pg.Session.CommitInTrip).
// A write that cannot commit in its own round trip — one with an Idempotency-Key, whose record
// needs the response, or a failure, which queues its event for COMMIT — takes 3: the locks,
// the write, then what COMMIT carries (and the Idempotency-Key's claim, which runs on its own
// in front for these operations, one more). Warm calls are counted (a statement new to a
// connection is described once, untraced). The job's progress_at still moves, and each
// write's audit record is there.
func TestStepWriteTrips(t *testing.T) {
	t.Parallel()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	k := s.NewKey("step-trips", "agent")
	r := s.Do("PUT", "/v1/jobs/render", k, map[string]any{"goal": "render the cut", "owner": "editor"})
	require.Equal(t, 201, r.Status, string(r.Body))

	progress := func() string {
		t.Helper()
		r := s.Do("GET", "/v1/jobs/render", k, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		return r.Map(t)["progress_at"].(string)
	}
	// call sends one step write and returns its round trips, after checking the job's
	// progress_at moved with it.
	call := func(path string, body map[string]any, headers ...string) (apptest.Trips, map[string]any) {
		t.Helper()
		before := progress()
		id := testenv.RandomID(12)
		r := s.Do("POST", "/v1/jobs/render/steps/"+path, k, body, append([]string{"X-Request-Id", id}, headers...)...)
		require.Equal(t, 200, r.Status, "%s: %s", path, r.Body)
		tr := rt.Ended(t, id)
		require.NotEqual(t, before, progress(), "%s moves the job's progress_at", path)
		return tr, r.Map(t)
	}
	best := map[string]apptest.Trips{}
	keep := func(op string, tr apptest.Trips) {
		if tr.Fewer(best[op]) {
			best[op] = tr
		}
	}
	for i := range 4 {
		a, b := fmt.Sprintf("cut-%d", i), fmt.Sprintf("grade-%d", i)
		tr, claim := call(a+"/start", map[string]any{"owner": "editor", "input": map[string]any{"tool": "ffmpeg"}})
		keep("start", tr)
		token := claim["fencing_token"]
		tr, _ = call(a+"/start", map[string]any{"owner": "editor"}) // the holder asks again: the same claim
		keep("start again", tr)
		tr, _ = call(a+"/heartbeat", map[string]any{"fencing_token": token})
		keep("heartbeat", tr)
		tr, _ = call(a+"/complete", map[string]any{"fencing_token": token, "result": map[string]any{"frames": i}})
		keep("complete", tr)
		_, claim = call(b+"/start", map[string]any{"owner": "editor"})
		tr, _ = call(b+"/fail", map[string]any{"fencing_token": claim["fencing_token"], "error": "lut missing",
			"disposition": "retryable"})
		keep("fail", tr)
		tr, _ = call(b+"/start", map[string]any{"owner": "editor"}) // a retry: a new claim
		keep("retry", tr)
		tr, claim = call(fmt.Sprintf("mix-%d/start", i), map[string]any{"owner": "editor"}, "Idempotency-Key", testenv.RandomID(16))
		keep("start with an Idempotency-Key", tr)
		tr, _ = call(fmt.Sprintf("mix-%d/complete", i), map[string]any{"fencing_token": claim["fencing_token"]},
			"Idempotency-Key", testenv.RandomID(16))
		keep("complete with an Idempotency-Key", tr)
	}
	for op, trips := range map[string]int{"start": 2, "start again": 2, "heartbeat": 2, "complete": 2, "retry": 2, "fail": 3,
		"start with an Idempotency-Key": 4, "complete with an Idempotency-Key": 4} {
		tr := best[op]
		t.Logf("%s: %d round trips, %d statements\n%s", op, len(tr), tr.Statements(), tr)
		require.Len(t, tr, trips, "%s's round trips\n%s", op, tr)
		if trips == 4 { // the claim first, on its own
			require.True(t, strings.HasPrefix(tr[0][len(tr[0])-1], "INSERT INTO idempotency_keys"), "%s\n%s", op, tr)
			tr, trips = tr[1:], 3
		}
		locks := tr[0]
		require.GreaterOrEqual(t, len(locks), 2, "%s\n%s", op, tr)
		require.True(t, strings.HasSuffix(locks[len(locks)-2], "FROM jobs WHERE org_id = $1 AND job_id = $2 FOR NO KEY UPDATE") &&
			strings.HasSuffix(locks[len(locks)-1], "FROM job_steps WHERE org_id = $1 AND job_id = $2 AND step_id = $3 FOR UPDATE"),
			"%s: the first round trip locks the job, then the step\n%s", op, tr)
		require.True(t, strings.HasPrefix(tr[1][0], "WITH st AS ("), "%s: the write follows the locks\n%s", op, tr)
		require.Contains(t, tr[1][0], "UPDATE jobs SET progress_at", "%s: the write records the job's progress\n%s", op, tr)
		if trips == 3 {
			require.Len(t, tr[1], 1, "%s: the write is one statement\n%s", op, tr)
		}
		last := tr[len(tr)-1]
		require.Equal(t, "COMMIT", last[len(last)-1], "%s\n%s", op, tr)
		require.True(t, slices.ContainsFunc(last, func(s string) bool { return strings.HasPrefix(s, "INSERT INTO audit_log") }),
			"%s: the audit record goes with COMMIT\n%s", op, tr)
	}
	// Every write above has its one audit record, with the status it answered.
	rows, err := testenv.OwnerConn(t, s.DBURL).Query(context.Background(), `SELECT action, count(*) FROM audit_log
		WHERE org_id = 'step-trips' AND action LIKE '%-step' AND status = 200 GROUP BY action`)
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var action string
		var n int
		require.NoError(t, rows.Scan(&action, &n))
		got[action] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"start-step": 20, "heartbeat-step": 4, "complete-step": 8, "fail-step": 4}, got,
		"one audit record per write")
}

// TestStateWriteTrips counts what a working-state write (PUT and PATCH of a session's state,
// 10 % of the load test's mix) sends to Postgres: its Redis half done, its durable copy, its
// audit record (201 for the session's first document, 200 after) and COMMIT go in one round
// trip (working.Persist, pg.Session.CommitInTrip), where they were two (the upsert, then the
// record and COMMIT). And when that round trip fails on the server, nothing commits and the
// Redis copy is dropped: the next read restores the last durable version, not the failed one.
func TestStateWriteTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	k := s.NewKey("state-trips", "agent")
	write := func(method string, body map[string]any) (int, apptest.Trips) {
		t.Helper()
		id := testenv.RandomID(12)
		r := s.Do(method, "/v1/sessions/edit/state", k, body, "X-Request-Id", id)
		require.Less(t, r.Status, 300, "%s: %s", method, r.Body)
		return r.Status, rt.Ended(t, id)
	}
	status, first := write("PUT", map[string]any{"state": map[string]any{"scene": 1}, "user_id": "u1"})
	require.Equal(t, 201, status)
	best := map[string]apptest.Trips{"first PUT": first}
	for i := range 4 {
		status, tr := write("PUT", map[string]any{"state": map[string]any{"scene": i}, "user_id": "u1"})
		require.Equal(t, 200, status)
		if tr.Fewer(best["PUT"]) {
			best["PUT"] = tr
		}
		status, tr = write("PATCH", map[string]any{"state": map[string]any{"take": i}})
		require.Equal(t, 200, status)
		if tr.Fewer(best["PATCH"]) {
			best["PATCH"] = tr
		}
	}
	for _, op := range []string{"PUT", "PATCH"} { // the first PUT is a cold call: not counted
		tr := best[op]
		t.Logf("%s: %d round trips, %d statements\n%s", op, len(tr), tr.Statements(), tr)
		require.Len(t, tr, 1, "%s's round trips\n%s", op, tr)
		stmts := tr[0]
		require.True(t, strings.HasPrefix(stmts[len(stmts)-3], "INSERT INTO working_sessions") &&
			strings.HasPrefix(stmts[len(stmts)-2], "INSERT INTO audit_log") && stmts[len(stmts)-1] == "COMMIT",
			"%s: the durable copy, its audit record and COMMIT\n%s", op, tr)
	}
	owner := testenv.OwnerConn(t, s.DBURL)
	var created, updated int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 201), count(*) FILTER (WHERE status = 200)
		FROM audit_log WHERE org_id = 'state-trips' AND action IN ('put-session-state', 'patch-session-state')`).Scan(&created, &updated))
	require.Equal(t, [2]int{1, 8}, [2]int{created, updated}, "one audit record per write, with the status it answered")

	// The durable copy's upsert fails on the server: the request fails, and the state read
	// next is the last committed one (restored from Postgres), not the version Redis took.
	r := s.Do("GET", "/v1/sessions/edit/state", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	before := r.Map(t)
	_, err := owner.Exec(ctx, `CREATE FUNCTION refuse_state() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'refused by the test'; END$$;
		CREATE TRIGGER refuse_state BEFORE INSERT OR UPDATE ON working_sessions FOR EACH ROW EXECUTE FUNCTION refuse_state()`)
	require.NoError(t, err)
	r = s.Do("PATCH", "/v1/sessions/edit/state", k, map[string]any{"state": map[string]any{"take": 99}})
	require.GreaterOrEqual(t, r.Status, 500, string(r.Body))
	_, err = owner.Exec(ctx, `DROP TRIGGER refuse_state ON working_sessions`)
	require.NoError(t, err)
	r = s.Do("GET", "/v1/sessions/edit/state", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	after := r.Map(t)
	require.Equal(t, before["version"], after["version"], "%s", r.Body)
	require.Equal(t, before["state"], after["state"], "%s", r.Body)
}
