package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// gdprFixture writes data for one subject in every tier through the API, each piece of
// content carrying marker, and returns what it wrote (for export completeness).
type gdprFixture struct {
	user, marker, session, job, fork, asset, thread string
	memoryIDs                                       []string
}

func writeSubject(t *testing.T, s *apptest.Server, key, tag string) gdprFixture {
	t.Helper()
	f := gdprFixture{user: "user-" + tag + "-" + testenv.RandomID(3), marker: "MARKER" + strings.ToUpper(tag) + testenv.RandomID(6),
		session: "sess-" + tag, job: "job-" + tag, fork: "job-" + tag + "-fork", asset: "asset-" + tag, thread: "lg-" + tag}
	u, m := f.user, f.marker
	ok := func(r *apptest.Response, want ...int) *apptest.Response {
		t.Helper()
		require.Containsf(t, want, r.Status, "%s", r.Body)
		return r
	}
	idem := func() []string { return []string{"Idempotency-Key", "k-" + testenv.RandomID(8)} }
	// working memory: state and turns
	ok(s.Do("PUT", "/v1/sessions/"+f.session+"/state", key, map[string]any{"state": map[string]any{"note": m}, "user_id": u}, idem()...), 201)
	for i := 0; i < 3; i++ {
		ok(s.Do("POST", "/v1/sessions/"+f.session+"/messages", key, map[string]any{"role": "user", "content": fmt.Sprintf("%s turn %d", m, i), "user_id": u}, idem()...), 201)
	}
	// key-value: a user-level entry written twice (history), and a session-level one for the user
	ok(s.Do("PUT", "/v1/kv/prefs/colour", key, map[string]any{"value": m + "-blue", "user_id": u}, idem()...), 201)
	ok(s.Do("PUT", "/v1/kv/prefs/colour", key, map[string]any{"value": m + "-red", "user_id": u}), 200)
	ok(s.Do("PUT", "/v1/kv/prefs/tone", key, map[string]any{"value": m + "-dry", "user_id": u, "session_id": f.session}), 201)
	ok(s.Do("GET", "/v1/kv/prefs/colour?user_id="+u, key, nil), 200) // fills the cache
	// a job with a step, a checkpoint, events, a handoff, a fork, completion (outbox)
	ok(s.Do("PUT", "/v1/jobs/"+f.job, key, map[string]any{"goal": m + " goal", "user_id": u, "owner": "agent-1"}), 201)
	st := ok(s.Do("POST", "/v1/jobs/"+f.job+"/steps/cut/start", key, map[string]any{"owner": "agent-1", "input": map[string]any{"tool": "cut", "params": map[string]any{"x": m}}}), 200).Map(t)
	ok(s.Do("POST", "/v1/jobs/"+f.job+"/steps/cut/complete", key, map[string]any{"fencing_token": st["fencing_token"], "result": map[string]any{"out": m + " result"}}, idem()...), 200)
	ok(s.Do("POST", "/v1/jobs/"+f.job+"/events", key, map[string]any{"op": "crop", "params": map[string]any{"text": m}, "result": map[string]any{"r": m}, "user_id": u}, idem()...), 201)
	ok(s.Do("PUT", "/v1/jobs/"+f.job+"/checkpoint", key, map[string]any{"goal": m, "state": map[string]any{"s": m}, "working_state": map[string]any{"w": m}, "user_id": u}, "If-Match", `"0"`), 201)
	ok(s.Do("POST", "/v1/jobs/"+f.job+"/handoffs", key, map[string]any{"id": "h1", "from": "agent-1", "to": "agent-2", "context": map[string]any{"c": m}}), 201)
	ok(s.Do("POST", "/v1/jobs/"+f.job+"/checkpoints/1/fork", key, map[string]any{"new_job_id": f.fork}), 201)
	ok(s.Do("POST", "/v1/jobs/"+f.fork+"/events", key, map[string]any{"op": "colour", "params": map[string]any{"text": m + " in fork"}, "user_id": u}), 201)
	ok(s.Do("POST", "/v1/jobs/"+f.fork+"/complete", key, map[string]any{"outcome": map[string]any{"o": m}, "status": "completed"}), 200)
	// an asset produced by the job's event, with a second version
	ok(s.Do("PUT", "/v1/assets/"+f.asset, key, map[string]any{"uri": "s3://bucket/" + m + ".mp4", "user_id": u, "job_id": f.job, "seq": 1,
		"metadata": map[string]any{"title": m}}, idem()...), 201)
	ok(s.Do("POST", "/v1/assets/"+f.asset+"/versions", key, map[string]any{"parent_version": 1, "uri": "s3://bucket/" + m + "-v2.mp4", "user_id": u}), 201)
	// a LangGraph thread (a job of its own) with a checkpoint and a channel blob
	ok(s.Do("POST", "/v1/jobs/"+f.thread+"/langgraph/checkpoints", key, map[string]any{"checkpoint_id": "c1",
		"checkpoint": map[string]any{"v": 1, "id": "c1", "channel_versions": map[string]any{"messages": "1"}},
		"metadata":   map[string]any{"note": m}, "user_id": u,
		"blobs": []map[string]any{{"channel": "messages", "version": "1", "type": "json", "data": base64.StdEncoding.EncodeToString([]byte(`"` + m + `"`))}}}), 200, 201)
	// semantic: a memory, superseded by a patch (two versions), searched (retrieval log)
	mem := ok(s.Do("POST", "/v1/memories", key, map[string]any{"text": m + " likes long walks on the beach", "user_id": u,
		"provenance": map[string]any{"job_id": f.job}}, idem()...), 201).Map(t)
	f.memoryIDs = append(f.memoryIDs, mem["id"].(string))
	mem2 := ok(s.Do("PATCH", "/v1/memories/"+mem["id"].(string), key, map[string]any{"text": m + " likes long walks in the mountains"}, idem()...), 200).Map(t)
	f.memoryIDs = append(f.memoryIDs, mem2["id"].(string))
	ok(s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "walks", "user_id": u}), 200)
	return f
}

