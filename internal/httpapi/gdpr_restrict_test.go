package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestGDPRRestrictionEveryReadPath: while a subject is restricted, every agent read of their
// data answers 403, searches and similar-jobs leave it out, job lists skip their jobs — and
// compliance can still export it; another subject is unaffected; lifting the restriction
// restores everything (the data was kept).
func TestGDPRRestrictionEveryReadPath(t *testing.T) {
	t.Parallel()
	// The consolidation worker must not turn the completed fork into a job memory before the
	// export below counts alice's memories (the outbox poll's run at start-up did so once in
	// CI, after River's leader election took seconds).
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	alice := writeSubject(t, s, agent, "a")
	bob := writeSubject(t, s, agent, "b")
	// a "job" memory for similar-jobs
	for _, f := range []gdprFixture{alice, bob} {
		r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": f.marker + " video edit job summary", "kind": "job",
			"user_id": f.user, "metadata": map[string]any{"job_id": f.job, "outcome": "succeeded"}})
		require.Equal(t, 201, r.Status, "%s", r.Body)
	}
	q := "?user_id="
	reads := func(f gdprFixture) map[string]*apptest.Response {
		out := map[string]*apptest.Response{}
		for name, path := range map[string]string{
			"session-state":    "/v1/sessions/" + f.session + "/state",
			"session-messages": "/v1/sessions/" + f.session + "/messages",
			"session-log":      "/v1/sessions/" + f.session + "/messages?after_seq=0",
			"job":              "/v1/jobs/" + f.job,
			"resume":           "/v1/jobs/" + f.job + "/resume",
			"checkpoints":      "/v1/jobs/" + f.job + "/checkpoints",
			"checkpoint":       "/v1/jobs/" + f.job + "/checkpoints/1",
			"steps":            "/v1/jobs/" + f.job + "/steps",
			"step":             "/v1/jobs/" + f.job + "/steps/cut",
			"handoffs":         "/v1/jobs/" + f.job + "/handoffs",
			"events":           "/v1/jobs/" + f.job + "/events",
			"fork-events":      "/v1/jobs/" + f.fork + "/events",
			"applied":          "/v1/jobs/" + f.job + "/applied?op=crop&params=%7B%7D",
			"asset":            "/v1/assets/" + f.asset,
			"langgraph":        "/v1/jobs/" + f.thread + "/langgraph/checkpoint",
			"langgraph-list":   "/v1/jobs/" + f.thread + "/langgraph/checkpoints",
			"asset-versions":   "/v1/assets/" + f.asset + "/versions",
			"kv":               "/v1/kv/prefs/colour" + q + f.user,
			"kv-session":       "/v1/kv/prefs/tone" + q + f.user + "&session_id=" + f.session,
			"kv-history":       "/v1/kv/prefs/colour/history" + q + f.user,
			"kv-list":          "/v1/kv/prefs" + q + f.user,
			"memory":           "/v1/memories/" + f.memoryIDs[1],
			"memory-old":       "/v1/memories/" + f.memoryIDs[0],
			"memory-history":   "/v1/memories/" + f.memoryIDs[0] + "/history",
			"memory-retrieval": "/v1/memories/" + f.memoryIDs[1] + "/retrievals",
		} {
			out[name] = s.Do("GET", path, agent, nil)
		}
		out["kv-batch"] = s.Do("POST", "/v1/kv/prefs/batch-get", agent, map[string]any{"keys": []string{"colour"}, "user_id": f.user})
		return out
	}
	for name, r := range reads(alice) {
		require.Equalf(t, 200, r.Status, "%s before restriction: %s", name, r.Body)
	}

	r := s.Do("POST", "/v1/gdpr/restrictions/"+alice.user, comp, map[string]any{"reason": "accuracy contested"})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	require.Equal(t, 200, s.Do("POST", "/v1/gdpr/restrictions/"+alice.user, comp, nil).Status, "restricting again is idempotent")
	require.Equal(t, true, s.Do("GET", "/v1/gdpr/restrictions/"+alice.user, comp, nil).Map(t)["restricted"])

	for name, r := range reads(alice) {
		require.Equalf(t, 403, r.Status, "%s while restricted: %s", name, r.Body)
		require.Contains(t, string(r.Body), "Art. 18")
		require.NotContains(t, string(r.Body), alice.marker)
	}
	for name, r := range reads(bob) {
		require.Equalf(t, 200, r.Status, "%s of another subject: %s", name, r.Body)
	}
	// Searches leave the subject's memories out (org-level ones still answer).
	r = s.Do("POST", "/v1/memories/search", agent, map[string]any{"query": alice.marker + " walks", "user_id": alice.user})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), alice.marker)
	r = s.Do("POST", "/v1/jobs/similar", agent, map[string]any{"query": alice.marker + " video edit job", "user_id": alice.user})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), alice.marker)
	r = s.Do("POST", "/v1/jobs/similar", agent, map[string]any{"query": bob.marker + " video edit job", "user_id": bob.user})
	require.Contains(t, string(r.Body), bob.marker)
	r = s.Do("GET", "/v1/jobs?limit=1000", agent, nil)
	require.Equal(t, 200, r.Status)
	require.NotContains(t, string(r.Body), alice.user)
	require.Contains(t, string(r.Body), bob.user)
	// The per-turn context assembles nothing for the subject: named as user, or through
	// their job or session.
	for _, body := range []map[string]any{{"user_id": alice.user, "query": "walks"}, {"job_id": alice.job, "query": "walks"},
		{"session_id": alice.session, "query": "walks"}} {
		r = s.Do("POST", "/v1/context", agent, body)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		require.NotContains(t, string(r.Body), alice.marker, "%v", body)
		require.Contains(t, string(r.Body), "Art. 18")
	}
	r = s.Do("POST", "/v1/context", agent, map[string]any{"user_id": bob.user, "job_id": bob.job, "session_id": bob.session, "query": "walks"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), bob.marker)
	// Compliance still exports it; the header says it is restricted.
	r = s.Do("GET", "/v1/gdpr/exports?user_id="+alice.user, comp, nil)
	require.Equal(t, 200, r.Status)
	hdr, recs, _ := readExport(t, r.Body)
	require.Equal(t, true, hdr["restricted"])
	require.Equal(t, 3, countTypes(recs)["semantic.memory"], "two versions and the job memory")

	require.Equal(t, 200, s.Do("DELETE", "/v1/gdpr/restrictions/"+alice.user, comp, nil).Status)
	require.Equal(t, 404, s.Do("DELETE", "/v1/gdpr/restrictions/"+alice.user, comp, nil).Status)
	for name, r := range reads(alice) {
		require.Equalf(t, 200, r.Status, "%s after the restriction was lifted: %s", name, r.Body)
	}
	// The audit trail records the restriction by pseudonym only.
	r = s.Do("GET", "/v1/audit?user_id="+alice.user+"&action=restrict-subject", comp, nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), `"restrict-subject"`)
	require.NotContains(t, string(r.Body), alice.user)
}

