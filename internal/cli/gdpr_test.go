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

func TestGDPRCommands(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "compliance")}
	for i, k := range []string{"colour", "tone"} {
		r := s.Do("PUT", "/v1/kv/prefs/"+k, agent, map[string]any{"value": i, "user_id": "cli-user"})
		require.Equal(t, 201, r.Status, "%s", r.Body)
	}

	file := filepath.Join(t.TempDir(), "export.ndjson")
	code, out, errs := run(t, comp, "gdpr", "export", "cli-user", "-f", file, "--no-progress")
	require.Zero(t, code, errs)
	require.Contains(t, out, "keyvalue.entry")
	require.Contains(t, errs, "wrote")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.GreaterOrEqual(t, len(lines), 6, "header, 2 entries, 2 versions, summary")
	require.Contains(t, lines[len(lines)-1], `"type":"summary"`)

	// A failed export leaves no file behind (and an existing one as it was).
	failed := filepath.Join(t.TempDir(), "failed.ndjson")
	wrong := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": "sk_wrong"}
	code, _, errs = run(t, wrong, "gdpr", "export", "cli-user", "-f", failed, "--no-progress")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "401")
	entries, err := os.ReadDir(filepath.Dir(failed))
	require.NoError(t, err)
	require.Empty(t, entries, "no empty or partial export file")
	code, _, _ = run(t, wrong, "gdpr", "export", "cli-user", "-f", file, "--no-progress")
	require.Equal(t, 1, code)
	again, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, b, again, "the earlier export is untouched")
	code, out, _ = run(t, comp, "gdpr", "export", "--help")
	require.Zero(t, code)
	require.Contains(t, out, "export USER_ID -f FILE")

	code, out, errs = run(t, comp, "gdpr", "restrict", "cli-user", "--reason", "contested")
	require.Zero(t, code, errs)
	require.Contains(t, out, "yes")
	require.Equal(t, 403, s.Do("GET", "/v1/kv/prefs/colour?user_id=cli-user", agent, nil).Status)
	code, _, errs = run(t, comp, "gdpr", "unrestrict", "cli-user")
	require.Zero(t, code, errs)

	code, out, errs = run(t, comp, "gdpr", "erase", "cli-user", "--wait", "--no-progress", "-o", "json")
	require.Zero(t, code, errs)
	var e struct {
		ID           string
		Status       string
		Counts       map[string]map[string]int64
		Verification struct{ Clean bool }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &e), out)
	require.Equal(t, "completed", e.Status)
	require.True(t, e.Verification.Clean)
	require.EqualValues(t, 2, e.Counts["keyvalue"]["versions"])
	code, out, errs = run(t, comp, "gdpr", "status", e.ID)
	require.Zero(t, code, errs)
	require.Contains(t, out, "clean: every tier re-queried")
	require.Equal(t, 404, s.Do("GET", "/v1/kv/prefs/colour?user_id=cli-user", agent, nil).Status)

	// an agent key is refused, with a hint
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": agent}, "gdpr", "erase", "x")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "role")
}
