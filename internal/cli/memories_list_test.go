package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestMemoriesList: `strata memories list` pages through the cursor (page size 2 over 5
// memories), filters, prints plain lines or JSON, and says which flag is wrong.
func TestMemoriesList(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("acme", "agent")
	for i := 0; i < 5; i++ {
		body := map[string]any{"text": fmt.Sprintf("u1 fact number %d", i), "user_id": "u1"}
		if i == 3 {
			body["kind"] = "preference"
		}
		r := s.Do("POST", "/v1/memories", key, body)
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": key}

	code, out, errs := run(t, env, "memories", "list", "--user", "u1", "--page-size", "2")
	require.Equal(t, 0, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 6, out) // header + 5
	require.Contains(t, lines[0], "ID")
	require.Contains(t, lines[1], "u1 fact number 4", "newest first")
	require.Contains(t, lines[5], "u1 fact number 0")
	require.NotContains(t, out, "\r")

	code, out, errs = run(t, env, "memories", "list", "--user", "u1", "--kind", "preference", "--json")
	require.Equal(t, 0, code, errs)
	var ms []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	require.Len(t, ms, 1)
	require.Equal(t, "u1 fact number 3", ms[0]["text"])

	code, out, _ = run(t, env, "memories", "list", "--user", "u1", "--limit", "3", "--page-size", "2", "-o", "json")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	require.Len(t, ms, 3)

	code, _, errs = run(t, env, "memories", "list", "--provenance", "rumour")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "provenance")
}
