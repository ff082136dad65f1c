package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// strata loadtest as docker-compose's loadtest profile runs it (closed loop, JSON), with a
// threshold it cannot meet, so it prints the report and exits 1 naming the miss.
func TestLoadtestCommand(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.AdminKey}
	code, out, errs := run(t, env, "loadtest", "--rate", "0", "--concurrency", "2", "--duration", "1s", "--agents", "1",
		"--memories", "5", "--output", "json", "--no-progress", "--max-errors", "0", "--max-p99", "1ns")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "thresholds missed: p99")
	require.NotContains(t, errs, "errors >")
	var rep struct {
		Org    string `json:"org"`
		Phases []struct {
			Name      string                     `json:"name"`
			Requests  int                        `json:"requests"`
			Errors    int                        `json:"errors"`
			Endpoints map[string]json.RawMessage `json:"endpoints"`
		} `json:"phases"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Phases, 1)
	require.Equal(t, "closed loop", rep.Phases[0].Name)
	require.Positive(t, rep.Phases[0].Requests)
	require.Zero(t, rep.Phases[0].Errors)
	require.Contains(t, rep.Phases[0].Endpoints, "state.get")

	code, _, errs = run(t, env, "loadtest", "--mix", "state.get=x")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "endpoint=weight")
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL}, "loadtest")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "admin key")
}

// --mix takes the optional endpoints (handoff.create, which emits an event per request)
// beside the default mix's, and names them when refusing an unknown one.
func TestLoadtestMixTakesOptionalEndpoints(t *testing.T) {
	t.Parallel()
	m, err := parseMix("state.get=20,handoff.create=5")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"state.get": 20, "handoff.create": 5}, m)
	_, err = parseMix("nope=1")
	require.ErrorContains(t, err, "handoff.create")
}
