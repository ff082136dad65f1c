package httpapi_test

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func lgCheckpoint(id string, versions map[string]any) map[string]any {
	return map[string]any{"v": 4, "id": id, "ts": "2026-11-30T12:00:00.000Z", "channel_versions": versions,
		"versions_seen": map[string]any{"": map[string]any{"x": 1}}}
}

func TestLangGraphThreadIsAJob(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	other := s.NewKey("globex", "agent")

	// First put creates the job; unchanged channels are not sent again.
	put := func(id, parent string, versions map[string]any, blobs []map[string]any, meta map[string]any) *apptest.Response {
		return s.Do("POST", "/v1/jobs/thread-1/langgraph/checkpoints", k, map[string]any{
			"checkpoint_id": id, "parent_checkpoint_id": parent, "checkpoint": lgCheckpoint(id, versions),
			"metadata": meta, "blobs": blobs, "user_id": "u-7"})
	}
	r := put("c1", "", map[string]any{"a": 1, "b": 1}, []map[string]any{
		{"channel": "a", "version": "1", "type": "json", "data": b64(`"A1"`)},
		{"channel": "b", "version": "1", "type": "json", "data": b64(`"B1"`)}},
		map[string]any{"source": "input", "step": -1})
	require.Equal(t, 201, r.Status, string(r.Body))
	res := r.Map(t)
	require.Equal(t, true, res["job_created"])
	require.EqualValues(t, 1, res["job_version"])
	r = put("c2", "c1", map[string]any{"a": 2, "b": 1}, []map[string]any{
		{"channel": "a", "version": "2", "type": "json", "data": b64(`"A2"`)}},
		map[string]any{"source": "loop", "step": 0})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.EqualValues(t, 2, r.Map(t)["job_version"])
	// Putting c2 again overwrites it and records no new job version.
	r = put("c2", "c1", map[string]any{"a": 2, "b": 1}, nil, map[string]any{"source": "loop", "step": 0, "extra": true})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.EqualValues(t, 2, r.Map(t)["job_version"])
	require.Equal(t, 3, countRows(t, s, "langgraph_blobs"))

	// The job: running, user_id from the thread, two checkpoint versions; resume shows the latest.
	r = s.Do("GET", "/v1/jobs/thread-1", k, nil)
	require.Equal(t, 200, r.Status)
	job := r.Map(t)
	require.Equal(t, "running", job["status"])
	require.Equal(t, "u-7", job["user_id"])
	require.EqualValues(t, 2, job["checkpoint_version"])
	r = s.Do("GET", "/v1/jobs/thread-1/resume", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	cp := r.Map(t)["checkpoint"].(map[string]any)
	require.Equal(t, "c2", cp["state"].(map[string]any)["langgraph"].(map[string]any)["checkpoint_id"])
	require.Equal(t, "langgraph step 0", cp["current_step"])

	// Pending writes: a repeat keeps the first value; a batch of special channels replaces.
	w := func(task string, writes []map[string]any) *apptest.Response {
		return s.Do("POST", "/v1/jobs/thread-1/langgraph/writes", k, map[string]any{"checkpoint_id": "c2", "task_id": task, "writes": writes})
	}
	r = w("t1", []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64(`"first"`)}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.EqualValues(t, 1, r.Map(t)["stored"])
	r = w("t1", []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64(`"second"`)}})
	require.EqualValues(t, 0, r.Map(t)["stored"])
	require.Equal(t, 200, w("t0", []map[string]any{{"idx": -1, "channel": "__error__", "type": "json", "data": b64(`"e1"`)}}).Status)
	r = w("t0", []map[string]any{{"idx": -1, "channel": "__error__", "type": "json", "data": b64(`"e2"`)}})
	require.EqualValues(t, 1, r.Map(t)["stored"])

	// getTuple: latest of the root namespace, with values at its versions and writes by task, idx.
	r = s.Do("GET", "/v1/jobs/thread-1/langgraph/checkpoint", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	tup := r.Map(t)
	require.Equal(t, "c2", tup["checkpoint_id"])
	require.Equal(t, "c1", tup["parent_checkpoint_id"])
	require.Equal(t, true, tup["metadata"].(map[string]any)["extra"])
	require.ElementsMatch(t, []any{
		map[string]any{"channel": "a", "type": "json", "data": b64(`"A2"`)},
		map[string]any{"channel": "b", "type": "json", "data": b64(`"B1"`)}}, tup["channel_values"])
	require.Equal(t, []any{
		map[string]any{"task_id": "t0", "channel": "__error__", "type": "json", "data": b64(`"e2"`)},
		map[string]any{"task_id": "t1", "channel": "a", "type": "json", "data": b64(`"first"`)}}, tup["pending_writes"])
	r = s.Do("GET", "/v1/jobs/thread-1/langgraph/checkpoint?checkpoint_id=c1", k, nil)
	require.Equal(t, 200, r.Status)
	require.Len(t, r.Map(t)["channel_values"], 2)
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/thread-1/langgraph/checkpoint?checkpoint_id=nope", k, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/thread-1/langgraph/checkpoint?checkpoint_ns=sub", k, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/thread-1/langgraph/checkpoint", other, nil).Status)

	// A subgraph checkpoint: stored, but no job version.
	r = s.Do("POST", "/v1/jobs/thread-1/langgraph/checkpoints", k, map[string]any{"checkpoint_ns": "sub:1|x",
		"checkpoint_id": "c3", "checkpoint": lgCheckpoint("c3", map[string]any{}), "metadata": map[string]any{"source": "loop"}})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Nil(t, r.Map(t)["job_version"])

	// list: newest first; namespace absent = all, empty = root; before; filter; paging.
	ids := func(path string) []string {
		r := s.Do("GET", path, k, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		var l struct {
			Items []struct {
				CheckpointID string `json:"checkpoint_id"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		r.JSON(t, &l)
		out := []string{}
		for _, it := range l.Items {
			out = append(out, it.CheckpointID)
		}
		if l.NextCursor != "" {
			out = append(out, "cursor:"+l.NextCursor)
		}
		return out
	}
	require.Equal(t, []string{"c3", "c2", "c1"}, ids("/v1/jobs/thread-1/langgraph/checkpoints"))
	require.Equal(t, []string{"c2", "c1"}, ids("/v1/jobs/thread-1/langgraph/checkpoints?checkpoint_ns="))
	require.Equal(t, []string{"c3"}, ids("/v1/jobs/thread-1/langgraph/checkpoints?checkpoint_ns="+url.QueryEscape("sub:1|x")))
	require.Equal(t, []string{"c1"}, ids("/v1/jobs/thread-1/langgraph/checkpoints?before=c2"))
	require.Equal(t, []string{"c3", "c2"}, ids("/v1/langgraph/checkpoints?filter="+url.QueryEscape(`{"source":"loop"}`)))
	require.Equal(t, []string{}, ids("/v1/langgraph/checkpoints?filter="+url.QueryEscape(`{"source":"loop"}`)+"&thread_id=nope"))
	page1 := ids("/v1/langgraph/checkpoints?limit=2")
	require.Len(t, page1, 3)
	require.Equal(t, []string{"c3", "c2"}, page1[:2])
	require.Equal(t, []string{"c1"}, ids("/v1/langgraph/checkpoints?limit=2&cursor="+page1[2][len("cursor:"):]))
	require.Equal(t, []string{}, ids("/v1/langgraph/checkpoints?limit=2")[:0])
	require.Equal(t, 422, s.Do("GET", "/v1/langgraph/checkpoints?filter=%5B1%5D", k, nil).Status)

	// Bad input names the field; nothing is written.
	requireProblem(t, s.Do("POST", "/v1/jobs/thread-2/langgraph/checkpoints", k, map[string]any{"checkpoint_id": "c1",
		"checkpoint": []int{1}}), 422, "body.checkpoint")
	requireProblem(t, s.Do("POST", "/v1/jobs/thread-2/langgraph/writes", k, map[string]any{"checkpoint_id": "c1", "task_id": "",
		"writes": []map[string]any{}}), 422, "body.task_id")
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/thread-2", k, nil).Status)

	// Every write was audited against the job.
	var audited int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE entity_type = 'jobs' AND action LIKE '%langgraph%'`).Scan(&audited))
	require.GreaterOrEqual(t, audited, 8)
	// The data subject is on every row (erasure finds them by user_id).
	var unowned int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM langgraph_checkpoints WHERE user_id IS DISTINCT FROM 'u-7') +
		(SELECT count(*) FROM langgraph_blobs WHERE user_id IS DISTINCT FROM 'u-7') +
		(SELECT count(*) FROM langgraph_writes WHERE user_id IS DISTINCT FROM 'u-7')`).Scan(&unowned))
	require.Zero(t, unowned)

	// deleteThread: the job and everything of it; again: deleted false. Another org sees nothing.
	r = s.Do("DELETE", "/v1/jobs/thread-1/langgraph", other, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, false, r.Map(t)["deleted"])
	r = s.Do("DELETE", "/v1/jobs/thread-1/langgraph", k, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, true, r.Map(t)["deleted"])
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/thread-1", k, nil).Status)
	for _, tbl := range []string{"langgraph_checkpoints", "langgraph_blobs", "langgraph_writes", "job_checkpoints"} {
		require.Zero(t, countRows(t, s, tbl), tbl)
	}
	require.Equal(t, false, s.Do("DELETE", "/v1/jobs/thread-1/langgraph", k, nil).Map(t)["deleted"])
}

func TestLangGraphFinishedJobRefusesPuts(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/done-1", k, map[string]any{"status": "completed"}).Status)
	requireProblem(t, s.Do("POST", "/v1/jobs/done-1/langgraph/checkpoints", k, map[string]any{"checkpoint_id": "c1",
		"checkpoint": lgCheckpoint("c1", map[string]any{})}), 409, "")
	requireProblem(t, s.Do("POST", "/v1/jobs/done-1/langgraph/writes", k, map[string]any{"checkpoint_id": "c1",
		"task_id": "t", "writes": []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64("1")}}}), 409, "")
	require.Zero(t, countRows(t, s, "langgraph_writes"))
	// Writes may come before their checkpoint (durability "async"): they create the thread.
	r := s.Do("POST", "/v1/jobs/early/langgraph/writes", k, map[string]any{"checkpoint_id": "c1",
		"task_id": "t", "writes": []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64("1")}}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, 200, s.Do("GET", "/v1/jobs/early", k, nil).Status)
	// Idempotency-Key: a retried put replays the first answer.
	body := map[string]any{"checkpoint_id": "c1", "checkpoint": lgCheckpoint("c1", map[string]any{})}
	r1 := s.Do("POST", "/v1/jobs/t-9/langgraph/checkpoints", k, body, "Idempotency-Key", "put-1")
	require.Equal(t, 201, r1.Status, string(r1.Body))
	r2 := s.Do("POST", "/v1/jobs/t-9/langgraph/checkpoints", k, body, "Idempotency-Key", "put-1")
	require.Equal(t, 201, r2.Status)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(r1.Body), string(r2.Body))
}

// A LangGraph checkpoint records the job's log head at the put (read in the put's own
// statement, not before it).
func TestLangGraphCheckpointRecordsLogHead(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	put := func(id, parent string) {
		r := s.Do("POST", "/v1/jobs/thread-h/langgraph/checkpoints", k, map[string]any{
			"checkpoint_id": id, "parent_checkpoint_id": parent, "checkpoint": lgCheckpoint(id, map[string]any{"a": 1}),
			"metadata": map[string]any{"source": "loop", "step": 0}})
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	head := func() any {
		r := s.Do("GET", "/v1/jobs/thread-h/resume", k, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		return r.Map(t)["checkpoint"].(map[string]any)["event_seq"]
	}
	put("c1", "")
	require.EqualValues(t, 0, head())
	for _, op := range []string{"crop", "grade"} {
		require.Equal(t, 201, s.Do("POST", "/v1/jobs/thread-h/events", k, map[string]any{"op": op, "params": map[string]any{}}).Status)
	}
	put("c2", "c1")
	require.EqualValues(t, 2, head())
}

// TestLangGraphIdempotentWrites: the checkpointer's writes claim their Idempotency-Key in
// their own first round trip (claimInWrite); a refused claim writes nothing and goes the
// usual way: the stored response replays, a different body is refused, a key held by a
// request in flight answers 409 after the wait, and another org's key is its own.
func TestLangGraphIdempotentWrites(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_IDEMPOTENCY_WAIT", "300ms"))
	k := s.NewKey("acme", "agent")
	other := s.NewKey("globex", "agent")
	put := func(key, thread, id string, blob string, apiKey string) *apptest.Response {
		return s.Do("POST", "/v1/jobs/"+thread+"/langgraph/checkpoints", apiKey, map[string]any{
			"checkpoint_id": id, "checkpoint": lgCheckpoint(id, map[string]any{"a": 1}), "metadata": map[string]any{"step": 0},
			"blobs": []map[string]any{{"channel": "a", "version": "1", "type": "json", "data": b64(blob)}}, "user_id": "u-1"},
			"Idempotency-Key", key)
	}
	audited := func(action string) int {
		var n int
		require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
			`SELECT count(*) FROM audit_log WHERE org_id = 'acme' AND action = $1`, action).Scan(&n))
		return n
	}

	first := put("k-1", "th", "c1", `"A"`, k)
	require.Equal(t, 201, first.Status, string(first.Body))
	// The same request again: the stored 201 (a second run would answer 200, overwritten).
	again := put("k-1", "th", "c1", `"A"`, k)
	require.Equal(t, 201, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	require.Equal(t, 1, audited("put-langgraph-checkpoint"), "a replay is not audited again")
	require.Equal(t, 1, countRows(t, s, "langgraph_checkpoints"))
	// The key with another body: refused, nothing written.
	r := put("k-1", "th", "c2", `"B"`, k)
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Equal(t, 1, countRows(t, s, "langgraph_checkpoints"))
	require.Equal(t, 1, countRows(t, s, "langgraph_blobs"))
	// Another org's request with the same key is its own.
	require.Equal(t, 201, put("k-1", "th", "c1", `"A"`, other).Status)

	// putWrites: the replay answers the first run's count (a second run would store 0).
	w := func(key string) *apptest.Response {
		return s.Do("POST", "/v1/jobs/th/langgraph/writes", k, map[string]any{"checkpoint_id": "c1", "task_id": "t1",
			"writes": []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64(`"w"`)}}}, "Idempotency-Key", key)
	}
	r = w("k-2")
	require.Equal(t, 200, r.Status, string(r.Body))
	require.EqualValues(t, 1, r.Map(t)["stored"])
	r = w("k-2")
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, r.Map(t)["stored"])
	require.Equal(t, 1, audited("put-langgraph-writes"))

	// A key held by a request in flight (a transaction that claimed it and has not ended):
	// 409 after the wait (300 ms here), nothing written; once the holder rolls back, the
	// key is free.
	ctx := context.Background()
	holder := testenv.OwnerConn(t, s.DBURL)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (org_id, key, request_hash, method, path, response_status, expires_at)
		VALUES ('acme', 'k-3', '\x00', 'POST', '/v1/jobs/th/langgraph/checkpoints', 0, now() + interval '1 hour')`)
	require.NoError(t, err)
	r = put("k-3", "th", "c3", `"C"`, k)
	require.Equal(t, 409, r.Status, string(r.Body))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, 2, countRows(t, s, "langgraph_checkpoints"), "acme's c1 and globex's c1 only")
	require.NoError(t, tx.Rollback(ctx))
	r = put("k-3", "th", "c3", `"C"`, k)
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
}

