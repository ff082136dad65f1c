package langgraphtest

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestLangGraphSaverRoundTrips counts the round trips to Postgres (and the statements they
// carry) of the three calls a LangGraph graph makes on every step — put, putWrites and
// getTuple — as StrataSaver sends them (an Idempotency-Key and Prefer: return=minimal on
// every write, a user id), with a
// pgx tracer on the server's pool (apptest.RoundTrips), so that the count cannot creep back
// (issue 42, item 2; docs/benchmarks.md, "LangGraph checkpointer"). Warm calls are counted:
// the first put of a thread also creates its job and the job's log.
func TestLangGraphSaverRoundTrips(t *testing.T) {
	t.Parallel()
	rt := apptest.NewRoundTrips()
	s := apptest.Start(t, apptest.Tracer(rt), apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("roundtrips", "agent")
	const thread = "/v1/jobs/rt-thread/langgraph"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	call := func(method, path string, body any) apptest.Trips {
		t.Helper()
		id := "rt-" + testenv.RandomID(12)
		hdr := []string{"X-Request-Id", id}
		if method == "POST" {
			hdr = append(hdr, "Idempotency-Key", testenv.RandomID(16), "Prefer", "return=minimal")
		}
		r := s.Do(method, path, key, body, hdr...)
		require.Less(t, r.Status, 300, "%s %s: %s", method, path, r.Body)
		if method == "POST" {
			require.Equal(t, 204, r.Status, "%s %s: %s", method, path, r.Body)
		}
		return rt.Ended(t, id)
	}
	put := func(step int, parent string) (string, apptest.Trips) {
		id := fmt.Sprintf("1f0c%012d", step)
		versions := map[string]any{"messages": step + 1, "counter": step + 1}
		body := map[string]any{"checkpoint_ns": "", "checkpoint_id": id, "user_id": "u-1",
			"checkpoint": map[string]any{"v": 4, "id": id, "ts": "2026-12-06T03:00:00.000Z", "channel_versions": versions,
				"versions_seen": map[string]any{"agent": map[string]any{"messages": step}}},
			"metadata": map[string]any{"source": "loop", "step": step, "parents": map[string]any{}},
			"blobs": []map[string]any{
				{"channel": "messages", "version": fmt.Sprint(step + 1), "type": "json", "data": b64(strings.Repeat(`"lorem ipsum" `, 60))},
				{"channel": "counter", "version": fmt.Sprint(step + 1), "type": "json", "data": b64(fmt.Sprint(step))}}}
		if parent != "" {
			body["parent_checkpoint_id"] = parent
		}
		return id, call("POST", thread+"/checkpoints", body)
	}
	writes := func(cp string) apptest.Trips {
		return call("POST", thread+"/writes", map[string]any{"checkpoint_ns": "", "checkpoint_id": cp, "task_id": "task-1",
			"user_id": "u-1", "writes": []map[string]any{{"idx": 0, "channel": "messages", "type": "json", "data": b64(`"hi"`)}}})
	}
	get := func() apptest.Trips { return call("GET", thread+"/checkpoint?checkpoint_ns=", nil) }

	// The thread's first put creates the job; then warm calls, each op's fewest kept (a call
	// that lands on a connection new to a statement pays its description once, untraced, and
	// a connection the pool opens meanwhile runs its own set-up under the request's id).
	parent, _ := put(0, "")
	best := map[string]apptest.Trips{}
	keep := func(op string, tr apptest.Trips) {
		if tr.Fewer(best[op]) {
			best[op] = tr
		}
	}
	for step := 1; step <= 6; step++ {
		id, tr := put(step, parent)
		keep("put", tr)
		keep("putWrites", writes(id))
		keep("getTuple", get())
		parent = id
	}
	for _, op := range []string{"put", "putWrites", "getTuple"} {
		t.Logf("%s: %d round trips, %d statements\n%s", op, len(best[op]), best[op].Statements(), best[op])
	}

	// The limits: round trips on the request's path (a read's ROLLBACK goes after the
	// response, off it, and is not counted here) and statements in all.
	for _, c := range []struct {
		op            string
		trips, stmts  int
		afterResponse int // round trips sent after the response (a read's ROLLBACK)
	}{
		// Before issue 42: put 3 round trips and 9 statements (the Idempotency-Key claim on
		// its own; the thread's lock, the blobs and the checkpoint as three), putWrites 3 and 8;
		// then 2 and 7 each (the claim in front of the handler's one statement; the audit row,
		// the idempotency record and COMMIT in a second trip, after the handler answered). Now
		// 1 and 7 each: the response (204, Prefer: return=minimal) is known before the
		// statement runs, so BEGIN, the org, the claim, the statement, the audit row, the
		// idempotency record and COMMIT go in one pipeline (commitWith in internal/httpapi).
		{op: "put", trips: 1, stmts: 7},
		{op: "putWrites", trips: 1, stmts: 7},
		// getTuple: before, its transaction's ROLLBACK was a second round trip after the
		// response; now COMMIT rides with the query (pg.Session.ReadInOneTrip).
		{op: "getTuple", trips: 1, stmts: 4},
	} {
		tr := best[c.op]
		require.LessOrEqual(t, len(tr)-c.afterResponse, c.trips, "%s: round trips on the request's path\n%s", c.op, tr)
		require.LessOrEqual(t, tr.Statements()-c.afterResponse, c.stmts, "%s: statements\n%s", c.op, tr)
	}
}

// BenchmarkLangGraphCalls times StrataSaver's three calls against an in-process server, one
// at a time, with Go's HTTP client (the process's allocations include the client's): the
// server's share of a call, without Node and without PostgresSaver beside it.
//
//	go test -run '^$' -bench BenchmarkLangGraphCalls -benchtime 2000x ./internal/langgraphtest/
func BenchmarkLangGraphCalls(b *testing.B) {
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.Env("STRATA_LOG_LEVEL", "error"))
	key := s.NewKey("calls", "agent")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	const thread = "/v1/jobs/bench-thread/langgraph"
	do := func(method, path string, body any) {
		var hdr []string
		if method == "POST" { // as StrataSaver sends its writes
			hdr = []string{"Idempotency-Key", testenv.RandomID(16), "Prefer", "return=minimal"}
		}
		if r := s.Do(method, path, key, body, hdr...); r.Status >= 300 {
			b.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
		}
	}
	msgs := b64(strings.Repeat(`"lorem ipsum dolor sit amet" `, 30))
	parent, step := "", 0
	put := func() {
		step++
		id := fmt.Sprintf("1f0d%010d", step)
		body := map[string]any{"checkpoint_ns": "", "checkpoint_id": id, "user_id": "u-1",
			"checkpoint": map[string]any{"v": 4, "id": id, "ts": "2026-12-06T03:00:00.000Z",
				"channel_versions": map[string]any{"messages": step, "counter": step},
				"versions_seen":    map[string]any{"agent": map[string]any{"messages": step}}},
			"metadata": map[string]any{"source": "loop", "step": step, "parents": map[string]any{}},
			"blobs": []map[string]any{{"channel": "messages", "version": fmt.Sprint(step), "type": "json", "data": msgs},
				{"channel": "counter", "version": fmt.Sprint(step), "type": "json", "data": b64(fmt.Sprint(step))}}}
		if parent != "" {
			body["parent_checkpoint_id"] = parent
		}
		do("POST", thread+"/checkpoints", body)
		parent = id
	}
	for _, op := range []string{"put", "putWrites", "getTuple"} {
		if op == "getTuple" {
			put() // the latest checkpoint, with a blob of each channel and no pending writes
		}
		b.Run(op, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				id := fmt.Sprintf("task-%08d", i)
				switch op {
				case "put":
					put()
				case "putWrites":
					do("POST", thread+"/writes", map[string]any{"checkpoint_ns": "", "checkpoint_id": parent, "task_id": id,
						"user_id": "u-1", "writes": []map[string]any{{"idx": 0, "channel": "messages", "type": "json", "data": b64(`"hi"`)}}})
				case "getTuple":
					do("GET", thread+"/checkpoint?checkpoint_ns=", nil)
				}
			}
		})
	}
}
