package mcp_test

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestMCPToolsRestrictedSubject: the tools are the REST operations, so an Art. 18
// restriction holds through /mcp too (issue 57): every tool that reads or acts on the
// restricted subject's stored data is refused with the 403 and carries none of it; storing
// new data for the subject (remember, a new kv entry) still works and answers nothing stored.
func TestMCPToolsRestrictedSubject(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	const user, marker = "u-restricted", "MCPSECRET4711"
	ok := func(r *apptest.Response, want int) map[string]any {
		t.Helper()
		require.Equal(t, want, r.Status, "%s", r.Body)
		return r.Map(t)
	}
	ok(s.Do("PUT", "/v1/jobs/job-r", key, map[string]any{"goal": marker + " goal", "user_id": user}), 201)
	st := ok(s.Do("POST", "/v1/jobs/job-r/steps/cut/start", key, map[string]any{"owner": "editor"}), 200)
	ok(s.Do("POST", "/v1/jobs/job-r/steps/cut/complete", key, map[string]any{"fencing_token": st["fencing_token"],
		"result": map[string]any{"out": marker}}), 200)
	ok(s.Do("POST", "/v1/jobs/job-r/handoffs", key, map[string]any{"id": "h1", "from": "a", "to": "b", "context": map[string]any{"c": marker}}), 201)
	mem := ok(s.Do("POST", "/v1/memories", key, map[string]any{"text": marker + " likes walks", "user_id": user}), 201)
	ok(s.Do("PUT", "/v1/kv/prefs/colour", key, map[string]any{"value": marker, "user_id": user}), 201)
	ok(s.Do("POST", "/v1/gdpr/restrictions/"+user, comp, nil), 201)

	sess := connect(t, s, key)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"update_memory", map[string]any{"id": mem["id"], "if_match": mem["version"], "importance": 0.6}},
		{"forget", map[string]any{"id": mem["id"]}},
		{"start_step", map[string]any{"job": "job-r", "step": "cut", "owner": "someone-else"}},
		{"complete_step", map[string]any{"job": "job-r", "step": "cut", "fencing_token": st["fencing_token"], "result": map[string]any{}}},
		{"fail_step", map[string]any{"job": "job-r", "step": "cut", "fencing_token": st["fencing_token"], "error": "x", "disposition": "retryable"}},
		{"save_checkpoint", map[string]any{"job": "job-r", "if_match": 0, "next_action": "x"}},
		{"handoff", map[string]any{"job": "job-r", "id": "h2", "from": "a", "to": "b"}},
		{"ack_handoff", map[string]any{"job": "job-r", "id": "h1", "agent_id": "b"}},
		{"log_event", map[string]any{"job": "job-r", "op": "crop", "params": map[string]any{}}},
		{"resume_job", map[string]any{"job": "job-r"}},
		{"kv_get", map[string]any{"namespace": "prefs", "key": "colour", "user_id": user}},
		{"kv_set", map[string]any{"namespace": "prefs", "key": "colour", "value": "overwritten", "user_id": user}},
		{"extract_memories", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "user_id": user}},
	} {
		msg := callErr(t, sess, c.tool, c.args)
		require.Contains(t, msg, "403", "%s: %s", c.tool, msg)
		require.Contains(t, msg, "Art. 18", "%s: %s", c.tool, msg)
		require.NotContains(t, msg, marker, "%s", c.tool)
	}
	// Searches and the context leave the subject out; new data is stored.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"recall", map[string]any{"query": "walks", "user_id": user}},
		{"get_context", map[string]any{"user_id": user, "job_id": "job-r", "query": "walks"}},
		{"remember", map[string]any{"text": "a new fact about the subject", "user_id": user}},
		{"kv_set", map[string]any{"namespace": "prefs", "key": "new-key", "value": "new", "user_id": user}},
	} {
		require.NotContains(t, callOKText(t, sess, c.tool, c.args), marker, c.tool)
	}
	// Nothing of the subject's changed: the memory and the entry are as they were.
	r := s.Do("GET", "/v1/gdpr/exports?user_id="+user, comp, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), `"`+marker+`"`, "the kv value is unchanged")
	require.NotContains(t, string(r.Body), "overwritten")
}

// callOKText calls a tool that must succeed and returns its text answer.
func callOKText(t *testing.T, sess *sdk.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := sess.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	text := res.Content[0].(*sdk.TextContent).Text
	require.False(t, res.IsError, "%s: %s", name, text)
	return text
}

// TestMCPRestrictedSubjectUnnamed (issue 57, red team findings 1 and 4): recall with a
// filter that does not name the restricted subject, and get_context for their agent or
// session, leave the subject's memories and preferences out.
func TestMCPRestrictedSubjectUnnamed(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	ok := func(r *apptest.Response, want ...int) {
		t.Helper()
		require.Contains(t, want, r.Status, "%s", r.Body)
	}
	ok(s.Do("POST", "/v1/memories", key, map[string]any{"text": "hank has HIV", "user_id": "hank", "agent_id": "bot", "session_id": "s-hank"}), 201)
	ok(s.Do("POST", "/v1/memories", key, map[string]any{"text": "ivy asked about HIV testing", "user_id": "ivy", "agent_id": "bot"}), 201)
	ok(s.Do("PUT", "/v1/kv/prefs/tone", key, map[string]any{"value": "KIM-SECRET", "user_id": "kim", "agent_id": "ag9"}), 201)
	ok(s.Do("PUT", "/v1/kv/prefs/tone2", key, map[string]any{"value": "KIM2-SECRET", "user_id": "kim", "session_id": "s-kim9"}), 201)
	ok(s.Do("POST", "/v1/gdpr/restrictions/hank", comp, map[string]any{"reason": "x"}), 201)
	ok(s.Do("POST", "/v1/gdpr/restrictions/kim", comp, map[string]any{"reason": "x"}), 201)

	sess := connect(t, s, key)
	for _, args := range []map[string]any{
		{"query": "x", "agent_id": "ag9", "kv_namespaces": []string{"prefs"}},
		{"query": "x", "agent_id": "ag9", "user_id": "bob", "kv_namespaces": []string{"prefs"}},
		{"query": "x", "session_id": "s-kim9", "kv_namespaces": []string{"prefs"}},
	} {
		require.NotContains(t, callOKText(t, sess, "get_context", args), "KIM", "%v", args)
	}
	for _, args := range []map[string]any{
		{"query": "HIV", "scope_match": "filter", "agent_id": "bot"},
		{"query": "HIV", "scope_match": "filter"},
		{"query": "HIV", "scope_match": "filter", "session_id": "s-hank"},
	} {
		text := callOKText(t, sess, "recall", args)
		require.NotContains(t, text, "hank", "%v", args)
	}
	require.Contains(t, callOKText(t, sess, "recall", map[string]any{"query": "HIV", "scope_match": "filter", "agent_id": "bot"}), "ivy asked")
}
