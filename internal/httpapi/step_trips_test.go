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