func waitErasure(t *testing.T, s *apptest.Server, key, id string) map[string]any {
	t.Helper()
	var last map[string]any
	require.Eventually(t, func() bool {
		r := s.Do("GET", "/v1/gdpr/erasures/"+id, key, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		last = r.Map(t)
		return last["status"] == "completed"
	}, 60*time.Second, 50*time.Millisecond, "erasure did not complete: %v", last)
	return last
}

// scanDatabase counts, per table, the rows of every table in the public schema whose text
// (or any bytea column, decoded) contains needle.
func scanDatabase(t *testing.T, owner *pgx.Conn, needle string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rows, err := owner.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
		AND NOT (SELECT relispartition FROM pg_class WHERE oid = ('public.' || quote_ident(table_name))::regclass)`) // a partition's rows are its parent's
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	found := map[string]int64{}
	for _, tbl := range tables {
		rows, err := owner.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 AND data_type = 'bytea'`, tbl)
		require.NoError(t, err)
		bcols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		cond := `strpos(t::text, $1) > 0`
		for _, c := range bcols {
			cond += ` OR strpos(encode(t.` + c + `, 'escape'), $1) > 0`
		}
		var n int64
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` t WHERE `+cond, needle).Scan(&n))
		if n > 0 {
			found[tbl] = n
		}
	}
	return found
}

// scanRedis returns the keys under prefix whose name or value contains needle (SCAN is fine
// in a test, on the test's own prefix).
func scanRedis(t *testing.T, prefix, needle string) []string {
	t.Helper()
	ctx := context.Background()
	c := testenv.RedisClient(t)
	var hits []string
	keys, err := testenv.RedisKeys(ctx, c, prefix+"*")
	require.NoError(t, err)
	for _, k := range keys {
		var content string
		switch c.Type(ctx, k).Val() {
		case "string":
			content = c.Get(ctx, k).Val()
		case "hash":
			content = fmt.Sprint(c.HGetAll(ctx, k).Val())
		case "list":
			content = fmt.Sprint(c.LRange(ctx, k, 0, -1).Val())
		case "set":
			content = fmt.Sprint(c.SMembers(ctx, k).Val())
		case "zset":
			content = fmt.Sprint(c.ZRange(ctx, k, 0, -1).Val())
		}
		if strings.Contains(k, needle) || strings.Contains(content, needle) {
			hits = append(hits, k)
		}
	}
	return hits
}

func readExport(t *testing.T, body []byte) (header map[string]any, records []map[string]any, summary map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "%s", sc.Text())
		switch {
		case m["type"] == "export" && m["tier"] == nil:
			header = m
		case m["type"] == "summary" && m["tier"] == nil:
			summary = m
		case m["type"] == "error":
			t.Fatalf("export failed: %v", m)
		default:
			records = append(records, m)
		}
	}
	require.NoError(t, sc.Err())
	require.NotNil(t, header)
	require.NotNil(t, summary, "an export ends with its summary line")
	return
}

