package httpapi_test

// The restriction matrix (GDPR Art. 18, issue 57): every operation of the OpenAPI document
// called on a restricted subject's data. A new operation fails TestMatrixRestrictionEveryEndpoint
// until it has an entry in restrictPolicy.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// What an operation must do when it names (or acts on data of) a restricted subject.
const (
	// refuse: 403 (the Art. 18 problem), nothing of the subject's in the answer, nothing
	// written: no row of the org changes, the subject's Redis state is untouched.
	refuse = "refuse"
	// hide: answers (2xx) without the subject's data: a list, a search or a context that
	// leaves it out; nothing written.
	hide = "hide"
	// store: a write that only adds new data for the subject (storage is allowed while
	// restricted): performed, and its answer carries nothing the subject had stored.
	store = "store"
	// unrelated: touches no subject's data (admin, audit, ops): the subject's content never
	// in the answer.
	unrelated = "unrelated"
	// compliance: GDPR routes keep working on a restricted subject.
	compliance = "compliance"
)

// restrictEntry is one operation's expectation; body, when set, replaces the generated body
// (ids the generator cannot know).
type restrictEntry struct {
	expect string
	body   func(f *restrictFixture) map[string]any
	// orgContent: the answer may carry the org's own content that names no subject (the
	// fixture's key names, org-level entities carry the marker too): only the subject's own
	// texts are looked for.
	orgContent bool
	// absent: the fixture holds no such record (a summary, an extraction state): 403, or the
	// answer an unknown record gets (404, an empty list), never data.
	absent bool
}

type restrictFixture struct {
	*fixture
	other string // a graph entity of another subject, related to the fixture's
}

