package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestOneTripReads counts what the durable-job protocol's one-statement reads send to
// Postgres (a pgx tracer on the server's pool, apptest.RoundTrips), including what they send
// after their response, so that the count cannot creep back (issue 42): their one round trip
// begins, sets the org, runs the read and commits (pg.Session.ReadInOneTrip), and nothing
// follows the response. Before, each read's transaction stayed open after its last statement
// and was rolled back in a round trip of its own after the response, its connection out of
// the pool until then: 2 round trips each. Resume is one batch (the job, checkpoint, steps,
// handoffs, attempts and the newest events). Warm calls are counted (a statement new to a
// connection is described once, untraced).
func TestOneTripReads(t *testing.T) {
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

	for _, c := range []struct {
		name, path string
		trips      int // round trips in all, the response's and any after it
		check      func(t *testing.T, r *apptest.Response)
	}{
		{"resume", "/v1/jobs/render/resume?events=2", 1, func(t *testing.T, r *apptest.Response) {
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
		}},
		{"job", "/v1/jobs/render", 1, func(t *testing.T, r *apptest.Response) {
			require.Equal(t, "render the cut", r.Map(t)["goal"])
		}},
		{"step", "/v1/jobs/render/steps/shot-1", 1, func(t *testing.T, r *apptest.Response) {
			require.Equal(t, "completed", r.Map(t)["status"])
		}},
		{"checkpoint", "/v1/jobs/render/checkpoints/1", 1, func(t *testing.T, r *apptest.Response) {
			require.Equal(t, "grade", r.Map(t)["next_action"])
		}},
		// The fork view and the lookup in one statement (episodic's appliedSQL; two before).
		{"applied", "/v1/jobs/render/applied?op=render.frame&params=" + `%7B%22n%22%3A2%7D`, 1, func(t *testing.T, r *apptest.Response) {
			require.Equal(t, true, r.Map(t)["applied"])
		}},
		{"not-applied", "/v1/jobs/render/applied?op=render.frame&params=" + `%7B%22n%22%3A9%7D`, 1, func(t *testing.T, r *apptest.Response) {
			require.Equal(t, false, r.Map(t)["applied"])
		}},
	} {
		var best apptest.Trips
		for range 4 {
			id := c.name + "-" + testenv.RandomID(12)
			r := s.Do("GET", c.path, k, nil, "X-Request-Id", id)
			require.Equal(t, 200, r.Status, "%s: %s", c.name, r.Body)
			c.check(t, r)
			tr := rt.Ended(t, id)
			if tr.Fewer(best) {
				best = tr
			}
		}
		t.Logf("%s: %d round trips, %d statements\n%s", c.name, len(best), best.Statements(), best)
		require.Len(t, best, c.trips, "%s's round trips\n%s", c.name, best)
		for i, trip := range best {
			require.Equal(t, "COMMIT", trip[len(trip)-1], "%s: round trip %d ends its transaction\n%s", c.name, i+1, best)
			require.True(t, strings.EqualFold(trip[0], "begin"), "%s: round trip %d begins one\n%s", c.name, i+1, best)
		}
	}
}