// TestGDPRRoles: only compliance (and admin) keys may call the GDPR endpoints.
func TestGDPRRoles(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	calls := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/gdpr/erasures", map[string]any{"user_id": "u1"}},
		{"GET", "/v1/gdpr/erasures", nil},
		{"GET", "/v1/gdpr/erasures/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", nil},
		{"GET", "/v1/gdpr/exports?user_id=u1", nil},
		{"POST", "/v1/gdpr/restrictions/u1", nil},
		{"GET", "/v1/gdpr/restrictions/u1", nil},
		{"DELETE", "/v1/gdpr/restrictions/u1", nil},
		{"POST", "/v1/gdpr/rectifications", map[string]any{"user_id": "u1", "kv": map[string]any{"namespace": "n", "key": "k", "value": 1}}},
	}
	for _, c := range calls {
		r := s.Do(c.method, c.path, agent, c.body)
		require.Equalf(t, 403, r.Status, "agent key on %s %s: %s", c.method, c.path, r.Body)
		r = s.Do(c.method, c.path, comp, c.body)
		require.NotEqualf(t, 403, r.Status, "compliance key on %s %s: %s", c.method, c.path, r.Body)
		require.Lessf(t, r.Status, 500, "%s %s: %s", c.method, c.path, r.Body)
	}
	// compliance keys may not read agent data directly
	require.Equal(t, 403, s.Do("GET", "/v1/jobs/j1", comp, nil).Status)
	// 404 for an unknown erasure; 422 for a bad user id
	require.Equal(t, 404, s.Do("GET", "/v1/gdpr/erasures/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", comp, nil).Status)
	require.Equal(t, 422, s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": "bad id/x"}).Status)
	require.Equal(t, 422, s.Do("GET", "/v1/gdpr/exports", comp, nil).Status)
}

