package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/mcp"
)

var toolNames = []string{"ack_handoff", "complete_step", "extract_memories", "fail_step", "forget", "get_context", "graph_about", "graph_search", "handoff", "kv_get",
	"kv_set", "log_event", "recall", "remember", "resume_job", "save_checkpoint", "start_step", "update_memory", "was_applied"}

func connect(t *testing.T, s *apptest.Server, key string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "strata-test-agent", Version: "1"}, nil)
	sess, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: key, rt: http.DefaultTransport}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	return sess
}

// callOK calls a tool that must succeed and decodes its JSON answer.
func callOK(t *testing.T, sess *sdk.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res, err := sess.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	text := res.Content[0].(*sdk.TextContent).Text
	require.False(t, res.IsError, "%s: %s", name, text)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &m))
	return m
}

func callErr(t *testing.T, sess *sdk.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := sess.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.True(t, res.IsError, "%s should fail", name)
	return res.Content[0].(*sdk.TextContent).Text
}

// TestMCPAgentProtocolOverTools runs the whole agent protocol through /mcp with the official
// SDK's client: every tool, against the real server, with the REST semantics.
func TestMCPAgentProtocolOverTools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	sess := connect(t, s, key)

	list, err := sess.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	schemas := map[string]map[string]any{}
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		require.NotEmpty(t, tl.Description)
		b, _ := json.Marshal(tl.InputSchema)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		schemas[tl.Name] = m
	}
	sort.Strings(names)
	require.Equal(t, toolNames, names)
	props := func(tool string) map[string]any { return schemas[tool]["properties"].(map[string]any) }
	require.Contains(t, props("start_step"), "owner")
	require.Contains(t, props("start_step")["input"].(map[string]any)["properties"], "params", "nested REST schemas are inlined")
	require.Contains(t, schemas["start_step"]["required"], "owner")
	require.Contains(t, schemas["save_checkpoint"]["required"], "if_match")
	require.Contains(t, props("log_event"), "idempotency_key")
	require.Contains(t, props("recall"), "query")
	require.Equal(t, "integer", props("complete_step")["fencing_token"].(map[string]any)["type"])

	// The same tools as OpenAI function-calling schemas.
	var oa struct {
		Items []mcp.OpenAIFunction `json:"items"`
	}
	r := s.Do("GET", "/v1/tools", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r.JSON(t, &oa)
	require.Len(t, oa.Items, len(toolNames))
	for _, f := range oa.Items {
		require.Equal(t, "function", f.Type)
		b1, _ := json.Marshal(f.Function.Parameters)
		b2, _ := json.Marshal(schemas[f.Function.Name])
		require.JSONEq(t, string(b2), string(b1), f.Function.Name)
	}

	// Jobs are created by whoever starts them (REST); the agent works through the tools.
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/promo-1", key, map[string]any{"goal": "spring promo", "user_id": "u1"}).Status)

	callOK(t, sess, "kv_set", map[string]any{"namespace": "brand", "key": "palette", "value": map[string]any{"lut": "warm-teal"}, "user_id": "u1"})
	kv := callOK(t, sess, "kv_get", map[string]any{"namespace": "brand", "key": "palette", "user_id": "u1", "session_id": "s1"})
	require.Equal(t, "user", kv["level"])
	require.Equal(t, "warm-teal", kv["value"].(map[string]any)["lut"])
	pref := callOK(t, sess, "kv_set", map[string]any{"namespace": "preferences", "key": "captions", "value": "sentence case", "user_id": "u1"})
	callOK(t, sess, "kv_set", map[string]any{"namespace": "preferences", "key": "captions", "value": "title case", "user_id": "u1", "if_match": pref["version"]})
	require.Contains(t, callErr(t, sess, "kv_set", map[string]any{"namespace": "preferences", "key": "captions", "value": "x", "user_id": "u1", "if_match": pref["version"]}), "409")

	mem := callOK(t, sess, "remember", map[string]any{"text": "u1 wants captions burned in", "user_id": "u1", "importance": 0.9,
		"provenance": map[string]any{"job_id": "promo-1"}, "idempotency_key": "mem-1"})
	again := callOK(t, sess, "remember", map[string]any{"text": "u1 wants captions burned in", "user_id": "u1", "importance": 0.9,
		"provenance": map[string]any{"job_id": "promo-1"}, "idempotency_key": "mem-1"})
	require.Equal(t, mem["id"], again["id"], "the same idempotency key replays")
	found := callOK(t, sess, "recall", map[string]any{"query": "captions", "user_id": "u1"})
	require.Equal(t, mem["id"], found["items"].([]any)[0].(map[string]any)["memory"].(map[string]any)["id"])

	// update_memory: a new version through PATCH with If-Match; the superseded version (or
	// a stale if_match) is refused with 409 and nothing is written.
	upd := callOK(t, sess, "update_memory", map[string]any{"id": mem["id"], "if_match": mem["version"],
		"text": "u1 wants captions burned in, sentence case", "importance": 0.8})
	require.NotEqual(t, mem["id"], upd["id"])
	require.EqualValues(t, 2, upd["version"])
	require.Equal(t, mem["root_id"], upd["root_id"])
	require.Contains(t, callErr(t, sess, "update_memory", map[string]any{"id": mem["id"], "if_match": mem["version"], "text": "stale"}), "409")
	require.Contains(t, callErr(t, sess, "update_memory", map[string]any{"id": upd["id"], "if_match": 1, "text": "stale"}), "409")
	mem = upd

	ctxr := callOK(t, sess, "get_context", map[string]any{"user_id": "u1", "job_id": "promo-1", "query": "captions",
		"kv_namespaces": []string{"brand", "preferences"}})
	require.Contains(t, ctxr["prompt"], "u1 wants captions burned in")
	require.Contains(t, ctxr["prompt"], `brand/palette = {"lut":"warm-teal"} (user)`)

	res := callOK(t, sess, "resume_job", map[string]any{"job": "promo-1", "events": 5})
	require.EqualValues(t, 0, res["job"].(map[string]any)["checkpoint_version"])

	claim := callOK(t, sess, "start_step", map[string]any{"job": "promo-1", "step": "cut", "owner": "editor",
		"lease_seconds": 120, "input": map[string]any{"tool": "ffmpeg", "params": map[string]any{"in": 0, "out": 30}}})
	require.Equal(t, "claimed", claim["status"])
	token := claim["fencing_token"]
	params := map[string]any{"in": 0, "out": 30}
	ap := callOK(t, sess, "was_applied", map[string]any{"job": "promo-1", "op": "video.cut", "params": params})
	require.Equal(t, false, ap["applied"])
	ev := callOK(t, sess, "log_event", map[string]any{"job": "promo-1", "op": "video.cut", "params": params,
		"result": map[string]any{"asset": "cut.mp4"}, "idempotency_key": "cut:render", "agent_id": "editor"})
	require.EqualValues(t, 1, ev["seq"])
	require.Equal(t, "cut:render", ev["idempotency_key"], "the per-event key stays in the body")
	ev2 := callOK(t, sess, "log_event", map[string]any{"job": "promo-1", "op": "video.cut", "params": params,
		"result": map[string]any{"asset": "cut.mp4"}, "idempotency_key": "cut:render", "agent_id": "editor"})
	require.Equal(t, true, ev2["replayed"], "a retried log_event is not recorded twice")
	ap = callOK(t, sess, "was_applied", map[string]any{"job": "promo-1", "op": "video.cut", "params": params})
	require.Equal(t, true, ap["applied"])
	callOK(t, sess, "complete_step", map[string]any{"job": "promo-1", "step": "cut", "fencing_token": token, "result": map[string]any{"asset": "cut.mp4"}})
	done := callOK(t, sess, "start_step", map[string]any{"job": "promo-1", "step": "cut", "owner": "someone-else"})
	require.Equal(t, "completed", done["status"], "a finished step is never run again")
	require.Equal(t, "cut.mp4", done["result"].(map[string]any)["asset"])

	cp := callOK(t, sess, "save_checkpoint", map[string]any{"job": "promo-1", "if_match": 0, "current_step": "colour",
		"done": []string{"cut"}, "pending": []string{"colour"}, "next_action": "grade to the brand LUT", "state": map[string]any{"lut": "warm-teal"}})
	require.EqualValues(t, 1, cp["version"])
	stale := callErr(t, sess, "save_checkpoint", map[string]any{"job": "promo-1", "if_match": 0, "next_action": "x"})
	require.Contains(t, stale, "409")

	c2 := callOK(t, sess, "start_step", map[string]any{"job": "promo-1", "step": "colour", "owner": "editor"})
	failed := callOK(t, sess, "fail_step", map[string]any{"job": "promo-1", "step": "colour", "fencing_token": c2["fencing_token"],
		"error": "LUT missing", "disposition": "retryable"})
	require.Equal(t, "failed", failed["status"])
	bad := callErr(t, sess, "fail_step", map[string]any{"job": "promo-1", "step": "colour", "fencing_token": c2["fencing_token"],
		"error": "x", "disposition": "later"})
	require.Contains(t, bad, "body.disposition", "REST validation errors reach the model")

	h := callOK(t, sess, "handoff", map[string]any{"job": "promo-1", "id": "h1", "from": "editor", "to": "colourist",
		"context": map[string]any{"why": "needs grading"}})
	require.Equal(t, "pending", h["status"])
	ack := callOK(t, sess, "ack_handoff", map[string]any{"job": "promo-1", "id": "h1", "agent_id": "colourist"})
	require.Equal(t, "colourist", ack["job"].(map[string]any)["owner"])

	callOK(t, sess, "forget", map[string]any{"id": mem["id"]})
	require.Equal(t, 404, s.Do("GET", "/v1/memories/"+mem["id"].(string), key, nil).Status)

	// Every tool call was a REST request of its own: audited with the caller's key.
	var audit struct {
		Items []struct {
			Action string `json:"action"`
		} `json:"items"`
	}
	a := s.Do("GET", "/v1/audit?action=start-step", s.NewKey("acme", "admin"), nil)
	require.Equal(t, 200, a.Status, string(a.Body))
	a.JSON(t, &audit)
	require.Len(t, audit.Items, 3)
}

