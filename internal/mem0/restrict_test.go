package mem0_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestMem0RestrictedSubject: /mem0 translates into the REST operations, so an Art. 18
// restriction holds there too (issue 57): reading, updating or deleting the restricted
// subject's memory is refused with nothing of it in the answer and nothing changed;
// searches leave it out; adding a new memory for the subject still works.
func TestMem0RestrictedSubject(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("mem0-r", "agent")
	comp := s.NewKey("mem0-r", "compliance")
	const user, secret = "restricted-user", "passport X7654321"
	call := func(method, path string, body any) *apptest.Response {
		t.Helper()
		return s.Do(method, "/mem0"+path, "", body, "Authorization", "Token "+key)
	}
	r := call(http.MethodPost, "/v1/memories/", map[string]any{"messages": []map[string]string{{"role": "user", "content": secret}},
		"user_id": user, "infer": false})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var evs []map[string]any
	r.JSON(t, &evs)
	id := evs[0]["id"].(string)
	require.Equal(t, 201, s.Do("POST", "/v1/gdpr/restrictions/"+user, comp, nil).Status)

	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/v1/memories/" + id + "/", nil},
		{http.MethodGet, "/v1/memories/" + id + "/history/", nil},
		{http.MethodPut, "/v1/memories/" + id + "/", map[string]any{"metadata": map[string]any{"k": "v"}}},
		{http.MethodDelete, "/v1/memories/" + id + "/", nil},
		{http.MethodPut, "/v1/batch/", map[string]any{"memories": []map[string]any{{"memory_id": id, "text": "changed"}}}},
		{http.MethodDelete, "/v1/batch/", map[string]any{"memories": []map[string]any{{"memory_id": id}}}},
	} {
		r := call(c.method, c.path, c.body)
		require.Equal(t, http.StatusForbidden, r.Status, "%s %s: %s", c.method, c.path, r.Body)
		require.NotContains(t, string(r.Body), "X7654321", "%s %s", c.method, c.path)
	}
	for _, p := range []string{"/v1/memories/search/", "/v2/memories/search/"} {
		r := call(http.MethodPost, p, map[string]any{"query": "passport", "filters": map[string]any{"user_id": user}, "user_id": user})
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", p, r.Body)
		require.NotContains(t, string(r.Body), "X7654321", p)
	}
	r = call(http.MethodPost, "/v1/memories/", map[string]any{"messages": "a new fact", "user_id": user, "infer": false})
	require.Equal(t, http.StatusOK, r.Status, "storing new data for a restricted subject is allowed: %s", r.Body)
	require.NotContains(t, string(r.Body), "X7654321")

	// The memory is unchanged: once the restriction is lifted it reads back as it was.
	require.Equal(t, 200, s.Do("DELETE", "/v1/gdpr/restrictions/"+user, comp, nil).Status)
	r = call(http.MethodGet, "/v1/memories/"+id+"/", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), secret)
	require.NotContains(t, string(r.Body), `"k"`)
}
