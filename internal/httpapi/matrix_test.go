package httpapi_test

// Isolation and role matrices over every operation of the OpenAPI document: a new endpoint
// is covered by being registered. Request bodies are generated from the operation's schema
// (required fields, valid values), path ids come from a fixture org.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// apiOp is one operation of the OpenAPI document.
type apiOp struct {
	ID, Method, Path string
	params           []map[string]any
	body             map[string]any // request body schema (resolved), nil when none
	contentType      string
}

type apiDoc struct {
	ops     []apiOp
	schemas map[string]any
}

func loadAPI(t *testing.T, s *apptest.Server) *apiDoc {
	t.Helper()
	r := s.Do("GET", "/openapi.json", "", nil)
	require.Equal(t, 200, r.Status)
	return parseAPI(t, r.Body)
}

func parseAPI(t testing.TB, raw []byte) *apiDoc {
	var doc struct {
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	d := &apiDoc{schemas: doc.Components.Schemas}
	for path, item := range doc.Paths {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for method, op := range item {
			o := apiOp{ID: fmt.Sprint(op["operationId"]), Method: strings.ToUpper(method), Path: path}
			if o.ID == "stream-events" {
				// The SSE stream never ends by itself, so a request/answer matrix cannot
				// drive it; webhooks_test.go checks its auth, isolation and bad input.
				continue
			}
			if ps, ok := op["parameters"].([]any); ok {
				for _, p := range ps {
					o.params = append(o.params, p.(map[string]any))
				}
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				for ct, c := range rb["content"].(map[string]any) {
					o.contentType = ct
					o.body = d.resolve(c.(map[string]any)["schema"].(map[string]any))
				}
			}
			d.ops = append(d.ops, o)
		}
	}
	sort.Slice(d.ops, func(i, j int) bool { return d.ops[i].Path+d.ops[i].Method < d.ops[j].Path+d.ops[j].Method })
	require.Greater(t, len(d.ops), 40)
	return d
}

func (d *apiDoc) resolve(s map[string]any) map[string]any {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		s = d.schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
	}
}

var idPattern = regexp.MustCompile(`^\^\[A-Za-z0-9\._:-\]`)

