package mem0_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestMemoryRoundTrips counts the round trips to Postgres (and the statements they carry)
// of one memory write and one search — POST /v1/memories and /v1/memories/search, and the
// same through Mem0's add (infer: false) and search under /mem0 — with a pgx tracer on the
// server's pool (apptest.RoundTrips), so that the count cannot creep back (issue 42, item 3;
// docs/benchmarks.md, "Memory writes and searches against mem0"). Warm calls are counted.
func TestMemoryRoundTrips(t *testing.T) {
	t.Parallel()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("roundtrips-mem", "agent")

	// call sends one request and checks its answer: the status, and a piece of the body.
	call := func(method, path string, body any, idem bool, status int, has string) apptest.Trips {
		t.Helper()
		id := "rt-" + testenv.RandomID(12)
		hdr := []string{"X-Request-Id", id}
		if idem {
			hdr = append(hdr, "Idempotency-Key", testenv.RandomID(16))
		}
		r := s.Do(method, path, key, body, hdr...)
		require.Equal(t, status, r.Status, "%s %s: %s", method, path, r.Body)
		require.Contains(t, string(r.Body), has, "%s %s", method, path)
		return rt.Ended(t, id)
	}
	// Words of their own for each write, so that only "add (duplicate)" finds a duplicate.
	words := map[int]string{}
	text := func(i int) string {
		if _, ok := words[i]; !ok {
			words[i] = fmt.Sprintf("%s %s %s %s", testenv.RandomID(8), testenv.RandomID(8), testenv.RandomID(8), testenv.RandomID(8))
		}
		return fmt.Sprintf("shot s%dq graded with lut v%dk %s for channel c%dm", i, i*7, words[i], i%17)
	}
	ops := map[string]func(i int) apptest.Trips{
		"add": func(i int) apptest.Trips {
			return call("POST", "/v1/memories", map[string]any{"text": text(i), "user_id": fmt.Sprintf("u%d", i%3)}, false, 201, `"deduplicated":false`)
		},
		"add+idempotency-key": func(i int) apptest.Trips {
			return call("POST", "/v1/memories", map[string]any{"text": text(100 + i), "user_id": fmt.Sprintf("u%d", i%3)}, true, 201, `"deduplicated":false`)
		},
		"add (duplicate)": func(i int) apptest.Trips {
			return call("POST", "/v1/memories", map[string]any{"text": text(i), "user_id": fmt.Sprintf("u%d", i%3)}, false, 200, `"reason":"exact"`)
		},
		"mem0 add": func(i int) apptest.Trips {
			return call("POST", "/mem0/v1/memories/", map[string]any{"messages": []map[string]any{{"role": "user",
				"content": text(200 + i)}}, "user_id": fmt.Sprintf("u%d", i%3), "infer": false}, false, 200, `"event":"ADD"`)
		},
		"search": func(i int) apptest.Trips {
			return call("POST", "/v1/memories/search", map[string]any{"query": fmt.Sprintf("graded lut for channel c%dm", i%17),
				"user_id": fmt.Sprintf("u%d", i%3), "top_k": 10}, false, 200, "graded")
		},
		"mem0 search": func(i int) apptest.Trips {
			return call("POST", "/mem0/v2/memories/search/", map[string]any{"query": fmt.Sprintf("graded lut for channel c%dm", i%17),
				"filters": map[string]any{"user_id": fmt.Sprintf("u%d", i%3)}, "top_k": 10}, false, 200, "graded")
		},
	}
	order := []string{"add", "add+idempotency-key", "add (duplicate)", "mem0 add", "search", "mem0 search"}
	best := map[string]apptest.Trips{}
	for i := range 8 {
		for _, op := range order {
			tr := ops[op](i)
			if tr.Fewer(best[op]) {
				best[op] = tr
			}
		}
	}
	for _, op := range order {
		t.Logf("%s: %d round trips, %d statements\n%s", op, len(best[op]), best[op].Statements(), best[op])
	}

	for _, c := range []struct {
		op           string
		trips, stmts int
	}{
		// Before issue 42: 3 round trips and 10 statements (the duplicate checks, then the
		// INSERT or the dedup UPDATE on its own, then the audit record with COMMIT).
		// Then 2 round trips and 7 statements: BEGIN, the org, the scope lock, one statement
		// for both duplicate checks and the insert or dedup update, the plan choice restored;
		// then the audit record and COMMIT.
		// Now one round trip, 5 statements: BEGIN, the org, the scope lock, one statement for
		// the duplicate checks, the insert or dedup update and the audit record (its status
		// decided in it), COMMIT (which also ends the plan choice).
		{op: "add", trips: 1, stmts: 5},
		{op: "add (duplicate)", trips: 1, stmts: 5},
		{op: "mem0 add", trips: 1, stmts: 5},
		// Before: 4 round trips and 12 statements (the Idempotency-Key claim on its own).
		// Now the claim rides in front of the write, its record with COMMIT (the record holds
		// the response, which exists only after the write's statement: two round trips).
		{op: "add+idempotency-key", trips: 2, stmts: 9},
		// Before: 3 round trips and 12 statements (the org's policy read on its own), then 2
		// and 11 (the policy, the vector leg and the full-text leg in one round trip). Now
		// both legs, their fusion and the top k's rows are one statement beside the policy;
		// the retrieval log and the audit record ride with COMMIT.
		{op: "search", trips: 2, stmts: 10},
		{op: "mem0 search", trips: 2, stmts: 10},
	} {
		tr := best[c.op]
		require.LessOrEqual(t, len(tr), c.trips, "%s: round trips\n%s", c.op, tr)
		require.LessOrEqual(t, tr.Statements(), c.stmts, "%s: statements\n%s", c.op, tr)
	}
}

// BenchmarkMemoryCalls times one memory write and one search against an in-process server,
// one at a time, with Go's HTTP client (the process's allocations include the client's):
// the server's share of the calls BenchmarkMem0Peer makes, without Node and without mem0
// beside it, for CPU and allocation profiles.
//
//	go test -run '^$' -bench BenchmarkMemoryCalls -benchtime 500x ./internal/mem0/
func BenchmarkMemoryCalls(b *testing.B) {
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.Env("STRATA_LOG_LEVEL", "error"))
	key := s.NewKey("calls", "agent")
	do := func(path string, body any) {
		if r := s.Do("POST", path, key, body); r.Status >= 300 {
			b.Fatalf("POST %s: %d %s", path, r.Status, r.Body)
		}
	}
	n := 0
	text := func() string {
		n++
		return fmt.Sprintf("note %d: shot s%dq graded with lut v%dk for channel c%dm", n, n, n*7, n%17)
	}
	for range 200 { // a scope of some size to search
		do("/v1/memories", map[string]any{"text": text(), "user_id": fmt.Sprintf("u%d", n%10)})
	}
	for _, op := range []string{"add", "search", "mem0-add", "mem0-search"} {
		b.Run(op, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				u := fmt.Sprintf("u%d", i%10)
				q := fmt.Sprintf("graded lut for channel c%dm", i%17)
				switch op {
				case "add":
					do("/v1/memories", map[string]any{"text": text(), "user_id": u})
				case "search":
					do("/v1/memories/search", map[string]any{"query": q, "user_id": u, "top_k": 10})
				case "mem0-add":
					do("/mem0/v1/memories/", map[string]any{"messages": []map[string]any{{"role": "user", "content": text()}},
						"user_id": u, "infer": false})
				case "mem0-search":
					do("/mem0/v2/memories/search/", map[string]any{"query": q, "filters": map[string]any{"user_id": u}, "top_k": 10})
				}
			}
		})
	}
}
