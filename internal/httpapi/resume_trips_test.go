package httpapi_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestResumeInOneTrip counts what GET /v1/jobs/{job}/resume sends to Postgres (a pgx tracer
// on the server's pool, apptest.RoundTrips), including what it sends after its response, so
// that the count cannot creep back (issue 42): its one batch — BEGIN, the org, the job, its
// checkpoint, steps, handoffs and attempts, the newest events — ends with COMMIT
// (pg.Session.ReadInOneTrip). Before, the batch was followed by a ROLLBACK in a round trip
// of its own after the response, and the connection stayed out of the pool until then.
// Warm calls are counted (a statement new to a connection is described once, untraced).
func TestResumeInOneTrip(t *testing.T) {
	t.Parallel()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	k := s.NewKey("trips", "agent")
	r := s.Do("PUT", "/v1/jobs/render", k, map[string]any{"goal": "render the cut", "owner": "editor", "user_id": "u1"})
	require.Equal(t, 201, r.Status, string(r.Body))
	for i := range 3 {
		step := fmt.Sprintf("shot-%d", i)
		r = s.Do("POST", "/v1/jobs/render/steps/"+step+"/start", k, map[string]any{"owner": "editor"})
		require.Equal(t, 200, r.Status, string(r.Body))
		require.Equal(t, 200, s.Do("POST", "/v1/jobs/render/steps/"+step+"/complete", k,
			map[string]any{"fencing_token": 1, "result": map[string]any{"frames": i}}).Status)
		require.Equal(t, 201, s.Do("POST", "/v1/jobs/render/events", k, map[string]any{"op": "render.frame",
			"params": map[string]any{"n": i}}).Status)
	}
	r = s.Do("PUT", "/v1/jobs/render/checkpoint", k, map[string]any{"next_action": "grade", "state": map[string]any{"lut": "b"}},
		"If-Match", `"0"`)
	require.Equal(t, 201, r.Status, string(r.Body))

	var best apptest.Trips
	for range 6 {
		id := "resume-" + testenv.RandomID(12)
		r := s.Do("GET", "/v1/jobs/render/resume?events=2", k, nil, "X-Request-Id", id)
		require.Equal(t, 200, r.Status, string(r.Body))
		var res struct {
			NextAction     string           `json:"next_action"`
			CompletedSteps []map[string]any `json:"completed_steps"`
			Events         []map[string]any `json:"events"`
			LastEventSeq   int64            `json:"last_event_seq"`
		}
		r.JSON(t, &res)
		require.Equal(t, "grade", res.NextAction)
		require.Len(t, res.CompletedSteps, 3)
		require.Len(t, res.Events, 2)
		require.EqualValues(t, 3, res.LastEventSeq)
		tr := rt.Ended(t, id)
		if best == nil || len(tr) < len(best) || (len(tr) == len(best) && tr.Statements() < best.Statements()) {
			best = tr
		}
	}
	t.Logf("resume: %d round trips, %d statements\n%s", len(best), best.Statements(), best)
	// Every round trip, the response's and any after it: one, which commits.
	require.Len(t, best, 1, "resume's round trips\n%s", best)
	last := best[0][len(best[0])-1]
	require.Equal(t, "COMMIT", last, "resume's batch ends its transaction\n%s", best)
}
