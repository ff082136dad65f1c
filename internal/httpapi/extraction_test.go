package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/testenv"
)

func need(t *testing.T, r *apptest.Response, want ...int) *apptest.Response {
	t.Helper()
	require.Containsf(t, want, r.Status, "%s", r.Body)
	return r
}

// mediaAnswer is the fake model's answer for the media-job conversation below.
func mediaAnswer(p llmtest.Prompt) string {
	var ds []llmtest.D
	var es []llmtest.E
	var rs []llmtest.R
	for _, tn := range p.Doc.Turns {
		c := tn.Content
		switch {
		case strings.Contains(c, "4K"):
			ds = append(ds, llmtest.D{Op: "ADD", Kind: "preference", Key: "export_resolution", Text: "4K", Turns: []int64{tn.Seq}})
		case strings.Contains(c, "Lumen"):
			ds = append(ds, llmtest.D{Op: "ADD", Kind: "fact", Text: "User edits wedding films for Lumen Studio", Turns: []int64{tn.Seq}})
			es = append(es, llmtest.E{Name: "Lumen Studio", Type: "organization", Summary: "A wedding film studio"})
			rs = append(rs, llmtest.R{Subject: "Lumen Studio", Predicate: "makes", Value: "wedding films",
				Decision: len(ds) - 1, Turns: []int64{tn.Seq}})
		case strings.Contains(c, "wedding"):
			ds = append(ds, llmtest.D{Op: "ADD", Kind: "fact", Text: "User edits wedding films for Lumen Studio", Turns: []int64{tn.Seq}})
		}
	}
	return llmtest.GraphAnswer(ds, es, rs)
}

