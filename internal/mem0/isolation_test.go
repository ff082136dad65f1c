package mem0_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestMem0OrgIsolation is every /mem0 route called with a second org's key and the first
// org's ids, users and texts (issue 45): each answers 404 or an empty result, never the
// first org's data, and changes nothing of it. The second org holds an org-level memory of
// its own and the same user id, so a search that composed scopes (or a dedup across orgs)
// would show here.
func TestMem0OrgIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	keyA, keyB := s.NewKey("mem0-iso-a", "agent"), s.NewKey("mem0-iso-b", "agent")
	const user, secret = "shared-user", "Alice's passport number is X1234567"
	call := func(key, method, path string, body any) *apptest.Response {
		t.Helper()
		return s.Do(method, "/mem0"+path, "", body, "Authorization", "Token "+key) // as mem0 clients send it
	}
	add := func(key string, body map[string]any) []map[string]any {
		t.Helper()
		r := call(key, http.MethodPost, "/v1/memories/", body)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var evs []map[string]any
		r.JSON(t, &evs)
		return evs
	}
	a := add(keyA, map[string]any{"messages": []map[string]string{{"role": "user", "content": secret}}, "user_id": user, "infer": false})
	a2 := add(keyA, map[string]any{"messages": "Alice's second secret: the vault code is 4711", "user_id": user, "run_id": "trip", "infer": false})
	idA, idA2 := a[0]["id"].(string), a2[0]["id"].(string)
	// Org B: an org-level memory (what a job summary is) and the same user id.
	require.Equal(t, http.StatusCreated, s.Do(http.MethodPost, "/v1/memories", keyB, map[string]any{"text": "B's org-wide passport policy"}).Status)

	leaks := func(r *apptest.Response) {
		t.Helper()
		for _, s := range []string{"X1234567", "4711", "mem0-iso-a"} {
			require.NotContains(t, string(r.Body), s, "org B's answer carries org A's data: %s", r.Body)
		}
	}
	notFound := func(r *apptest.Response, what string) {
		t.Helper()
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", what, r.Body)
		leaks(r)
	}
	empty := func(r *apptest.Response, what string) {
		t.Helper()
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", what, r.Body)
		leaks(r)
		var v any
		r.JSON(t, &v)
		switch x := v.(type) {
		case []any:
			require.Empty(t, x, what)
		case map[string]any:
			if res, ok := x["results"]; ok {
				require.Empty(t, res, "%s: %s", what, r.Body)
			}
			if n, ok := x["count"]; ok {
				require.EqualValues(t, 0, n, what)
			}
		}
	}

	for _, id := range []string{idA, idA2} {
		notFound(call(keyB, http.MethodGet, "/v1/memories/"+id+"/", nil), "get")
		notFound(call(keyB, http.MethodGet, "/v1/memories/"+id+"/history/", nil), "history")
		notFound(call(keyB, http.MethodPut, "/v1/memories/"+id+"/", map[string]any{"text": "overwritten by B"}), "update")
		notFound(call(keyB, http.MethodDelete, "/v1/memories/"+id+"/", nil), "delete")
	}
	for _, p := range []string{"/v1/memories/search/", "/v2/memories/search/", "/v3/memories/search/"} {
		empty(call(keyB, http.MethodPost, p, map[string]any{"query": "passport number", "filters": map[string]any{"user_id": user}}), p)
		empty(call(keyB, http.MethodPost, p, map[string]any{"query": "vault code", "user_id": user}), p+" (v1 entity)")
		empty(call(keyB, http.MethodPost, p, map[string]any{"query": "vault code",
			"filters": map[string]any{"AND": []any{map[string]any{"user_id": user}, map[string]any{"run_id": "trip"}}}}), p+" (AND)")
	}
	empty(call(keyB, http.MethodGet, "/v1/memories/?user_id="+user, nil), "get_all v1")
	empty(call(keyB, http.MethodGet, "/v1/memories/?run_id=trip", nil), "get_all v1 by run")
	for _, p := range []string{"/v2/memories/", "/v3/memories/"} {
		empty(call(keyB, http.MethodPost, p, map[string]any{"filters": map[string]any{"user_id": user}}), p)
	}
	r := call(keyB, http.MethodPut, "/v1/batch/", map[string]any{"memories": []map[string]any{{"memory_id": idA, "text": "overwritten by B"}}})
	require.Equal(t, http.StatusNotFound, r.Status, "batch update: %s", r.Body)
	leaks(r)
	r = call(keyB, http.MethodDelete, "/v1/batch/", map[string]any{"memories": []map[string]any{{"memory_id": idA}}})
	require.Equal(t, http.StatusNotFound, r.Status, "batch delete: %s", r.Body)
	leaks(r)
	// Deleting B's own (empty) scopes of the same ids answers as Mem0 does and removes none of A's.
	for _, p := range []string{"/v1/memories/?user_id=" + user, "/v1/entities/user/" + user + "/", "/v2/entities/user/" + user + "/"} {
		r := call(keyB, http.MethodDelete, p, nil)
		require.Less(t, r.Status, 500, "%s: %s", p, r.Body)
		leaks(r)
	}
	// Adding A's exact text in B is B's own new memory, never a dedup onto A's.
	b := add(keyB, map[string]any{"messages": secret, "user_id": user, "infer": false})
	require.Equal(t, "ADD", b[0]["event"])
	require.NotEqual(t, idA, b[0]["id"])

	// Org A's memories are all there, unchanged.
	r = call(keyA, http.MethodPost, "/v2/memories/", map[string]any{"filters": map[string]any{"user_id": user}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var all struct {
		Count   int `json:"count"`
		Results []struct {
			ID     string `json:"id"`
			Memory string `json:"memory"`
		} `json:"results"`
	}
	raw, _ := json.Marshal(r.Map(t))
	require.NoError(t, json.Unmarshal(raw, &all))
	texts := map[string]string{}
	for _, m := range all.Results {
		texts[m.ID] = m.Memory
	}
	require.Equal(t, map[string]string{idA: secret, idA2: "Alice's second secret: the vault code is 4711"}, texts)
	// And org A's own search with Mem0's filters finds the user's memories at any run, not
	// org-level ones.
	r = call(keyA, http.MethodPost, "/v3/memories/search/", map[string]any{"query": "vault code", "filters": map[string]any{"user_id": user}})
	require.Equal(t, http.StatusOK, r.Status)
	require.True(t, strings.Contains(string(r.Body), idA2), "a user filter finds the user's memory of run trip: %s", r.Body)
}

// TestMem0SearchMatchesMem0Filters: a user filter answers that user's memories only, at
// every agent and run (Mem0's semantics), and neither org-level memories (other jobs'
// summaries) nor another user's (issue 46.6).
func TestMem0SearchMatchesMem0Filters(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("mem0-filters", "agent")
	write := func(body map[string]any) string {
		t.Helper()
		r := s.Do(http.MethodPost, "/v1/memories", key, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		return r.Map(t)["id"].(string)
	}
	own := write(map[string]any{"text": "Ana flies to Tokyo in March", "user_id": "ana"})
	inRun := write(map[string]any{"text": "Ana's Tokyo hotel is near Shibuya", "user_id": "ana", "session_id": "trip-1"})
	byAgent := write(map[string]any{"text": "Ana asked the planner about Tokyo trains", "user_id": "ana", "agent_id": "planner"})
	orgLevel := write(map[string]any{"text": "Summary of job 17: Tokyo travel planning"})
	other := write(map[string]any{"text": "Ben flies to Tokyo in April", "user_id": "ben"})
	search := func(filters map[string]any) []string {
		t.Helper()
		r := s.Do(http.MethodPost, "/mem0/v3/memories/search/", key, map[string]any{"query": "Tokyo", "filters": filters, "top_k": 20})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var out struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
		}
		r.JSON(t, &out)
		var ids []string
		for _, m := range out.Results {
			ids = append(ids, m.ID)
		}
		return ids
	}
	got := search(map[string]any{"user_id": "ana"})
	require.ElementsMatch(t, []string{own, inRun, byAgent}, got)
	require.NotContains(t, got, orgLevel)
	require.NotContains(t, got, other)
	require.ElementsMatch(t, []string{inRun}, search(map[string]any{"AND": []any{map[string]any{"user_id": "ana"}, map[string]any{"run_id": "trip-1"}}}))
	require.ElementsMatch(t, []string{byAgent}, search(map[string]any{"agent_id": "planner"}))
	// Strata's own search still composes scopes: the user's query sees org-level memories.
	r := s.Do(http.MethodPost, "/v1/memories/search", key, map[string]any{"query": "Tokyo", "user_id": "ana", "top_k": 20})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), orgLevel)
	require.NotContains(t, string(r.Body), other)
}
