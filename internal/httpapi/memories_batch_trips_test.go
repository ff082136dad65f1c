package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestMemoriesBatchStatements counts what one POST /v1/memories/batch of 1,000 memories
// over 100 users sends to Postgres (a pgx tracer on the server's pool, apptest.RoundTrips),
// so that per-row statements cannot creep back (issue 42, item 4): into empty scopes and
// then into the same, now non-empty, scopes. Each chunk of the batch (semantic.BatchChunk;
// the first a quarter of it) is one INSERT of its rows; the scope locks, the exact
// duplicates and the scopes' sizes with their memories one statement each; BEGIN, the
// Idempotency-Key claim, the audit record and COMMIT as the route's write wrapper sends
// them. Before issue 42 the first batch sent 1,208 statements in 7 round trips (a scope lock
// and a count per scope, an INSERT per row, each kind pipelined); then 15 in 9, and the
// second batch a near-duplicate query per chunk more (20 in 14); now the second batch finds
// its near duplicates in the scopes' memories read with their sizes: 15 in 9 as well.
func TestMemoriesBatchStatements(t *testing.T) {
	t.Parallel()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("ingest", "agent")
	const size, users = 1000, 100
	chunks := 1 + (size-semantic.BatchChunk/4+semantic.BatchChunk-1)/semantic.BatchChunk // 64, 256, 256, 256, 168

	post := func(round int) apptest.Trips {
		t.Helper()
		items := make([]map[string]any, size)
		for i := range items {
			items[i] = map[string]any{"user_id": fmt.Sprintf("u%d", i%users),
				"text": fmt.Sprintf("round %d memory %d: shot s%dq%d graded g%dk%d for channel c%dm%d", round, i, round, i, round, i*7, round, i*13)}
		}
		id := "ingest-" + testenv.RandomID(12)
		r := s.Do("POST", "/v1/memories/batch", key, map[string]any{"memories": items},
			"X-Request-Id", id, "Idempotency-Key", testenv.RandomID(16))
		require.Equal(t, 200, r.Status, string(r.Body))
		var out batchResp
		r.JSON(t, &out)
		require.Equal(t, size, out.Created)
		return rt.Ended(t, id)
	}
	count := func(tr apptest.Trips, prefix string) int {
		n := 0
		for _, trip := range tr {
			for _, st := range trip {
				if strings.HasPrefix(st, prefix) {
					n++
				}
			}
		}
		return n
	}
	for round, c := range []struct {
		name         string
		trips, stmts int
	}{
		// The API key's lookup, BEGIN with the Idempotency-Key claim, the locks with the
		// duplicates and sizes, the chunks, the audit record with the response's record
		// and COMMIT.
		{name: "empty scopes", trips: 4 + chunks, stmts: 10 + chunks},
		// The same: the scopes' 10 memories each are read with their sizes, and no
		// near-duplicate query runs between the chunks' INSERTs.
		{name: "scopes holding the first batch", trips: 4 + chunks, stmts: 10 + chunks},
	} {
		tr := post(round)
		t.Logf("%s: %d round trips, %d statements\n%s", c.name, len(tr), tr.Statements(), tr)
		require.Equal(t, chunks, count(tr, "INSERT INTO memories"), "%s: one INSERT per chunk\n%s", c.name, tr)
		require.Zero(t, count(tr, "SELECT x.i, n.id, n.d FROM unnest"), "%s: no near-duplicate query per chunk\n%s", c.name, tr)
		require.Equal(t, 1, count(tr, "SELECT pg_advisory_xact_lock"), "%s: the scope locks in one statement\n%s", c.name, tr)
		require.LessOrEqual(t, len(tr), c.trips, "%s: round trips\n%s", c.name, tr)
		require.LessOrEqual(t, tr.Statements(), c.stmts, "%s: statements\n%s", c.name, tr)
	}
}
