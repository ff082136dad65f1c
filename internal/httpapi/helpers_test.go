package httpapi_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
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
	return newServer(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), pool, rdb)
}

// newServer builds the handler as the server composes it (internal/app), without workers.
func newServer(tb testing.TB, cfg config.Config, log *slog.Logger, pool *pgxpool.Pool, rdb redis.UniversalClient) *httpapi.Server {
	tb.Helper()
	s, err := app.NewServer(cfg, log, pool, rdb)
	require.NoError(tb, err)
	return s
}