// restrictPolicy is the policy table of docs/compliance.md "Restriction of processing".
var restrictPolicy = map[string]restrictEntry{
	// Key-value: the subject's entry (user_id=user-a) read, overwritten, deleted, restored.
	"get-kv": {expect: refuse}, "kv-history": {expect: refuse}, "list-kv": {expect: refuse}, "batch-get-kv": {expect: refuse},
	"put-kv": {expect: refuse}, "delete-kv": {expect: refuse}, "restore-kv": {expect: refuse},
	// Working memory: sess-a is the subject's session.
	"get-session-state": {expect: refuse}, "put-session-state": {expect: refuse}, "patch-session-state": {expect: refuse},
	"delete-session": {expect: refuse}, "list-session-messages": {expect: refuse}, "pop-session-message": {expect: refuse},
	"get-session-extraction": {expect: refuse, absent: true}, "list-sessions": {expect: hide},
	"post-session-message": {expect: store, body: func(*restrictFixture) map[string]any { // a turn appended: new data
		return map[string]any{"role": "user", "content": "a new turn", "user_id": "user-a"}
	}},
	"get-session-summary": {expect: refuse, absent: true}, "list-session-summary-versions": {expect: refuse, absent: true},
	"get-job-summary": {expect: refuse}, "list-job-summary-versions": {expect: refuse},
	// Episodic log on the subject's job.
	"append-events": {expect: refuse}, "list-events": {expect: refuse}, "event-applied": {expect: refuse}, "revert-event": {expect: refuse},
	// Assets: asset-r is the subject's.
	"put-asset": {expect: refuse}, "get-asset": {expect: refuse}, "add-asset-version": {expect: refuse}, "list-asset-versions": {expect: refuse},
	// Jobs: job-a is the subject's.
	"put-job": {expect: refuse}, "get-job": {expect: refuse}, "list-jobs": {expect: hide}, "complete-job": {expect: refuse},
	"put-checkpoint": {expect: refuse}, "list-checkpoints": {expect: refuse}, "get-checkpoint": {expect: refuse},
	"fork-checkpoint": {expect: refuse}, "start-step": {expect: refuse}, "heartbeat-step": {expect: refuse},
	"complete-step": {expect: refuse}, "fail-step": {expect: refuse}, "clear-step": {expect: refuse}, "get-step": {expect: refuse},
	"list-steps": {expect: refuse}, "list-step-attempts": {expect: refuse}, "resume-job": {expect: refuse},
	"create-handoff": {expect: refuse}, "list-handoffs": {expect: refuse}, "ack-handoff": {expect: refuse},
	// Semantic memory: the subject's memory; new memories for the subject are stored.
	"create-memory": {expect: store}, "create-memories": {expect: store, body: func(f *restrictFixture) map[string]any {
		return map[string]any{"memories": []map[string]any{{"text": "a new fact", "user_id": "user-a"}}}
	}},
	"search-memories": {expect: hide, body: func(*restrictFixture) map[string]any { // a filter on the user: never widened
		return map[string]any{"query": "memory", "user_id": "user-a", "scope_match": "filter"}
	}}, "similar-jobs": {expect: hide}, "list-memories": {expect: hide},
	"get-memory": {expect: refuse}, "update-memory": {expect: refuse, body: func(*restrictFixture) map[string]any {
		return map[string]any{"importance": 0.6}
	}},
	"delete-memory": {expect: refuse}, "memory-history": {expect: refuse}, "verify-memory": {expect: refuse},
	"memory-retrievals": {expect: refuse}, "memory-provenance": {expect: refuse},
	// Extraction reads the subject's stored turns or memories and sends them to a model: refused.
	"extract-memories": {expect: refuse, body: func(*restrictFixture) map[string]any {
		return map[string]any{"session_id": "sess-a"}
	}},
	// Graph: the subject's entity; writes naming the subject are refused (not split).
	"search-graph-entities": {expect: hide, orgContent: true}, "resolve-graph-entity": {expect: refuse}, "get-graph-entity": {expect: refuse},
	"delete-graph-entity": {expect: refuse}, "graph-neighbors": {expect: refuse}, "graph-entity-history": {expect: refuse},
	"merge-graph-entity": {expect: refuse, body: func(f *restrictFixture) map[string]any { return map[string]any{"into": f.other} }},
	"split-graph-entity": {expect: refuse},
	"add-graph-relation": {expect: refuse, body: func(f *restrictFixture) map[string]any {
		return map[string]any{"subject_id": f.other, "predicate": "likes", "object_id": f.graphID}
	}},
	// LangGraph: job-a as a thread.
	"put-langgraph-checkpoint": {expect: refuse}, "put-langgraph-writes": {expect: refuse},
	"get-langgraph-checkpoint": {expect: refuse}, "list-langgraph-checkpoints": {expect: refuse},
	"search-langgraph-checkpoints": {expect: refuse}, "delete-langgraph-thread": {expect: refuse},
	"get-context": {expect: hide, body: func(*restrictFixture) map[string]any {
		return map[string]any{"user_id": "user-a", "job_id": "job-a", "session_id": "sess-a", "query": "memory"}
	}},
	"list-tools": {expect: unrelated},
	// Admin and audit.
	"create-key": {expect: unrelated}, "list-keys": {expect: unrelated, orgContent: true}, "revoke-key": {expect: unrelated, orgContent: true},
	"create-webhook": {expect: unrelated}, "list-webhooks": {expect: unrelated}, "get-webhook": {expect: unrelated},
	"update-webhook": {expect: unrelated}, "delete-webhook": {expect: unrelated}, "list-webhook-deliveries": {expect: unrelated},
	"redeliver-webhook": {expect: unrelated}, "ping-webhook": {expect: unrelated}, "rotate-webhook-secret": {expect: unrelated},
	"list-audit": {expect: unrelated}, "verify-audit": {expect: unrelated}, "anchor-audit": {expect: unrelated},
	"list-audit-anchors": {expect: unrelated}, "export-audit": {expect: unrelated},
	"get-policies": {expect: unrelated}, "put-policies": {expect: unrelated}, "preview-eviction": {expect: unrelated},
	"run-eviction": {expect: unrelated}, "run-consolidation": {expect: unrelated},
	"create-quarantine": {expect: unrelated}, "list-quarantines": {expect: unrelated}, "get-quarantine": {expect: unrelated},
	"list-quarantined-memories": {expect: unrelated}, "release-quarantine": {expect: unrelated}, "purge-quarantine": {expect: unrelated},
	// Compliance.
	"create-erasure": {expect: compliance}, "get-erasure": {expect: compliance}, "list-erasures": {expect: compliance},
	"export-subject": {expect: compliance}, "restrict-subject": {expect: compliance}, "unrestrict-subject": {expect: compliance},
	"get-restriction": {expect: compliance}, "rectify": {expect: compliance},
}

