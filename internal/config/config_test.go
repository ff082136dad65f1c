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
	require.Equal(t, "warn", c.RiverLogLevel, "River's INFO job counts are quiet by default")
	c, err = Load(func(k string) string { return map[string]string{"STRATA_ACCESS_FLUSH": "0"}[k] })
	require.NoError(t, err)
	require.Zero(t, c.AccessFlush, "0 counts accesses in each request's transaction")
}

// The drain and the job rescue have production defaults; a delay of 0 drains at once, and
// a rescue horizon is accepted only above the job timeout it must outlast.
func TestLoadShutdownAndRescue(t *testing.T) {
	t.Parallel()
	c, err := Load(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.ShutdownDelay)
	require.Equal(t, 5*time.Minute, c.JobTimeout)
	require.Equal(t, 6*time.Minute, c.JobRescueAfter)
	env := map[string]string{"STRATA_SHUTDOWN_DELAY": "0", "STRATA_JOB_TIMEOUT": "2s", "STRATA_JOB_RESCUE_AFTER": "3s"}
	c, err = Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Zero(t, c.ShutdownDelay)
	require.Equal(t, 3*time.Second, c.JobRescueAfter)
	env["STRATA_JOB_RESCUE_AFTER"] = "2s"
	_, err = Load(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "STRATA_JOB_RESCUE_AFTER: must be longer than STRATA_JOB_TIMEOUT (2s)")
}

func TestLoadNamesTheBadVariable(t *testing.T) {
	t.Parallel()
	for name, val := range map[string]string{
		"STRATA_DATABASE_URL":    "mysql://x",
		"STRATA_REDIS_URL":       "http://x",
		"STRATA_EMBEDDER":        "magic",
		"STRATA_EMBEDDING_DIMS":  "notanumber",
		"STRATA_SESSION_TTL":     "-1s",
		"STRATA_ADMIN_KEY":       "short",
		"STRATA_ACCESS_FLUSH":    "-1s",
		"STRATA_DB_MAX_CONNS":    "1",
		"STRATA_RIVER_LOG_LEVEL": "loud",
		"STRATA_SHUTDOWN_DELAY":  "-1s",
		"STRATA_JOB_TIMEOUT":     "0s",
		// River would take a job still within its timeout for stuck and run it twice.
		"STRATA_JOB_RESCUE_AFTER": "5m",
	} {
		env := map[string]string{name: val}
		_, err := Load(func(k string) string { return env[k] })
		require.Error(t, err, name)
		require.Contains(t, err.Error(), name)
	}
}

func TestAuditKeysRequiredInProduction(t *testing.T) {
	t.Parallel()
	c, err := Load(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, "development", c.Env, "development by default: make run and tests generate keys")

	prod := map[string]string{"STRATA_ENV": "production"}
	_, err = Load(func(k string) string { return prod[k] })
	require.ErrorContains(t, err, "STRATA_AUDIT_SIGNING_KEY: is required when STRATA_ENV=production")
	require.ErrorContains(t, err, "STRATA_PSEUDONYM_KEY: is required when STRATA_ENV=production")

	prod["STRATA_AUDIT_SIGNING_KEY"] = "/run/secrets/signing.pem"
	prod["STRATA_PSEUDONYM_KEY"] = "/run/secrets/pseudonym"
	_, err = Load(func(k string) string { return prod[k] })
	require.NoError(t, err)

	// docker-compose.yml's public development admin key is refused in production.
	prod["STRATA_ADMIN_KEY"] = "sk_dev_compose_admin_key_not_for_production"
	_, err = Load(func(k string) string { return prod[k] })
	require.ErrorContains(t, err, "STRATA_ADMIN_KEY: is a public development key")
	delete(prod, "STRATA_ENV")
	_, err = Load(func(k string) string { return prod[k] })
	require.NoError(t, err, "development accepts it")

	for name, val := range map[string]string{"STRATA_ENV": "staging", "STRATA_PSEUDONYM_KEY": "short",
		"STRATA_AUDIT_ANCHOR_INTERVAL": "10ms"} {
		env := map[string]string{name: val}
		_, err := Load(func(k string) string { return env[k] })
		require.ErrorContains(t, err, name)
	}
}
