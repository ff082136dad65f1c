package app

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestProductionRefusesToStartWithoutAuditKeys(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRATA_ENV": "production"}
	var out, errb bytes.Buffer
	err := Run(context.Background(), []string{"server"}, func(k string) string { return env[k] }, &out, &errb)
	require.ErrorContains(t, err, "STRATA_AUDIT_SIGNING_KEY")
	require.ErrorContains(t, err, "STRATA_PSEUDONYM_KEY")
}

func TestBadSigningKeyNamesTheVariable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := map[string]string{"STRATA_DATABASE_URL": testenv.DatabaseURL(t), "STRATA_REDIS_URL": testenv.RedisURL(),
		"STRATA_HTTP_ADDR": "127.0.0.1:0", "STRATA_LOG_LEVEL": "error", "STRATA_DB_MAX_CONNS": "4",
		"STRATA_ENV": "production", "STRATA_AUDIT_SIGNING_KEY": "not-a-key", "STRATA_PSEUDONYM_KEY": audit.NewPseudonymKey()}
	var out, errb bytes.Buffer
	err := Run(ctx, []string{"server"}, func(k string) string { return env[k] }, &out, &errb)
	require.ErrorContains(t, err, "STRATA_AUDIT_SIGNING_KEY")
	require.ErrorContains(t, err, "strata audit keygen", "the error says what to do next")
	require.NotContains(t, out.String(), "STRATA_AUDIT_SIGNING_KEY was not set", "production never generates audit keys")
}
