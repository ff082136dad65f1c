package httpapi_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/httpapi"
	"github.com/strata-mem/strata/internal/testenv"
)

// newTestServer builds the handler on real stores without listening.
func newTestServer(t *testing.T) *httpapi.Server {
	t.Helper()
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	pool, _ := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	cfg.RedisPrefix = prefix
	cfg.AdminKey = "sk_admin_" + testenv.RandomID(16)
	return httpapi.NewServer(httpapi.Deps{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pool: pool, Redis: rdb, Keys: auth.NewStore(pool, cfg.AdminKey, cfg.AdminOrg)})
}
