package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestMatrixAbuseLimits checks the limits on every operation they apply to: body size
// (413) and JSON depth (400) on every operation with a body, the page size cap on every
// list, top_k caps, bad query bytes, and that none of the refusals wrote anything.
func TestMatrixAbuseLimits(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_MAX_BODY_BYTES", "4096"), apptest.Env("STRATA_MAX_JSON_DEPTH", "8"))
	d := loadAPI(t, s)
	f := newFixture(t, s, "org-l")
	before := snapshot(t, s.DBURL, f.org)

	big := `{"text":"` + strings.Repeat("x", 5000) + `"}`
	deep := `{"a":` + strings.Repeat("[", 12) + strings.Repeat("]", 12) + `}`
	bodies, lists := 0, 0
	for _, op := range d.ops {
		path, _ := f.pathFor(op, false)
		if op.body != nil {
			bodies++
			tooBig := big
			if op.ID == "create-memories" { // a batch declares its own, larger limit (api.BatchBodyBytes)
				tooBig = `{"memories":[{"text":"` + strings.Repeat("x", api.BatchBodyBytes) + `"}]}`
			}
			r := s.Do(op.Method, path, f.admin, tooBig, "Content-Type", op.contentType)
			requireProblem(t, r, 413, "")
			r = s.Do(op.Method, path, f.admin, deep, "Content-Type", op.contentType)
			requireProblem(t, r, 400, "body")
		}
		for _, p := range op.params {
			if p["name"] == "limit" && p["in"] == "query" {
				lists++
				requireProblem(t, s.Do(op.Method, withQuery(path, "limit=1001"), f.admin, nil), 422, "query.limit")
				requireProblem(t, s.Do(op.Method, withQuery(path, "limit=-1"), f.admin, nil), 422, "query.limit")
			}
		}
		if op.Method == "GET" {
			requireProblem(t, s.Do(op.Method, withQuery(path, "cursor=%ff%fe"), f.admin, nil), 422, "query.cursor")
			requireProblem(t, s.Do(op.Method, withQuery(path, "x=a%00b"), f.admin, nil), 422, "query.x")
		}
	}
	require.Greater(t, bodies, 20)
	require.Greater(t, lists, 10)
	requireProblem(t, s.Do("POST", "/v1/memories/search", f.admin, map[string]any{"query": "x", "top_k": 101}), 422, "body.top_k")
	requireProblem(t, s.Do("POST", "/v1/jobs/similar", f.admin, map[string]any{"query": "x", "top_k": 51}), 422, "body.top_k")
	require.Equal(t, before, snapshot(t, s.DBURL, f.org), "a refused request wrote something")
}

// TestMatrixStoreCallsHaveTimeouts: a Postgres statement that runs past the server's
// statement_timeout is cancelled by Postgres and answered as unavailable (503), and a
// lock wait past lock_timeout likewise; the pool sets both on every connection.
func TestMatrixStoreCallsHaveTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.DatabaseURL(t)
	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 4, StatementTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer pool.Close()
	var st, lt, it string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
		current_setting('idle_in_transaction_session_timeout')`).Scan(&st, &lt, &it))
	require.Equal(t, "300ms", st)
	require.Equal(t, "10s", lt)
	require.Equal(t, "1min", it)
	began := time.Now()
	_, err = pool.Exec(ctx, `SELECT pg_sleep(5)`)
	var ue *strata.UnavailableError
	require.True(t, errors.As(pg.Interpret(err), &ue), "%v", err)
	require.Less(t, time.Since(began), 2*time.Second)
}

func withQuery(path, q string) string {
	if strings.Contains(path, "?") {
		return path + "&" + q
	}
	return path + "?" + q
}
