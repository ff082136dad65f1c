package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestMemoriesImportResumes imports a JSON Lines file in batches, stops at a bad line,
// resumes after the fix from the last committed batch, and replays (not rewrites) a batch
// whose acknowledgement was lost.
func TestMemoriesImportResumes(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}
	dir := t.TempDir()
	file := filepath.Join(dir, "corpus.jsonl")
	const n = 2300
	lines := make([]string, n)
	for i := range lines {
		m := map[string]any{"text": fmt.Sprintf("record %d: shot q%dz graded with lut v%dk for channel c%dm", i, i, i*7, i*13),
			"user_id": fmt.Sprintf("u%d", i%7), "kind": "fact", "metadata": map[string]any{"line": i + 1}}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		lines[i] = string(b)
	}
	bad := append([]string(nil), lines...)
	bad[1700] = `{"txt": "a misspelt field"}`
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(bad, "\n")+"\n"), 0o600))

	code, _, errs := run(t, env, "memories", "import", file, "--batch", "500")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "line 1701")
	require.Contains(t, errs, "imported 1500/2300 lines", "plain progress lines in a pipe")
	require.NotContains(t, errs, "\r")
	var st importState
	b, err := os.ReadFile(file + ".strata-import")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &st))
	require.Equal(t, 1500, st.Lines)
	rows := func() int {
		var k int
		require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), `SELECT count(*) FROM memories`).Scan(&k))
		return k
	}
	require.Equal(t, st.Created, rows())

	// The acknowledgement of the third batch is "lost": the state says 1000 lines.
	lost := st
	lost.Lines = 1000
	b, _ = json.Marshal(lost)
	require.NoError(t, os.WriteFile(file+".strata-import", b, 0o600))
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	code, out, errs := run(t, env, "memories", "import", file, "--batch", "500", "-o", "json")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "resuming")
	var done importState
	require.NoError(t, json.Unmarshal([]byte(out), &done))
	require.Equal(t, n, done.Lines)
	require.Zero(t, done.Failed)

	var total, hits int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*), coalesce(sum(dedup_count), 0) FROM memories`).Scan(&total, &hits))
	require.Equal(t, n-total, hits,
		"every line is a row or a dedup hit once: the replayed batch (lines 1001-1500) wrote nothing again")
	require.Greater(t, total, n-50)

	// A bad --batch says what is allowed.
	code, _, errs = run(t, env, "memories", "import", file, "--batch", "5000")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "--batch must be 1-1000")
}