// gen makes a valid value for schema s. str, when set, fills free-text strings (no
// pattern, enum or format) and free-form objects, for the verbatim test.
func (d *apiDoc) gen(s map[string]any, str string, depth int) any {
	s = d.resolve(s)
	if one, ok := s["oneOf"].([]any); ok {
		return d.gen(one[0].(map[string]any), str, depth)
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ := s["type"]
	if ts, ok := typ.([]any); ok {
		typ = ts[0]
	}
	switch typ {
	case "string":
		pat, _ := s["pattern"].(string)
		switch {
		case s["format"] == "date-time":
			return time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
		case strings.Contains(pat, "{64}"):
			return strings.Repeat("a", 64)
		case strings.Contains(pat, "{8}-"), strings.Contains(pat, "{36}"):
			return uuid.Must(uuid.NewV7()).String()
		case idPattern.MatchString(pat):
			return "gen-1"
		case pat != "":
			return "x"
		case str != "":
			return str
		}
		n := 1
		if m, ok := s["minLength"].(float64); ok && m > 1 {
			n = int(m)
		}
		return strings.Repeat("g", n)
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok && m > 1 {
			return m
		}
		return 1
	case "boolean":
		return false
	case "array":
		if m, ok := s["minItems"].(float64); ok && m > 0 && depth < 4 {
			it, _ := s["items"].(map[string]any)
			return []any{d.gen(it, str, depth+1)}
		}
		return []any{}
	case "object", nil:
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 && str != "" {
			return map[string]any{str: str, "n": []any{str, 1, true, nil}}
		}
		req := map[string]bool{}
		if rs, ok := s["required"].([]any); ok {
			for _, r := range rs {
				req[r.(string)] = true
			}
		}
		for name, p := range props {
			ps := d.resolve(p.(map[string]any))
			if req[name] || (str != "" && depth < 3 && isFree(ps)) {
				out[name] = d.gen(ps, str, depth+1)
			}
		}
		return out
	}
	return nil
}

// isFree: a free-text string or free-form JSON field (where arbitrary content is stored).
func isFree(s map[string]any) bool {
	if _, ok := s["enum"]; ok {
		return false
	}
	if s["type"] == "string" {
		return s["pattern"] == nil && s["format"] == nil
	}
	return s["type"] == nil && s["$ref"] == nil && s["oneOf"] == nil
}

// fixture is an org with one of everything, every content field carrying marker.
type fixture struct {
	org, admin, marker string
	ids                map[string]string // path parameter → id
	victimKey          string            // a key id that revoke-key may revoke
	memID, quarantine  string
	graphID            string // a graph entity (with a relation)
	erasure            string // an erasure request id, when the API has erasures
}

func newFixture(t *testing.T, s *apptest.Server, org string) *fixture {
	t.Helper()
	f := &fixture{org: org, admin: s.NewKey(org, "admin"), marker: "SECRET-" + org + "-" + testenv.RandomID(4)}
	M := f.marker
	do := func(method, path string, body any, want ...int) map[string]any {
		r := s.Do(method, path, f.admin, body)
		require.Contains(t, want, r.Status, "%s %s: %s", method, path, r.Body)
		return r.Map(t)
	}
	do("PUT", "/v1/sessions/sess-a/state", map[string]any{"state": map[string]any{"secret": M}, "user_id": "user-a"}, 200, 201)
	do("POST", "/v1/sessions/sess-a/messages", map[string]any{"role": "user", "content": M}, 200, 201)
	do("PUT", "/v1/jobs/job-a", map[string]any{"goal": M, "user_id": "user-a"}, 201)
	do("POST", "/v1/jobs/job-a/steps/step-a/start", map[string]any{"owner": "owner-a", "input": map[string]any{"params": map[string]any{"m": M}}}, 200)
	do("POST", "/v1/jobs/job-a/events", map[string]any{"op": "render", "params": map[string]any{"m": M}, "result": M}, 201)
	do("PUT", "/v1/jobs/job-a/checkpoint", map[string]any{"state": map[string]any{"m": M}, "next_action": M}, 201)
	do("POST", "/v1/jobs/job-a/handoffs", map[string]any{"from": "a1", "to": "a2", "id": "handoff-a", "context": map[string]any{"m": M}}, 201)
	do("PUT", "/v1/assets/asset-a", map[string]any{"uri": "s3://bucket/" + M}, 200, 201)
	mem := do("POST", "/v1/memories", map[string]any{"text": "memory " + M, "user_id": "user-a"}, 201)
	do("PUT", "/v1/kv/ns-a/key-a", map[string]any{"value": M}, 200, 201)
	ent := do("POST", "/v1/graph/entities", map[string]any{"name": "entity " + M, "summary": M, "user_id": "user-a"}, 201)
	other := do("POST", "/v1/graph/entities", map[string]any{"name": "other " + M}, 201)
	do("POST", "/v1/graph/relations", map[string]any{"subject_id": ent["id"], "predicate": "knows", "object_id": other["id"],
		"fact": M, "user_id": "user-a"}, 201)
	f.graphID = ent["id"].(string)
	q := do("POST", "/v1/admin/quarantines", map[string]any{"agent_id": "nobody", "since": time.Now().UTC()}, 201)
	vk := do("POST", "/v1/admin/keys", map[string]any{"role": "agent", "name": M}, 201)
	f.memID, f.quarantine, f.victimKey = mem["id"].(string), q["id"].(string), vk["id"].(string)
	if r := s.Do("POST", "/v1/gdpr/erasures", f.admin, map[string]any{"user_id": "user-gone"}); r.Status < 300 {
		f.erasure, _ = r.Map(t)["id"].(string)
		// It runs in the background: wait until it is done, so org A holds still.
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := s.Do("GET", "/v1/gdpr/erasures/"+f.erasure, f.admin, nil).Map(t)["status"]
			if st == "completed" || st == "failed" {
				break
			}
			require.True(t, time.Now().Before(deadline), "erasure still %v", st)
			time.Sleep(20 * time.Millisecond) // kept: polls the public API for background work (end to end through app.Run; River's events are not reachable from here)
		}
	}
	f.ids = map[string]string{"session": "sess-a", "job": "job-a", "step": "step-a", "asset": "asset-a",
		"namespace": "ns-a", "key": "key-a", "seq": "1", "version": "1", "user": "user-a"}
	return f
}