// TestExtractionThroughTheAPI: turns appended (one and a batch) are extracted in the
// background once the session is quiet; the memory's provenance answers the turns it came
// from; the preference is in key-value memory; a quarantine of the agent covers what
// extraction wrote on its turns; erasure removes the memories, the preferences, the
// extraction state and provenance.
func TestExtractionThroughTheAPI(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, mediaAnswer)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()),
		apptest.Env("STRATA_EXTRACTION_POLL", "100ms"))
	admin, key, comp := s.AdminKey, s.NewKey("acme", "agent"), s.NewKey("acme", "compliance")
	_ = admin
	adminAcme := s.NewKey("acme", "admin")
	need(t, s.Do("PUT", "/v1/admin/policies", adminAcme, map[string]any{"extraction": map[string]any{"enabled": true, "debounce": "0s"}}), 200, 201)
	pol := need(t, s.Do("GET", "/v1/admin/policies", adminAcme, nil), 200).Map(t)
	ext := pol["policy"].(map[string]any)["extraction"].(map[string]any)
	require.Equal(t, true, ext["enabled"])
	require.EqualValues(t, 20, ext["every_turns"])

	// The single-turn body and answer are unchanged; a batch answers the last turn and items.
	one := need(t, s.Do("POST", "/v1/sessions/media-1/messages", key, map[string]any{"role": "user",
		"content": "I cut wedding films for Lumen Studio.", "user_id": "sam", "agent_id": "editor"}), 201).Map(t)
	require.EqualValues(t, 1, one["seq"])
	require.Nil(t, one["items"])
	batch := need(t, s.Do("POST", "/v1/sessions/media-1/messages", key, map[string]any{"messages": []map[string]any{
		{"role": "assistant", "content": "Great, what should I keep in mind?"},
		{"role": "user", "content": "Always export my cuts in 4K."}}}), 201).Map(t)
	require.EqualValues(t, 3, batch["seq"])
	require.Len(t, batch["items"], 2)
	// A batch that fails writes nothing.
	requireProblem(t, s.Do("POST", "/v1/sessions/media-1/messages", key, map[string]any{"messages": []map[string]any{
		{"role": "user", "content": "fine"}, {"role": "wizard", "content": "x"}}}), 422, "body.messages[1].role")
	requireProblem(t, s.Do("POST", "/v1/sessions/media-1/messages", key, map[string]any{"role": "user", "content": "x",
		"messages": []map[string]any{{"role": "user", "content": "y"}}}), 422, "body.messages")
	log := need(t, s.Do("GET", "/v1/sessions/media-1/messages?after_seq=0", key, nil), 200).Map(t)
	require.Len(t, log["items"], 3)

	var st map[string]any
	require.Eventually(t, func() bool {
		r := s.Do("GET", "/v1/sessions/media-1/extraction", key, nil)
		if r.Status != 200 {
			return false
		}
		st = r.Map(t)
		return st["extracted_seq"] == float64(3)
	}, 60*time.Second, 50*time.Millisecond, "extraction did not run: %v", st)
	require.Equal(t, "extracted", st["status"])

	ctx := context.Background()
	owner := testenv.OwnerConn(t, s.DBURL)
	var memID string
	require.NoError(t, owner.QueryRow(ctx, `SELECT id::text FROM memories WHERE org_id = 'acme' AND user_id = 'sam' AND trust = 'extracted'`).Scan(&memID))
	prov := need(t, s.Do("GET", "/v1/memories/"+memID+"/provenance", key, nil), 200).Map(t)
	items := prov["items"].([]any)
	require.Len(t, items, 1)
	it := items[0].(map[string]any)
	require.Equal(t, "media-1", it["session_id"])
	require.Equal(t, []any{float64(1)}, it["turn_seqs"])
	require.Equal(t, "fake-model", it["model"])
	require.Equal(t, "I cut wedding films for Lumen Studio.", it["turns"].([]any)[0].(map[string]any)["content"])
	var rels int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM graph_relations WHERE org_id = 'acme' AND user_id = 'sam'
		AND source_memory_id = $1`, memID).Scan(&rels))
	require.Equal(t, 1, rels, "the relation extracted with the memory")
	kv := need(t, s.Do("GET", "/v1/kv/preferences/export_resolution?user_id=sam", key, nil), 200).Map(t)
	require.Equal(t, "4K", kv["value"])
	require.Equal(t, "user", kv["level"])

	// Quarantine of the agent whose turns they came from.
	found := need(t, s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "wedding films", "user_id": "sam"}), 200).Map(t)
	require.Len(t, found["items"], 1)
	need(t, s.Do("POST", "/v1/admin/quarantines", adminAcme, map[string]any{"agent_id": "editor",
		"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "reason": "test"}), 201)
	found = need(t, s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "wedding films", "user_id": "sam"}), 200).Map(t)
	require.Empty(t, found["items"], "the quarantine covers what extraction wrote on the agent's turns")

	// Erasure removes everything extraction produced, and the queued job.
	need(t, s.Do("POST", "/v1/sessions/media-1/messages", key, map[string]any{"role": "user", "content": "more wedding talk"}), 201)
	_, err := owner.Exec(ctx, `INSERT INTO river_job (kind, args, state, queue, max_attempts, scheduled_at)
		VALUES ('extract_session', '{"org":"acme","session":"media-1","user_id":"sam"}', 'scheduled', 'default', 1, now() + interval '1 hour')`)
	require.NoError(t, err)
	er := need(t, s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": "sam"}), 202, 201).Map(t)
	done := waitErasure(t, s, comp, er["id"].(string))
	require.Equal(t, true, done["verification"].(map[string]any)["clean"], "%v", done)
	for _, q := range []string{
		`SELECT count(*) FROM memories WHERE org_id = 'acme' AND user_id = 'sam'`,
		`SELECT count(*) FROM kv_entries WHERE org_id = 'acme' AND user_id = 'sam' AND NOT deleted`,
		`SELECT count(*) FROM kv_versions WHERE org_id = 'acme' AND user_id = 'sam'`,
		`SELECT count(*) FROM extraction_state WHERE org_id = 'acme' AND user_id = 'sam'`,
		`SELECT count(*) FROM extraction_provenance WHERE org_id = 'acme'`,
		`SELECT count(*) FROM graph_entities WHERE org_id = 'acme' AND user_id = 'sam'`,
		`SELECT count(*) FROM graph_relations WHERE org_id = 'acme' AND user_id = 'sam'`,
		`SELECT count(*) FROM river_job WHERE kind = 'extract_session' AND args->>'user_id' = 'sam' AND state NOT IN ('completed', 'running')`,
	} {
		var n int
		require.NoError(t, owner.QueryRow(ctx, q).Scan(&n))
		require.Zero(t, n, q)
	}
}

// TestExtractEndpoint: POST /v1/memories/extract on messages (dry run writes nothing) and on
// a session (its cursor advances), its validation, and the problem without an LLM.
func TestExtractEndpoint(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, mediaAnswer)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()))
	key := s.NewKey("acme", "agent")
	need(t, s.Do("PUT", "/v1/admin/policies", s.NewKey("acme", "admin"), map[string]any{"extraction": map[string]any{"enabled": true,
		"debounce": "1h", "every_turns": 0}}), 200, 201) // on demand only
	msgs := []map[string]any{{"role": "user", "content": "I edit wedding films. Export in 4K please."}}
	dry := need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "kim", "dry_run": true}), 200).Map(t)
	require.Equal(t, false, dry["applied"])
	require.Len(t, dry["decisions"], 1, "%v", dry) // the fake's switch takes the first match per turn
	require.Equal(t, "fake-model", dry["model"])
	owner := testenv.OwnerConn(t, s.DBURL)
	var n int
	require.NoError(t, owner.QueryRow(context.Background(), `SELECT count(*) FROM kv_entries WHERE user_id = 'kim'`).Scan(&n))
	require.Zero(t, n, "a dry run applies nothing")
	res := need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "kim"}), 200).Map(t)
	require.Equal(t, true, res["applied"])
	d := res["decisions"].([]any)[0].(map[string]any)
	require.Equal(t, "added", d["result"])
	require.EqualValues(t, 1, d["kv_version"])
	kv := need(t, s.Do("GET", "/v1/kv/preferences/export_resolution?user_id=kim", key, nil), 200).Map(t)
	require.Equal(t, "4K", kv["value"])

	// On a session: the turns after the cursor, then nothing.
	need(t, s.Do("POST", "/v1/sessions/s-kim/messages", key, map[string]any{"role": "user", "content": "I shoot wedding films.", "user_id": "kim"}), 201)
	res = need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"session_id": "s-kim"}), 200).Map(t)
	require.EqualValues(t, 1, res["to_seq"])
	require.Equal(t, "added", res["decisions"].([]any)[0].(map[string]any)["result"])
	calls := len(llm.Calls())
	res = need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"session_id": "s-kim"}), 200).Map(t)
	require.Empty(t, res["decisions"])
	require.Len(t, llm.Calls(), calls, "nothing waits, no model call")
	st := need(t, s.Do("GET", "/v1/sessions/s-kim/extraction", key, nil), 200).Map(t)
	require.EqualValues(t, 1, st["extracted_seq"])

	requireProblem(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{}), 422, "body.session_id")
	requireProblem(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"session_id": "s-kim", "messages": msgs}), 422, "body.session_id")
	requireProblem(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"session_id": "nope"}), 404, "")
	// Malformed answers: 502, nothing applied.
	llm.SetAnswer(func(llmtest.Prompt) string { return "not json" })
	requireProblem(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "lee"}), 502, "")
	// Restricted subject: refused before any call.
	comp := s.NewKey("acme", "compliance")
	need(t, s.Do("POST", "/v1/gdpr/restrictions/lee", comp, map[string]any{"reason": "test"}), 200, 201)
	calls = len(llm.Calls())
	requireProblem(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "lee"}), 403, "")
	require.Len(t, llm.Calls(), calls)

	// Without an LLM the endpoint names the variable to set.
	plain := apptest.Start(t)
	r := plain.Do("POST", "/v1/memories/extract", plain.NewKey("acme", "agent"), map[string]any{"messages": msgs})
	requireProblem(t, r, 503, "")
	require.Contains(t, string(r.Body), "STRATA_LLM_MODEL")
}
