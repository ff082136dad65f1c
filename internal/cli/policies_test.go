package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

func TestLifecycleCommands(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "admin")}

	code, out, errs := run(t, env, "policies", "get")
	require.Zero(t, code, errs)
	require.Contains(t, out, "version 0")
	require.Contains(t, out, `"max_inactivity": "365d"`)

	f := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"memories":{"kinds":{"job":{"max_age":"400d"}}}}`), 0o600))
	code, out, errs = run(t, env, "policies", "set", "-f", f, "--if-match", "0")
	require.Zero(t, code, errs)
	require.Contains(t, out, "stored version 1")
	code, _, errs = run(t, env, "policies", "set", "-f", f, "--if-match", "0")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "409")

	code, out, errs = run(t, env, "eviction", "preview")
	require.Zero(t, code, errs)
	require.Contains(t, out, "would remove 0 items (policy version 1)")
	code, out, errs = run(t, env, "eviction", "run", "-o", "json")
	require.Zero(t, code, errs)
	var rep struct {
		Applied bool `json:"applied"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.Applied)

	code, out, errs = run(t, env, "consolidation", "run", "--task", "merge")
	require.Zero(t, code, errs)
	require.Contains(t, out, "0 clusters")
	code, _, errs = run(t, env, "consolidation", "run", "--task", "nap")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "body.tasks[0]")
}