// TestLangGraphMinimalWrites checks the writes StrataSaver sends with Prefer: return=minimal,
// which answer 204 and send their statement with the audit row, the idempotency record and
// COMMIT (commitWith; one round trip, TestLangGraphSaverRoundTrips): what they store, their
// audit rows (as the full answer's, with the status the client got), Idempotency-Key
// replays and conflicts, and the failure path: a statement that fails in COMMIT's round trip
// leaves nothing (no audit row, no idempotency record) and answers the problem a request
// without the preference gets.
func TestLangGraphMinimalWrites(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	k := s.NewKey("acme", "agent")
	ctx := context.Background()
	owner := testenv.OwnerConn(t, s.DBURL)
	minimal := []string{"Prefer", "return=minimal"}
	put := func(thread, id, blob string, hdr ...string) *apptest.Response {
		return s.Do("POST", "/v1/jobs/"+thread+"/langgraph/checkpoints", k, map[string]any{
			"checkpoint_id": id, "checkpoint": lgCheckpoint(id, map[string]any{"a": 1}), "metadata": map[string]any{"step": 0},
			"blobs": []map[string]any{{"channel": "a", "version": "1", "type": "json", "data": b64(blob)}}, "user_id": "u-1"}, hdr...)
	}
	writes := func(thread string, hdr ...string) *apptest.Response {
		return s.Do("POST", "/v1/jobs/"+thread+"/langgraph/writes", k, map[string]any{"checkpoint_id": "c1", "task_id": "t1",
			"writes": []map[string]any{{"idx": 0, "channel": "a", "type": "json", "data": b64(`"w"`)}}}, hdr...)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, owner.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	audited := func(action string) int {
		return count(`SELECT count(*) FROM audit_log WHERE org_id = 'acme' AND action = $1`, action)
	}
	idemRecords := func(key string) int {
		return count(`SELECT count(*) FROM idempotency_keys WHERE org_id = 'acme' AND key = $1`, key)
	}
	// The audit row of a request, without its id, time and chain.
	auditOf := func(requestID string) string {
		t.Helper()
		var row string
		require.NoError(t, owner.QueryRow(ctx, `SELECT (to_jsonb(a) - 'id' - 'at' - 'seq' - 'prev_hash' - 'hash' - 'request_id' - 'status')::text
			FROM audit_log a WHERE request_id = $1`, requestID).Scan(&row))
		return row
	}

	// A put: 204, no body; stored with everything the full answer's put stores (the job, its
	// checkpoint version, its log).
	r := put("th", "c1", `"A"`, append([]string{"Idempotency-Key", "k-1", "X-Request-Id", "min-put-1"}, minimal...)...)
	require.Equal(t, 204, r.Status, string(r.Body))
	require.Empty(t, r.Body)
	require.Equal(t, "return=minimal", r.Header.Get("Preference-Applied"))
	tuple := s.Do("GET", "/v1/jobs/th/langgraph/checkpoint", k, nil)
	require.Equal(t, 200, tuple.Status, string(tuple.Body))
	require.EqualValues(t, 1, tuple.Map(t)["job_version"])
	require.Equal(t, 1, count(`SELECT count(*) FROM episodic_jobs WHERE org_id = 'acme' AND job_id = 'th'`), "the job's log")
	require.Equal(t, 1, count(`SELECT count(*) FROM job_checkpoints WHERE org_id = 'acme' AND job_id = 'th'`))
	require.Equal(t, 204, count(`SELECT status FROM audit_log WHERE request_id = 'min-put-1'`), "the status the client got")
	// Its audit row is the full answer's but for the status.
	r = put("th-full", "c1", `"A"`, "Idempotency-Key", "k-full", "X-Request-Id", "full-put-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Contains(t, auditOf("full-put-1"), "th-full")
	require.JSONEq(t, strings.ReplaceAll(auditOf("full-put-1"), "th-full", "th"), auditOf("min-put-1"))

	// The same key and body again: the stored 204, not audited again.
	again := put("th", "c1", `"A"`, append([]string{"Idempotency-Key", "k-1"}, minimal...)...)
	require.Equal(t, 204, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 2, audited("put-langgraph-checkpoint"), "min-put-1 and full-put-1")
	// The same key with another body: refused, nothing written.
	requireProblem(t, put("th", "c2", `"B"`, append([]string{"Idempotency-Key", "k-1"}, minimal...)...), 422, "header.Idempotency-Key")
	require.Equal(t, 1, count(`SELECT count(*) FROM langgraph_checkpoints WHERE job_id = 'th'`))

	// putWrites: 204, stored once; the replay answers the stored 204.
	r = writes("th", append([]string{"Idempotency-Key", "k-2"}, minimal...)...)
	require.Equal(t, 204, r.Status, string(r.Body))
	r = writes("th", append([]string{"Idempotency-Key", "k-2"}, minimal...)...)
	require.Equal(t, 204, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, count(`SELECT count(*) FROM langgraph_writes WHERE job_id = 'th'`))
	require.Equal(t, 1, audited("put-langgraph-writes"))

	// The failure path: the thread's job is finished, so the statement fails on the server in
	// COMMIT's round trip; nothing commits (no audit row, no idempotency record) and the
	// client gets the problem a request without the preference gets.
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/done-1", k, map[string]any{"status": "completed"}).Status)
	auditRows := count(`SELECT count(*) FROM audit_log`)
	full := put("done-1", "c1", `"A"`, "Idempotency-Key", "k-f0")
	requireProblem(t, full, 409, "")
	fullWrites := writes("done-1", "Idempotency-Key", "k-f1")
	requireProblem(t, fullWrites, 409, "")
	for i, c := range []struct {
		key  string
		send func(hdr ...string) *apptest.Response
		want *apptest.Response
	}{
		{"k-f2", func(hdr ...string) *apptest.Response { return put("done-1", "c1", `"A"`, hdr...) }, full},
		{"k-f3", func(hdr ...string) *apptest.Response { return writes("done-1", hdr...) }, fullWrites},
		{"", func(hdr ...string) *apptest.Response { return put("done-1", "c1", `"A"`, hdr...) }, full},
	} {
		hdr := minimal
		if c.key != "" {
			hdr = append([]string{"Idempotency-Key", c.key}, minimal...)
		}
		for range 2 { // and again with the same key: no record was left to replay
			r := c.send(hdr...)
			requireProblem(t, r, 409, "")
			require.Empty(t, r.Header.Get("Preference-Applied"), "case %d", i)
			require.Empty(t, r.Header.Get("Idempotent-Replayed"), "case %d", i)
			got, wantBody := r.Map(t), c.want.Map(t)
			require.Equal(t, wantBody["detail"], got["detail"], "case %d", i)
			require.Equal(t, wantBody["title"], got["title"], "case %d", i)
			require.Zero(t, idemRecords(c.key), "case %d", i)
		}
	}
	require.Equal(t, auditRows, count(`SELECT count(*) FROM audit_log`), "no audit row for a refused write")
	for _, tbl := range []string{"langgraph_checkpoints", "langgraph_writes", "langgraph_blobs"} {
		require.Zero(t, count(`SELECT count(*) FROM `+tbl+` WHERE job_id = 'done-1'`), tbl)
	}

	// A put that creates its thread while another transaction creates the same job: its
	// statement waits for that one, then finds, in COMMIT's round trip, a job its snapshot
	// did not see; it fails there and runs again in its own round trips: stored once, 204.
	holder, err := owner.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `INSERT INTO jobs (org_id, job_id, goal, status, owner, metadata, checkpoint_version,
		progress_at, created_at, updated_at) VALUES ('acme', 'race', '', 'running', '', '{"langgraph": true}', 0, now(), now(), now())`)
	require.NoError(t, err)
	var xid string
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))
	status := make(chan *apptest.Response, 1)
	go func() {
		status <- put("race", "c1", `"R"`, append([]string{"Idempotency-Key", "race-1"}, minimal...)...)
	}()
	require.Eventually(t, func() bool { // the put waits for the holder's row
		return count(`SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`, xid) > 0
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, holder.Commit(ctx))
	r = <-status
	require.Equal(t, 204, r.Status, string(r.Body))
	require.Equal(t, 1, count(`SELECT count(*) FROM langgraph_checkpoints WHERE job_id = 'race'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE entity_id = 'race'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM idempotency_keys WHERE key = 'race-1' AND response_status = 204`))
	require.Equal(t, 1, count(`SELECT checkpoint_version FROM jobs WHERE job_id = 'race'`))
}
