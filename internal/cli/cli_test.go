package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

func TestKeysAndAuditCommands(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.AdminKey}

	code, out, errs := run(t, env, "keys", "create", "--org", "acme", "--role", "admin", "-o", "json")
	require.Zero(t, code, errs)
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &k))
	acme := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": k.Key}

	code, out, _ = run(t, acme, "keys", "list")
	require.Zero(t, code)
	require.Contains(t, out, k.ID)
	require.Contains(t, out, "active")

	code, out, _ = run(t, acme, "audit", "verify")
	require.Zero(t, code)
	require.Contains(t, out, "ok")

	// Errors say what to do next.
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": "sk_wrong"}, "keys", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "check STRATA_API_KEY")
	code, _, errs = run(t, map[string]string{"STRATA_URL": s.URL}, "keys", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no API key")
	code, _, errs = run(t, map[string]string{"STRATA_URL": "http://127.0.0.1:1", "STRATA_API_KEY": "x"}, "keys", "list")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "make run")

	code, out, _ = run(t, env, "completion", "bash")
	require.Zero(t, code)
	require.True(t, strings.Contains(out, "bash completion"))
}

func TestHelpNeverPrintsTheAPIKey(t *testing.T) {
	t.Parallel()
	secret := "sk_live_do_not_print_me_0123456789"
	env := map[string]string{"STRATA_API_KEY": secret, "STRATA_URL": "http://127.0.0.1:1"}
	for _, args := range [][]string{{"--help"}, {"jobs", "--help"}, {"demo", "--help"}, {"gdpr", "export", "--help"}} {
		code, out, errs := run(t, env, args...)
		require.Zero(t, code, errs)
		require.NotContains(t, out+errs, secret, args)
		require.Contains(t, out, "(from STRATA_API_KEY)", args)
	}
}
