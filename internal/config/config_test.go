package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, "hash", c.Embedder)
	require.EqualValues(t, 1<<20, c.MaxBodyBytes)
	require.Equal(t, time.Second, c.AccessFlush)
	c, err = Load(func(k string) string { return map[string]string{"STRATA_ACCESS_FLUSH": "0"}[k] })
	require.NoError(t, err)
	require.Zero(t, c.AccessFlush, "0 counts accesses in each request's transaction")
}

func TestLoadNamesTheBadVariable(t *testing.T) {
	t.Parallel()
	for name, val := range map[string]string{
		"STRATA_DATABASE_URL":   "mysql://x",
		"STRATA_REDIS_URL":      "http://x",
		"STRATA_EMBEDDER":       "magic",
		"STRATA_EMBEDDING_DIMS": "notanumber",
		"STRATA_SESSION_TTL":    "-1s",
		"STRATA_ADMIN_KEY":      "short",
		"STRATA_ACCESS_FLUSH":   "-1s",
		"STRATA_DB_MAX_CONNS":   "1",
	} {
		env := map[string]string{name: val}
		_, err := Load(func(k string) string { return env[k] })
		require.Error(t, err, name)
		require.Contains(t, err.Error(), name)
	}
}
