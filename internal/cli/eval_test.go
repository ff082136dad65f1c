package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestEvalRetrieval: `strata eval retrieval` reads a public layout (LoCoMo, detected), runs it
// against a real server, prints the per-category table beside BM25 as plain lines in a pipe,
// answers JSON with --json, removes what it wrote, and says what to do when it cannot run.
func TestEvalRetrieval(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("evalcli", "agent")
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": key}
	data := "../retrievaleval/testdata/locomo.json"

	code, out, errs := run(t, env, "eval", "retrieval", "--data", data)
	require.Zero(t, code, errs)
	require.Contains(t, out, "(locomo): 1 conversations, 5 turns, 5 questions")
	require.Contains(t, out, "BM25 R@5")
	for _, cat := range []string{"single-hop", "multi-hop", "temporal", "open-domain"} {
		require.Regexp(t, "(?m)^"+cat+" +1 ", out)
	}
	require.Regexp(t, "(?m)^overall +4 ", out, "overall leaves abstention out")
	require.Contains(t, out, "abstention: 1 questions")
	require.Contains(t, out, "CONTEXT BUDGET")
	require.NotContains(t, out+errs, "\r", "plain lines in a pipe")
	require.Contains(t, errs, "conversation 1/1 (conv-1)")
	require.Contains(t, errs, "cleanup: deleted 5 memories")

	code, out, errs = run(t, env, "eval", "retrieval", "--data", data, "--json")
	require.Zero(t, code, errs)
	var rep struct {
		Layout string `json:"layout"`
		Strata []struct {
			Category string  `json:"category"`
			HitAt10  float64 `json:"hit_at_10"`
		} `json:"strata"`
		BM25    []json.RawMessage `json:"bm25"`
		Cleanup string            `json:"cleanup"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "locomo", rep.Layout)
	require.Len(t, rep.Strata, 5)
	require.Len(t, rep.BM25, 5)
	require.Equal(t, "deleted 5 memories", rep.Cleanup)
	require.Empty(t, errs, "JSON output draws no progress")

	// Errors say what to do next.
	code, _, errs = run(t, env, "eval", "retrieval")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "--data is required")
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"foo": 1}]`), 0o600))
	code, _, errs = run(t, env, "eval", "retrieval", "--data", bad)
	require.Equal(t, 1, code)
	require.Contains(t, errs, "docs/evaluation.md")
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL}, "eval", "retrieval", "--data", data)
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no API key")
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL}, "eval", "retrieval", "--data", data, "--key", "sk_wrong")
	require.Equal(t, 1, code)
	require.True(t, strings.Contains(errs, "check STRATA_API_KEY"), errs)
}