// newRestrictFixture is newFixture's org plus the subject's own key-value entry, asset and a
// related entity of another subject, with user-a restricted.
func newRestrictFixture(t *testing.T, s *apptest.Server, org string) *restrictFixture {
	t.Helper()
	f := &restrictFixture{fixture: newFixture(t, s, org)}
	M := f.marker
	do := func(method, path string, body any, want ...int) map[string]any {
		t.Helper()
		r := s.Do(method, path, f.admin, body)
		require.Contains(t, want, r.Status, "%s %s: %s", method, path, r.Body)
		return r.Map(t)
	}
	do("PUT", "/v1/kv/ns-a/key-a", map[string]any{"value": M + "-1", "user_id": "user-a"}, 201)
	do("PUT", "/v1/kv/ns-a/key-a", map[string]any{"value": M + "-2", "user_id": "user-a"}, 200)
	do("PUT", "/v1/assets/asset-r", map[string]any{"uri": "s3://bucket/" + M, "user_id": "user-a"}, 201)
	do("POST", "/v1/jobs/job-a/steps/step-a/complete", map[string]any{"fencing_token": 1, "result": map[string]any{"m": M}}, 200)
	other := do("POST", "/v1/graph/entities", map[string]any{"name": "someone else", "user_id": "user-b"}, 201)
	f.other = other["id"].(string)
	f.ids["asset"] = "asset-r"
	f.ids["thread_id"] = "job-a"
	comp := s.NewKey(org, "compliance")
	r := s.Do("POST", "/v1/gdpr/restrictions/user-a", comp, map[string]any{"reason": "accuracy contested"})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	return f
}

