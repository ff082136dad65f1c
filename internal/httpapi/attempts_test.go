package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestStepAttemptsEndpoint: a step failed, retried and completed lists three attempts over
// GET .../attempts (oldest first, paged by fencing token) with each input, error and outcome;
// resume shows the failing attempts of a failed step; unknown job or step → 404, a bad cursor
// → 422 naming it; another org sees nothing.
func TestStepAttemptsEndpoint(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	ok := func(r *apptest.Response, want int) *apptest.Response {
		t.Helper()
		require.Equal(t, want, r.Status, "%s", r.Body)
		return r
	}
	ok(s.Do("PUT", "/v1/jobs/j", k, map[string]any{"goal": "render"}), 201)
	base := "/v1/jobs/j/steps/render"
	for i, outcome := range []string{"fail", "fail", "complete"} {
		c := ok(s.Do("POST", base+"/start", k, map[string]any{"owner": "w", "input": map[string]any{"tool": "ffmpeg", "params": map[string]any{"try": i + 1}}}), 200).Map(t)
		body := map[string]any{"fencing_token": c["fencing_token"]}
		if outcome == "fail" {
			body["error"], body["disposition"] = "exit "+string(rune('1'+i)), "retryable"
		} else {
			body["result"] = map[string]any{"uri": "s3://out"}
		}
		ok(s.Do("POST", base+"/"+outcome, k, body), 200)
	}
	var page struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"next_cursor"`
	}
	ok(s.Do("GET", base+"/attempts", k, nil), 200).JSON(t, &page)
	require.Len(t, page.Items, 3)
	require.Empty(t, page.NextCursor)
	for i, want := range []struct{ outcome, err string }{{"failed", "exit 1"}, {"failed", "exit 2"}, {"completed", ""}} {
		a := page.Items[i]
		require.EqualValues(t, i+1, a["fencing_token"])
		require.Equal(t, want.outcome, a["outcome"])
		if want.err == "" {
			require.NotContains(t, a, "error")
		} else {
			require.Equal(t, want.err, a["error"])
			require.Equal(t, "retryable", a["disposition"])
		}
		require.EqualValues(t, i+1, a["input"].(map[string]any)["params"].(map[string]any)["try"])
		require.Equal(t, "w", a["owner"])
		require.NotEmpty(t, a["acquired_at"])
		require.NotEmpty(t, a["released_at"])
	}
	// Paging by fencing token.
	ok(s.Do("GET", base+"/attempts?limit=2", k, nil), 200).JSON(t, &page)
	require.Len(t, page.Items, 2)
	require.Equal(t, "2", page.NextCursor)
	ok(s.Do("GET", base+"/attempts?limit=2&cursor="+page.NextCursor, k, nil), 200).JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.EqualValues(t, 3, page.Items[0]["fencing_token"])

	// Resume: a failed step comes with its attempt history.
	c := ok(s.Do("POST", "/v1/jobs/j/steps/grade/start", k, map[string]any{"owner": "w", "input": map[string]any{"params": map[string]any{"lut": "rec709"}}}), 200).Map(t)
	ok(s.Do("POST", "/v1/jobs/j/steps/grade/fail", k, map[string]any{"fencing_token": c["fencing_token"], "error": "LUT missing", "disposition": "manual_review"}), 200)
	var res struct {
		FailedSteps []struct {
			StepID  string           `json:"step_id"`
			History []map[string]any `json:"attempt_history"`
		} `json:"failed_steps"`
	}
	ok(s.Do("GET", "/v1/jobs/j/resume", k, nil), 200).JSON(t, &res)
	require.Len(t, res.FailedSteps, 1)
	require.Len(t, res.FailedSteps[0].History, 1)
	require.Equal(t, "LUT missing", res.FailedSteps[0].History[0]["error"])
	require.Equal(t, "manual_review", res.FailedSteps[0].History[0]["disposition"])

	// Problems.
	requireProblem(t, s.Do("GET", "/v1/jobs/nope/steps/render/attempts", k, nil), 404, "")
	requireProblem(t, s.Do("GET", "/v1/jobs/j/steps/nope/attempts", k, nil), 404, "")
	requireProblem(t, s.Do("GET", base+"/attempts?cursor=abc", k, nil), 422, "query.cursor")
	requireProblem(t, s.Do("GET", base+"/attempts?cursor=-1", k, nil), 422, "query.cursor")
	requireProblem(t, s.Do("GET", base+"/attempts?limit=0", k, nil), 422, "")
	requireProblem(t, s.Do("GET", "/v1/jobs/bad%20id/steps/render/attempts", k, nil), 422, "")
	require.Equal(t, 401, s.Do("GET", base+"/attempts", "", nil).Status)

	// Another org: the job does not exist there.
	other := s.NewKey("globex", "agent")
	requireProblem(t, s.Do("GET", base+"/attempts", other, nil), 404, "")
}