func countTypes(records []map[string]any) map[string]int {
	out := map[string]int{}
	for _, r := range records {
		out[r["tier"].(string)+"."+r["type"].(string)]++
	}
	return out
}

// TestGDPRErasureEveryTier: a subject with data in every tier (forked job, asset versions,
// superseded memory, idempotency records, Redis state and cache) is exported, then erased;
// afterwards direct SQL over every table (as the owner) and a Redis scan find neither the
// subject's id nor the marker in their content; another subject is untouched; the receipt
// has counts and a clean verification; the audit chain still verifies.
func TestGDPRErasureEveryTier(t *testing.T) {
	t.Parallel()
	// No automatic consolidation: the export counts the completed fork's outbox row
	// unprocessed and no job memory of it.
	s := apptest.Start(t, apptest.Env("STRATA_ERASURE_BATCH", "2"), apptest.Env("STRATA_REQUEST_TIMEOUT", "3s"),
		apptest.NoAutoConsolidation())
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	alice := writeSubject(t, s, agent, "a")
	bob := writeSubject(t, s, agent, "b")
	// alice also acted in bob's job: that event is redacted, bob's job stays.
	r := s.Do("POST", "/v1/jobs/"+bob.job+"/events", agent, map[string]any{"op": "note", "params": map[string]any{"t": alice.marker}, "user_id": alice.user})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	// Export (Art. 15): complete against what was written, and nothing of bob.
	r = s.Do("GET", "/v1/gdpr/exports?user_id="+alice.user, comp, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, "application/x-ndjson", r.Header.Get("Content-Type"))
	require.NotContains(t, string(r.Body), bob.marker)
	require.NotContains(t, string(r.Body), bob.user)
	hdr, recs, sum := readExport(t, r.Body)
	require.Equal(t, alice.user, hdr["user_id"])
	require.EqualValues(t, len(recs), sum["records"])
	types := countTypes(recs)
	for k, want := range map[string]int{"working.session": 1, "working.turn": 3, "jobs.job": 3, "jobs.langgraph_checkpoint": 1,
		"jobs.langgraph_blob": 1, "jobs.step": 2, "jobs.step_attempt": 2, "jobs.handoff": 1,
		"jobs.outbox": 1, "episodic.asset": 1, "episodic.asset_version": 2, "keyvalue.entry": 2, "keyvalue.version": 3,
		"semantic.memory": 2} {
		require.Equalf(t, want, types[k], "%s in %v", k, types)
	}
	require.GreaterOrEqual(t, types["jobs.checkpoint"], 1)
	require.GreaterOrEqual(t, types["episodic.event"], 3, "own job, fork, and the event in bob's job")
	require.GreaterOrEqual(t, types["semantic.retrieval"], 1)
	require.GreaterOrEqual(t, types["idempotency.stored_response"], 1)
	require.GreaterOrEqual(t, types["audit.record"], 10)
	for _, rec := range recs {
		require.Contains(t, rec, "provenance", "%v", rec)
	}
	for k, n := range sum["counts"].(map[string]any) {
		require.EqualValues(t, types[k], n, k)
	}

	// Erase (Art. 17).
	r = s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": alice.user, "reason": "ticket 42"}, "Idempotency-Key", "erase-"+alice.user)
	require.Equal(t, 202, r.Status, "%s", r.Body)
	er := r.Map(t)
	require.Equal(t, "/v1/gdpr/erasures/"+er["id"].(string), r.Header.Get("Location"))
	req, err := time.Parse(time.RFC3339, er["requested_at"].(string))
	require.NoError(t, err)
	dl, err := time.Parse(time.RFC3339, er["deadline"].(string))
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, dl.Sub(req))
	done := waitErasure(t, s, comp, er["id"].(string))
	v := done["verification"].(map[string]any)
	require.Equal(t, true, v["clean"], "%v", v)
	for check, n := range v["remaining"].(map[string]any) {
		require.EqualValues(t, 0, n, check)
	}
	counts := done["counts"].(map[string]any)
	for tier, item := range map[string]string{"working": "turns", "jobs": "jobs", "episodic": "events_deleted", "assets": "assets",
		"keyvalue": "versions", "semantic": "versions", "idempotency": "records"} {
		require.Contains(t, counts, tier)
		require.NotZero(t, counts[tier].(map[string]any)[item], "%s.%s in %v", tier, item, counts)
	}
	require.EqualValues(t, 3, counts["jobs"].(map[string]any)["jobs"], "the job, its fork, the LangGraph thread")
	require.EqualValues(t, 2, counts["jobs"].(map[string]any)["langgraph"], "the thread's checkpoint and blob")
	require.EqualValues(t, 2, counts["jobs"].(map[string]any)["attempts"], "the step's attempt, and its copy in the fork")
	require.EqualValues(t, 1, counts["episodic"].(map[string]any)["events_redacted"], "alice's event in bob's job")
	require.NotContains(t, string(s.Do("GET", "/v1/gdpr/erasures/"+er["id"].(string), comp, nil).Body), alice.user,
		"a completed receipt keeps only the pseudonym")

	// Nothing of alice anywhere: every table, every Redis key.
	owner := testenv.OwnerConn(t, s.DBURL)
	require.Empty(t, scanDatabase(t, owner, alice.marker))
	require.Empty(t, scanDatabase(t, owner, alice.user))
	for _, id := range alice.memoryIDs {
		// The audit trail keeps the erased memories' ids (opaque UUIDs, its entity ids); no
		// other table does.
		found := scanDatabase(t, owner, id)
		delete(found, "audit_log")
		require.Empty(t, found)
	}
	require.Empty(t, scanRedis(t, s.Prefix, alice.marker))
	// Right after the receipt no Redis key name or value carries alice's id either: the
	// key-value tier names users by a keyed hash, and erasure deleted her pending-writer
	// markers (a content-free tombstone keeps late cache fills out for PendingTTL).
	require.Empty(t, scanRedis(t, s.Prefix, alice.user))
	// Nor do metric labels or log lines.
	m := s.Do("GET", "/metrics", s.AdminKey, nil)
	require.Equal(t, 200, m.Status)
	require.NotContains(t, string(m.Body), alice.user)
	require.NotContains(t, s.Logs(), alice.user)

	// Bob is untouched.
	require.NotEmpty(t, scanDatabase(t, owner, bob.marker))
	require.NotEmpty(t, scanRedis(t, s.Prefix, bob.marker))
	require.Equal(t, 200, s.Do("GET", "/v1/sessions/"+bob.session+"/state", agent, nil).Status)
	require.Equal(t, 200, s.Do("GET", "/v1/jobs/"+bob.job+"/resume", agent, nil).Status)
	r = s.Do("GET", "/v1/jobs/"+bob.job+"/events", agent, nil)
	require.Equal(t, 200, r.Status)
	var evs struct{ Items []map[string]any }
	r.JSON(t, &evs)
	require.Len(t, evs.Items, 2, "bob's event and the redacted one: the log stays gap-free")
	require.Equal(t, map[string]any{}, evs.Items[1]["params"])
	for _, id := range bob.memoryIDs {
		require.Equal(t, 200, s.Do("GET", "/v1/memories/"+id, agent, nil).Status)
	}
	r = s.Do("POST", "/v1/memories/search", agent, map[string]any{"query": "walks mountains", "user_id": bob.user})
	require.Contains(t, string(r.Body), bob.marker)
	require.Equal(t, 200, s.Do("GET", "/v1/kv/prefs/colour?user_id="+bob.user, agent, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/kv/prefs/colour?user_id="+alice.user, agent, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/"+alice.session+"/state", agent, nil).Status)

	// The audit trail holds only pseudonyms, so erasure did not touch it and it verifies.
	r = s.Do("GET", "/v1/audit/verify", comp, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, true, r.Map(t)["ok"], "%s", r.Body)
	r = s.Do("GET", "/v1/audit?action=erasure-completed", comp, nil)
	require.Contains(t, string(r.Body), er["id"].(string))

	// An export after erasure holds nothing but the subject's audit records and the receipt.
	r = s.Do("GET", "/v1/gdpr/exports?user_id="+alice.user, comp, nil)
	_, recs, _ = readExport(t, r.Body)
	for _, rec := range recs {
		require.Contains(t, []string{"audit", "gdpr"}, rec["tier"], "%v", rec)
	}
}

func testenvOwner(t *testing.T, s *apptest.Server) *pgx.Conn { return testenv.OwnerConn(t, s.DBURL) }