// pathFor fills op's path with the fixture's ids (missing=false) or fresh ids that exist
// nowhere (missing=true). It returns the path and the ids used.
func (f *fixture) pathFor(op apiOp, missing bool) (string, []string) {
	var used []string
	path := regexp.MustCompile(`\{([a-z_]+)\}`).ReplaceAllStringFunc(op.Path, func(m string) string {
		name := strings.Trim(m, "{}")
		v, ok := f.ids[name]
		if name == "id" {
			ok = true // one of the fixture's ids below, unless none fits
			switch {
			case strings.HasPrefix(op.Path, "/v1/memories/"):
				v = f.memID
			case strings.HasPrefix(op.Path, "/v1/admin/keys/"):
				v = f.victimKey
			case strings.HasPrefix(op.Path, "/v1/graph/entities/"):
				v = f.graphID
			case strings.HasPrefix(op.Path, "/v1/admin/quarantines/"):
				v = f.quarantine
			case strings.Contains(op.Path, "/handoffs/"):
				v = "handoff-a"
			case strings.HasPrefix(op.Path, "/v1/gdpr/erasures/") && f.erasure != "":
				v = f.erasure
			default:
				ok = false
			}
		}
		if !ok {
			// An id this fixture does not make: a valid value of the parameter's schema.
			v = name + "-a"
			for _, p := range op.params {
				if p["in"] == "path" && p["name"] == name {
					if g, isStr := (&apiDoc{}).gen(p["schema"].(map[string]any), "", 1).(string); isStr && g != "gen-1" {
						v = g
					}
				}
			}
		}
		if missing {
			switch {
			case v == "1":
			case len(v) == 36 && strings.Count(v, "-") == 4:
				v = uuid.Must(uuid.NewV7()).String()
			default:
				v = "zz-" + testenv.RandomID(5)
			}
		}
		if v != "1" {
			used = append(used, v)
		}
		return url.PathEscape(v)
	})
	// Required query parameters (e.g. a data subject): the fixture's, or fresh ones.
	q := url.Values{}
	for _, p := range op.params {
		if p["in"] != "query" || p["required"] != true {
			continue
		}
		name := p["name"].(string)
		v := fmt.Sprint((&apiDoc{}).gen(p["schema"].(map[string]any), "", 1))
		if name == "user_id" {
			v = "user-a"
			if missing {
				v = "zz-" + testenv.RandomID(5)
			}
			used = append(used, v)
		}
		q.Set(name, v)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return path, used
}

func (d *apiDoc) request(op apiOp, str string) (any, []string) {
	if op.body == nil {
		return nil, nil
	}
	b, err := json.Marshal(d.gen(op.body, str, 0))
	if err != nil {
		panic(err)
	}
	return string(b), []string{"Content-Type", op.contentType}
}

// snapshot fingerprints every tenant table's rows of org (the audit log by its count and
// actions: the chainer fills chain columns in the background).
func snapshot(t *testing.T, dsn, org string) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn := testenv.OwnerConn(t, dsn)
	rows, err := conn.Query(ctx, `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND c.column_name = 'org_id' AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT 1 FROM pg_class k WHERE k.oid = ('public.' || quote_ident(c.table_name))::regclass AND k.relispartition)
		ORDER BY 1`) // a partition's rows are its parent's
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	out := map[string]string{}
	for _, tbl := range tables {
		expr := "t::text"
		switch tbl {
		case "audit_chain_heads":
			continue // moved by the chainer in the background
		case "webhook_cursors":
			continue // the webhook dispatcher's read position, moved in the background as it reads the outbox
		case "audit_log":
			expr = "t.action || t.entity_type || coalesce(t.entity_id, '')" // chain columns filled in the background
		}
		var fp string
		require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*)::text || ':' || md5(coalesce(string_agg(%s, '|' ORDER BY %s), ''))
			FROM %s t WHERE org_id = $1`, expr, expr, tbl), org).Scan(&fp))
		out[tbl] = fp
	}
	return out
}

// shape is what a response reveals besides content: status, problem detail and error
// locations (ids replaced), or the top-level keys of a success body.
func shape(r *apptest.Response, ids []string) string {
	body := string(r.Body)
	for _, id := range ids {
		body = strings.ReplaceAll(body, id, "<ID>")
	}
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) != nil {
		// A stream of JSON lines (an export): the kinds of line, in order.
		var kinds []string
		for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) != nil {
				return fmt.Sprintf("%d %s", r.Status, body)
			}
			kinds = append(kinds, fmt.Sprint(l["type"], "/", l["tier"]))
		}
		return fmt.Sprintf("%d lines %v", r.Status, kinds)
	}
	if r.Status >= 400 {
		var locs []string
		if errs, ok := m["errors"].([]any); ok {
			for _, e := range errs {
				locs = append(locs, fmt.Sprint(e.(map[string]any)["location"], ":", e.(map[string]any)["message"]))
			}
		}
		return fmt.Sprintf("%d %v %v %v", r.Status, m["title"], m["detail"], locs)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%d %v", r.Status, keys)
}

func TestMatrixIsolationEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	d := loadAPI(t, s)
	a := newFixture(t, s, "org-a")
	before := snapshot(t, s.DBURL, a.org)
	stateBefore := s.Do("GET", "/v1/sessions/sess-a/state", a.admin, nil)
	require.Equal(t, 200, stateBefore.Status)

	for i, op := range d.ops {
		// A fresh org per operation, so one call's writes cannot change the next one's answer.
		b := s.NewKey(fmt.Sprintf("org-b%d", i), "admin")
		body, hdr := d.request(op, "")
		pathA, idsA := a.pathFor(op, false)
		pathM, idsM := a.pathFor(op, true)
		ra := s.Do(op.Method, pathA, b, body, hdr...)
		require.NotEqual(t, 500, ra.Status, "%s %s: %s", op.Method, pathA, ra.Body)
		require.NotContains(t, string(ra.Body), a.marker, "%s leaked org A's content", op.ID)
		if len(idsA) == 0 {
			continue // no ids in the path: the call is about B's own org (checked for leaks above)
		}
		rm := s.Do(op.Method, pathM, b, body, hdr...)
		require.Equal(t, shape(rm, idsM), shape(ra, idsA),
			"%s: org B with org A's ids must get exactly what a missing id gets\nA's ids: %s\nmissing: %s", op.ID, ra.Body, rm.Body)
		if ra.Status < 300 && op.Method == "GET" {
			t.Logf("%s answers 2xx for an unknown id (an empty list or a default): %s", op.ID, shape(ra, idsA))
		}
	}
	require.Equal(t, before, snapshot(t, s.DBURL, a.org), "org A's rows changed")
	stateAfter := s.Do("GET", "/v1/sessions/sess-a/state", a.admin, nil)
	sb, sa := stateBefore.Map(t), stateAfter.Map(t)
	delete(sb, "expires_at") // sliding TTL: A's own reads extend it
	delete(sa, "expires_at")
	require.Equal(t, sb, sa, "org A's working state changed")
	r := s.Do("GET", "/v1/kv/ns-a/key-a", a.admin, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, a.marker, r.Map(t)["value"])
}

// allowedRoles is the access policy, independent of the code: admin endpoints are for
// admins, audit and GDPR for compliance officers (and admins), everything else for agents
// (and admins), with the exceptions named here.
func allowedRoles(path string) map[string]bool {
	switch {
	case path == "/v1/jobs/{job}/steps/{step}/clear":
		// Releasing a step parked for manual review is an operator's decision (docs/jobs.md).
		return map[string]bool{"admin": true}
	case strings.HasPrefix(path, "/v1/admin/"):
		return map[string]bool{"admin": true}
	case strings.HasPrefix(path, "/v1/graph/entities/") && (strings.HasSuffix(path, "/merge") || strings.HasSuffix(path, "/split")):
		// Merging and splitting entities rewrites what every agent reads: an admin's call (issue 43).
		return map[string]bool{"admin": true}
	case path == "/v1/audit" || strings.HasPrefix(path, "/v1/audit/") || strings.HasPrefix(path, "/v1/gdpr/"):
		return map[string]bool{"compliance": true, "admin": true}
	}
	return map[string]bool{"agent": true, "admin": true}
}

func TestMatrixRolesEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	d := loadAPI(t, s)
	c := newFixture(t, s, "org-c")
	// Restricting the fixture's subject (Art. 18) would refuse the agent's later reads of
	// it with 403: the role matrix restricts another subject.
	c.ids["user"] = "user-other"
	keys := map[string]string{"agent": s.NewKey(c.org, "agent"), "compliance": s.NewKey(c.org, "compliance"), "admin": c.admin}
	revokedSecret, revokedID := keyWithID(t, s, c.admin, "admin")
	require.Equal(t, 200, s.Do("GET", "/v1/admin/keys", revokedSecret, nil).Status)
	require.Equal(t, 200, s.Do("DELETE", "/v1/admin/keys/"+revokedID, c.admin, nil).Status)

	// Refused first: wrong roles, a revoked key, no key, an unknown key. None may write.
	before := snapshot(t, s.DBURL, c.org)
	matrix := map[string][]string{}
	for _, op := range d.ops {
		body, hdr := d.request(op, "")
		path, _ := c.pathFor(op, false)
		allowed := allowedRoles(op.Path)
		for _, role := range []string{"agent", "compliance", "admin"} {
			mark := "allow"
			if !allowed[role] {
				mark = "deny"
				r := s.Do(op.Method, path, keys[role], body, hdr...)
				require.Equal(t, 403, r.Status, "%s with a %s key: %s", op.ID, role, r.Body)
				requireProblem(t, r, 403, "")
			}
			matrix[op.ID] = append(matrix[op.ID], role+"="+mark)
		}
		for name, key := range map[string]string{"revoked": revokedSecret, "unknown": "sk_" + testenv.RandomID(16), "none": ""} {
			r := s.Do(op.Method, path, key, body, hdr...)
			require.Equal(t, 401, r.Status, "%s with a %s key: %s", op.ID, name, r.Body)
		}
	}
	require.Equal(t, before, snapshot(t, s.DBURL, c.org), "a refused request wrote something")

	// Then allowed: never 401/403 (may be 404/409/422 as the fixture's state moves on).
	for _, op := range d.ops {
		body, hdr := d.request(op, "")
		path, _ := c.pathFor(op, false)
		for role, ok := range allowedRoles(op.Path) {
			if !ok {
				continue
			}
			r := s.Do(op.Method, path, keys[role], body, hdr...)
			require.NotContains(t, []int{401, 403, 500}, r.Status, "%s with a %s key: %s", op.ID, role, r.Body)
		}
	}
	t.Logf("role matrix over %d operations: %v", len(d.ops), matrix)
}

// nasty strings: SQL metacharacters, LIKE wildcards, placeholders, quotes and backslashes,
// and Unicode edge cases (astral planes, ZWJ sequences, combining marks in NFD next to NFC,
// bidi overrides, BOM, line/paragraph separators, noncharacters).
var nastyStrings = []string{
	`Robert'); DROP TABLE memories; -- " OR 1=1 -- %_\ $1 :name ?`,
	"e\u0301 \u00e9 \U0001D573\U0001D58A 👩\u200d👩\u200d👧\u200d👦 \u202egnp.exe \ufeffbom \u2028\u2029 \U0010FFFD 𠜎 \\u0000 日本語",
}