func TestMCPNeedsAKey(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	r := s.Do("POST", "/mcp", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
	require.Equal(t, 401, r.Status)
	r = s.Do("POST", "/mcp", "sk_nope", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
	require.Equal(t, 401, r.Status)

	// Another org's key sees nothing of acme through the tools.
	key := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j1", key, map[string]any{}).Status)
	other := connect(t, s, s.NewKey("globex", "agent"))
	require.Contains(t, callErr(t, other, "resume_job", map[string]any{"job": "j1"}), "404")
	// A compliance key may not use agent tools.
	comp := connect(t, s, s.NewKey("acme", "compliance"))
	require.Contains(t, callErr(t, comp, "resume_job", map[string]any{"job": "j1"}), "403")
}

// TestMCPGraphTools: graph_search finds an entity by alias and graph_about reads its
// relations in force, through /mcp with the caller's key.
func TestMCPGraphTools(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	ent := func(body map[string]any) string {
		r := s.Do("POST", "/v1/graph/entities", key, body)
		require.Equal(t, 201, r.Status, "%s", r.Body)
		return r.Map(t)["id"].(string)
	}
	ana := ent(map[string]any{"name": "Ana Silva", "aliases": []string{"Ana"}, "user_id": "u1"})
	store := ent(map[string]any{"name": "Lisbon store", "user_id": "u1"})
	r := s.Do("POST", "/v1/graph/relations", key, map[string]any{"subject_id": ana, "predicate": "manages", "object_id": store, "user_id": "u1"})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	sess := connect(t, s, key)
	found := callOK(t, sess, "graph_search", map[string]any{"q": "Ana", "user_id": "u1"})
	first := found["items"].([]any)[0].(map[string]any)
	require.Equal(t, ana, first["entity"].(map[string]any)["id"])
	about := callOK(t, sess, "graph_about", map[string]any{"id": ana})
	rels := about["relations"].([]any)
	require.Len(t, rels, 1)
	require.Equal(t, "Lisbon store", rels[0].(map[string]any)["object_name"])
	require.Contains(t, callErr(t, sess, "graph_about", map[string]any{"id": ana, "as_of": "yesterday"}), "as_of")
}