// TestGDPRLogsAndMetricsCarryNoContent: request bodies, memory text, values, turns and
// erasure subjects never reach the logs (at debug level) or the metrics.
func TestGDPRLogsAndMetricsCarryNoContent(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_LOG_LEVEL", "debug"), apptest.Env("STRATA_ERASURE_BATCH", "3"))
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	f := writeSubject(t, s, agent, "l")
	// failing requests too (422s quote nothing of the body into logs)
	s.Do("POST", "/v1/memories", agent, map[string]any{"text": f.marker, "importance": 7, "user_id": f.user})
	s.Do("PUT", "/v1/kv/prefs/x", agent, map[string]any{"value": nil, "user_id": f.user, "note": f.marker})
	s.Do("GET", "/v1/gdpr/exports?user_id="+f.user, comp, nil)
	r := s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": f.user})
	require.Equal(t, 202, r.Status)
	waitErasure(t, s, comp, r.Map(t)["id"].(string))
	resp, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	logs := s.Logs()
	require.NotEmpty(t, logs)
	require.True(t, strings.Contains(logs, "request"), "debug logs were written")
	for _, needle := range []string{f.marker, f.user} {
		require.NotContains(t, logs, needle)
		require.NotContains(t, string(metrics), needle)
	}
}

// TestGDPRRestrictionWritesStoreNewOnly: while a subject is restricted (Art. 18(2)), writes
// that only add new data for them are stored — a new job, session, key-value entry, asset,
// memory — and are restricted like the rest; a memory write that finds a stored duplicate
// of theirs (single or in a batch) is refused and changes nothing; the attack,
// PATCH {"importance":0.6} on their memory, gets the 403 without the text.
func TestGDPRRestrictionWritesStoreNewOnly(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	const u, marker = "user-w", "WMARKER93"
	r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": marker + " likes long walks", "user_id": u})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	mem := r.Map(t)
	require.Equal(t, 201, s.Do("POST", "/v1/gdpr/restrictions/"+u, comp, nil).Status)

	r = s.Do("PATCH", "/v1/memories/"+mem["id"].(string), agent, map[string]any{"importance": 0.6})
	requireProblem(t, r, 403, "")
	require.Contains(t, string(r.Body), "Art. 18")
	require.NotContains(t, string(r.Body), marker)

	for _, c := range []struct{ method, path, read string }{
		{"PUT", "/v1/jobs/w-new-job", "/v1/jobs/w-new-job"},
		{"PUT", "/v1/sessions/w-new-sess/state", "/v1/sessions/w-new-sess/state"},
		{"PUT", "/v1/kv/prefs/w-new-key", "/v1/kv/prefs/w-new-key?user_id=" + u},
		{"PUT", "/v1/assets/w-new-asset", "/v1/assets/w-new-asset"},
	} {
		var body map[string]any
		switch {
		case strings.HasPrefix(c.path, "/v1/jobs/"):
			body = map[string]any{"user_id": u, "goal": "new goal"}
		case strings.HasPrefix(c.path, "/v1/sessions/"):
			body = map[string]any{"user_id": u, "state": map[string]any{"a": 1}}
		case strings.HasPrefix(c.path, "/v1/kv/"):
			body = map[string]any{"user_id": u, "value": 1}
		case strings.HasPrefix(c.path, "/v1/assets/"):
			body = map[string]any{"user_id": u, "uri": "s3://b/new"}
		}
		r := s.Do(c.method, c.path, agent, body)
		require.Equalf(t, 201, r.Status, "%s %s: new data for a restricted subject is stored: %s", c.method, c.path, r.Body)
		require.NotContains(t, string(r.Body), marker)
		require.Equalf(t, 403, s.Do("GET", c.read, agent, nil).Status, "%s: the new data is restricted like the rest", c.read)
		// Writing over it now acts on the subject's stored data: refused.
		require.Equalf(t, 403, s.Do(c.method, c.path, agent, body).Status, "%s %s again", c.method, c.path)
	}
	r = s.Do("POST", "/v1/memories", agent, map[string]any{"text": "a new fact", "user_id": u})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	// A duplicate of the stored memory would update it and answer with it.
	r = s.Do("POST", "/v1/memories", agent, map[string]any{"text": marker + " likes long walks", "user_id": u, "importance": 0.9})
	requireProblem(t, r, 403, "")
	require.NotContains(t, string(r.Body), marker)
	r = s.Do("POST", "/v1/memories/batch", agent, map[string]any{"memories": []map[string]any{
		{"text": "another new fact", "user_id": u}, {"text": marker + " likes long walks", "user_id": u, "pinned": true}}})
	requireProblem(t, r, 403, "")
	require.NotContains(t, string(r.Body), marker)

	require.Equal(t, 200, s.Do("DELETE", "/v1/gdpr/restrictions/"+u, comp, nil).Status)
	got := s.Do("GET", "/v1/memories/"+mem["id"].(string), agent, nil).Map(t)
	require.EqualValues(t, mem["version"], got["version"], "the stored memory is unchanged")
	require.EqualValues(t, 0.5, got["importance"])
	require.Equal(t, false, got["pinned"])
	r = s.Do("GET", "/v1/memories?user_id="+u+"&limit=100", agent, nil)
	require.Equal(t, 200, r.Status)
	require.NotContains(t, string(r.Body), "another new fact", "the refused batch stored nothing")
}

