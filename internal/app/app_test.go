package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

func TestInvalidConfigFailsFastNamingTheVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRATA_EMBEDDER": "magic", "STRATA_HTTP_ADDR": "nope"}
	var out, errb bytes.Buffer
	err := Run(context.Background(), []string{"server"}, func(k string) string { return env[k] }, &out, &errb)
	require.Error(t, err)
	require.Contains(t, err.Error(), "STRATA_EMBEDDER")
	require.Contains(t, err.Error(), "STRATA_HTTP_ADDR")
}

func TestMigrateCommandIsIdempotent(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRATA_DATABASE_URL": testenv.DatabaseURL(t), "STRATA_LOG_LEVEL": "error"}
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		require.NoError(t, Run(context.Background(), []string{"server", "migrate"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
		require.Contains(t, out.String(), "migrations applied")
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Error(t, Run(context.Background(), []string{"server", "frobnicate"}, func(string) string { return "" }, &out, &errb))
	require.Contains(t, errb.String(), "usage")
}