// restrictRequest is op's call on the subject: the fixture's ids in the path, user-a in
// every user_id the operation accepts (query or body), the entry's body when it has one.
func (f *restrictFixture) restrictRequest(d *apiDoc, op apiOp, e restrictEntry) (string, any, []string) {
	if strings.Contains(op.Path, "{id}") {
		id := map[string]string{"/v1/memories/": f.memID, "/v1/graph/entities/": f.graphID, "/v1/admin/keys/": f.victimKey,
			"/v1/admin/quarantines/": f.quarantine, "/v1/gdpr/erasures/": f.erasure}
		for prefix, v := range id {
			if strings.HasPrefix(op.Path, prefix) && v != "" {
				op.Path = strings.Replace(op.Path, "{id}", v, 1)
			}
		}
		if strings.Contains(op.Path, "/handoffs/{id}") {
			op.Path = strings.Replace(op.Path, "{id}", "handoff-a", 1)
		}
	}
	path, _ := f.pathFor(op, false)
	if e.expect != compliance {
		u, _ := url.Parse(path)
		q := u.Query()
		for _, p := range op.params {
			if p["in"] == "query" {
				switch p["name"] {
				case "user_id":
					q.Set("user_id", "user-a")
				case "thread_id":
					q.Set("thread_id", "job-a")
				}
			}
		}
		u.RawQuery = q.Encode()
		path = u.String()
	}
	if op.body == nil {
		return path, nil, nil
	}
	var body map[string]any
	if e.body != nil {
		body = e.body(f)
	} else {
		body, _ = d.gen(op.body, "", 0).(map[string]any)
		if props, _ := op.body["properties"].(map[string]any); props != nil && e.expect != compliance {
			if _, ok := props["user_id"]; ok {
				body["user_id"] = "user-a"
			}
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return path, string(b), []string{"Content-Type", op.contentType}
}

// redisState is the subject's session in Redis (meta hash without its sliding expiry, and
// the turn buffer).
func redisState(t *testing.T, prefix, org, session string) string {
	t.Helper()
	c, _ := testenv.Redis(t)
	ctx := context.Background()
	base := prefix + "ws:{" + org + "/" + session + "}"
	h, err := c.HGetAll(ctx, base+":m").Result()
	require.NoError(t, err)
	var fields []string
	for k, v := range h {
		if strings.Contains(k, "exp") || strings.Contains(k, "ttl") {
			continue
		}
		fields = append(fields, k+"="+v)
	}
	sort.Strings(fields)
	turns, err := c.LRange(ctx, base+":t", 0, -1).Result()
	require.NoError(t, err)
	return fmt.Sprint(fields, turns)
}

// TestMatrixRestrictionEveryEndpoint: with user-a restricted (Art. 18), every operation on
// user-a's data answers as restrictPolicy says — refused ones write nothing and leak nothing,
// stores answer without the subject's stored content — and an operation without an entry
// fails here.
func TestMatrixRestrictionEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	d := loadAPI(t, s)
	f := newRestrictFixture(t, s, "org-r")
	agent := s.NewKey(f.org, "agent")
	comp := s.NewKey(f.org, "compliance")
	keyFor := func(op apiOp) string {
		if allowedRoles(op.Path)["agent"] {
			return agent
		}
		if allowedRoles(op.Path)["compliance"] {
			return comp
		}
		return f.admin
	}

	var missing []string
	for _, op := range d.ops {
		if _, ok := restrictPolicy[op.ID]; !ok {
			missing = append(missing, op.ID)
		}
	}
	require.Empty(t, missing, "operations without an entry in restrictPolicy (matrix_restrict_test.go): add each, "+
		"with what it must do for a restricted subject (docs/compliance.md)")

	// Refused first, then hidden, against one baseline: none of them may write anything
	// (a hidden read's own audit record aside).
	order := map[string]int{refuse: 0, hide: 1, store: 2, unrelated: 3, compliance: 4}
	ops := append([]apiOp(nil), d.ops...)
	sort.SliceStable(ops, func(i, j int) bool {
		oi, oj := order[restrictPolicy[ops[i].ID].expect], order[restrictPolicy[ops[j].ID].expect]
		if oi != oj {
			return oi < oj
		}
		return ops[i].ID == "restrict-subject" || ops[j].ID == "unrestrict-subject" // lifted last
	})
	conn := testenv.OwnerConn(t, s.DBURL)
	before := restrictSnapshot(t, conn, f.org)
	redisBefore := redisState(t, s.Prefix, f.org, "sess-a")
	for _, op := range ops {
		e := restrictPolicy[op.ID]
		path, body, hdr := f.restrictRequest(d, op, e)
		r := s.Do(op.Method, path, keyFor(op), body, hdr...)
		what := fmt.Sprintf("%s (%s %s, %s)", op.ID, op.Method, path, e.expect)
		if r.Status == 500 {
			t.Errorf("%s: 500: %s", what, r.Body)
			continue
		}
		leaks := []string{f.marker}
		if e.orgContent {
			leaks = []string{"memory " + f.marker, "entity " + f.marker, f.marker + "-"}
		}
		for _, l := range leaks {
			if e.expect != compliance && strings.Contains(string(r.Body), l) {
				t.Errorf("%s: the answer carries the restricted subject's data: %.300s", what, r.Body)
			}
		}
		switch e.expect {
		case refuse:
			if e.absent && (r.Status == 404 || strings.TrimSpace(string(r.Body)) == `{"items":[]}`) {
				break
			}
			if r.Status != 403 || !strings.Contains(string(r.Body), "Art. 18") {
				t.Errorf("%s: want the Art. 18 403, got %d: %.300s", what, r.Status, r.Body)
			}
		case hide:
			if r.Status >= 300 {
				t.Errorf("%s: want 2xx without the subject's data, got %d: %.300s", what, r.Status, r.Body)
			}
		case store:
			if r.Status >= 300 {
				t.Errorf("%s: a store for a restricted subject is allowed, got %d: %.300s", what, r.Status, r.Body)
			}
		case compliance, unrelated:
			if r.Status == 403 || r.Status == 401 {
				t.Errorf("%s: got %d: %.300s", what, r.Status, r.Body)
			}
		}
		if e.expect == refuse || e.expect == hide {
			after := restrictSnapshot(t, conn, f.org)
			if e.expect == hide { // an audited read: its own success record
				after["audit_log"] = before["audit_log"]
			}
			if !assertSame(t, before, after) {
				t.Errorf("%s wrote rows while the subject is restricted", what)
				before = after
			}
			if rs := redisState(t, s.Prefix, f.org, "sess-a"); rs != redisBefore {
				t.Errorf("%s changed the subject's working state in Redis", what)
				redisBefore = rs
			}
		}
	}
}

func assertSame(t *testing.T, before, after map[string]string) bool {
	t.Helper()
	same := true
	for k, v := range before {
		if after[k] != v {
			t.Logf("table %s changed", k)
			same = false
		}
	}
	return same
}

// restrictSnapshot is snapshot (on one connection) with the audit log as its count of
// success records: a refused request may leave its 403 in the log, never a success.
func restrictSnapshot(t *testing.T, conn *pgx.Conn, org string) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND c.column_name = 'org_id' AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT 1 FROM pg_class k WHERE k.oid = ('public.' || quote_ident(c.table_name))::regclass AND k.relispartition)
		ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]string{}
	for _, tbl := range tables {
		var fp string
		switch tbl {
		case "audit_chain_heads", "webhook_cursors":
			continue // moved in the background
		case "audit_log":
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*)::text FROM audit_log WHERE org_id = $1 AND status < 400`, org).Scan(&fp))
		default:
			require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*)::text || ':' || md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))
				FROM %s t WHERE org_id = $1`, tbl), org).Scan(&fp))
		}
		out[tbl] = fp
	}
	return out
}