// TestGDPRRestrictionUnnamedSearches (issue 57, red team finding 1): a search that does not
// name the restricted subject — a filter on the agent, the session or metadata, or on nothing
// at all, through REST or /mem0 — leaves their memories out in the SQL (a top_k=1 page still
// answers another user's memory) and records no access on them.
func TestGDPRRestrictionUnnamedSearches(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	for _, text := range []string{"hank has HIV", "hank HIV clinic visit on tuesday", "hank HIV viral load report"} {
		r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": text, "user_id": "hank", "agent_id": "bot",
			"session_id": "s-hank", "metadata": map[string]any{"topic": "health"}, "kind": "job"})
		require.Equal(t, 201, r.Status, "%s", r.Body)
	}
	r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": "ivy asked about HIV testing", "user_id": "ivy",
		"agent_id": "bot", "session_id": "s-ivy", "metadata": map[string]any{"topic": "health"}, "kind": "job"})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	ivy := r.Map(t)["id"].(string)
	r = s.Do("POST", "/v1/gdpr/restrictions/hank", comp, map[string]any{"reason": "x"})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/memories/search", map[string]any{"query": "HIV", "scope_match": "filter", "agent_id": "bot"}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "scope_match": "filter"}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "scope_match": "filter", "session_id": "s-hank"}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "scope_match": "filter", "metadata": map[string]any{"topic": "health"}}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "scope_match": "filter", "agent_id": "bot", "user_id": "bob"}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "agent_id": "bot", "session_id": "s-hank"}},
		{"/v1/memories/search", map[string]any{"query": "HIV", "agent_id": "bot", "user_id": "hank"}},
		{"/v1/jobs/similar", map[string]any{"query": "HIV", "agent_id": "bot"}},
		{"/v1/jobs/similar", map[string]any{"query": "HIV", "agent_id": "bot", "user_id": "hank"}},
	} {
		r := s.Do("POST", c.path, agent, c.body)
		require.Equal(t, 200, r.Status, "%v: %s", c.body, r.Body)
		require.NotContains(t, string(r.Body), "hank", "%s %v", c.path, c.body)
	}
	// A full page: restricted rows never take a slot (the filter is in the SQL).
	for _, body := range []map[string]any{{"query": "hank HIV", "scope_match": "filter", "agent_id": "bot", "top_k": 1},
		{"query": "hank HIV", "scope_match": "filter", "top_k": 1}} {
		r = s.Do("POST", "/v1/memories/search", agent, body)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var page struct {
			Items []struct {
				Memory struct {
					ID string `json:"id"`
				} `json:"memory"`
			} `json:"items"`
		}
		r.JSON(t, &page)
		require.Len(t, page.Items, 1, "%v: %s", body, r.Body)
		require.Equal(t, ivy, page.Items[0].Memory.ID)
	}
	// No access recorded on the restricted memories (ivy's, served above, is).
	require.Eventually(t, func() bool {
		return ownerCount(t, s, `SELECT access_count FROM memories WHERE id = $1`, uuid.MustParse(ivy)) > 0
	}, 15*time.Second, 20*time.Millisecond)
	require.Zero(t, ownerCount(t, s, `SELECT coalesce(sum(access_count), 0) FROM memories WHERE user_id = 'hank'`))
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memories WHERE user_id = 'hank' AND last_accessed_at IS NOT NULL`))
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memory_retrievals WHERE user_id = 'hank'`))

	// /mem0 searches are filters.
	for _, f := range []map[string]any{{"agent_id": "bot"}, {"run_id": "s-hank"},
		{"AND": []map[string]any{{"agent_id": "bot"}, {"run_id": "s-hank"}}}} {
		r := s.Do("POST", "/mem0/v2/memories/search/", "", map[string]any{"query": "HIV", "filters": f}, "Authorization", "Token "+agent)
		require.Equal(t, 200, r.Status, "%v: %s", f, r.Body)
		require.NotContains(t, string(r.Body), "hank", "%v", f)
	}
	r = s.Do("POST", "/mem0/v2/memories/search/", "", map[string]any{"query": "HIV", "filters": map[string]any{"agent_id": "bot"}},
		"Authorization", "Token "+agent)
	require.Contains(t, string(r.Body), "ivy asked")
}