func TestMatrixStringsStoredVerbatim(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	d := loadAPI(t, s)
	for n, str := range nastyStrings {
		org := fmt.Sprintf("org-v%d", n)
		f := newFixture(t, s, org)
		// Restricting the fixture's subject (Art. 18) would refuse the writes that follow on
		// their job, session and memory: the restriction here names another subject.
		f.ids["user"] = "user-other"
		checked := 0
		for _, op := range d.ops {
			if op.body == nil || !writes(op.Method) {
				continue
			}
			body, hdr := d.request(op, str)
			if !strings.Contains(body.(string), jsonString(str)) {
				continue // no free-text field
			}
			path, _ := f.pathFor(op, false)
			r := s.Do(op.Method, path, f.admin, body, hdr...)
			require.NotEqual(t, 500, r.Status, "%s: %s", op.ID, r.Body)
			if r.Status >= 300 {
				continue // refused for the fixture's state (e.g. a stale fencing token): nothing stored
			}
			// Stored verbatim: the answer, or a read of the same path, carries it unchanged.
			found := containsString(t, r.Body, str)
			if !found && op.Method != "GET" {
				if g := s.Do("GET", path, f.admin, nil); g.Status == 200 {
					found = containsString(t, g.Body, str)
				}
			}
			if found {
				checked++
			} else {
				t.Logf("%s stored a free-text field without echoing it; checked in the database below", op.ID)
			}
		}
		require.GreaterOrEqual(t, checked, 8, "operations whose free-text fields were read back verbatim")
		// The database holds the exact code points (no normalisation, no escaping).
		var hits int
		require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM memories WHERE org_id = $1 AND text = $2)
			      + (SELECT count(*) FROM kv_entries WHERE org_id = $1 AND value @> to_jsonb($2::text))`, org, str).Scan(&hits))
		require.Positive(t, hits)
	}
}

func writes(m string) bool { return m == "POST" || m == "PUT" || m == "PATCH" }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

// containsString reports whether any string or object key in the JSON document equals s.
func containsString(t *testing.T, doc []byte, s string) bool {
	t.Helper()
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return x == s
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for k, e := range x {
				if k == s || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