// TestGDPRRestrictionContextLevels (issue 57, red team finding 4): the per-turn context of
// a request that does not name the restricted subject leaves out their preferences stored
// at agent and session level.
func TestGDPRRestrictionContextLevels(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	for _, c := range []struct {
		key  string
		body map[string]any
	}{
		{"tone", map[string]any{"value": "KIM-SECRET", "user_id": "kim", "agent_id": "ag9"}},
		{"tone2", map[string]any{"value": "KIM2-SECRET", "user_id": "kim", "session_id": "s-kim9"}},
		{"tone", map[string]any{"value": "ORG-TONE"}},
	} {
		r := s.Do("PUT", "/v1/kv/prefs/"+c.key, agent, c.body)
		require.Contains(t, []int{200, 201}, r.Status, "%s", r.Body)
	}
	r := s.Do("POST", "/v1/gdpr/restrictions/kim", comp, map[string]any{"reason": "x"})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	for _, body := range []map[string]any{
		{"query": "x", "agent_id": "ag9", "kv_namespaces": []string{"prefs"}},
		{"query": "x", "agent_id": "ag9", "user_id": "bob", "kv_namespaces": []string{"prefs"}},
		{"query": "x", "session_id": "s-kim9", "kv_namespaces": []string{"prefs"}},
		{"query": "x", "session_id": "s-kim9", "agent_id": "ag9", "user_id": "bob", "kv_namespaces": []string{"prefs"}},
	} {
		r := s.Do("POST", "/v1/context", agent, body)
		require.Equal(t, 200, r.Status, "%v: %s", body, r.Body)
		require.NotContains(t, string(r.Body), "KIM", "%v", body)
		// The level below answers instead (the restricted entry does not hide it).
		require.Contains(t, string(r.Body), "ORG-TONE", "%v", body)
	}
	require.Equal(t, 200, s.Do("DELETE", "/v1/gdpr/restrictions/kim", comp, nil).Status)
	r = s.Do("POST", "/v1/context", agent, map[string]any{"query": "x", "agent_id": "ag9", "session_id": "s-kim9", "kv_namespaces": []string{"prefs"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "KIM-SECRET", "lifted: the data was kept")
	require.Contains(t, string(r.Body), "KIM2-SECRET")
}
