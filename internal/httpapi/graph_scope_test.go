package httpapi_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestGraphSourceMemoryInScope is issue 57 finding 7: an agent of the org links another
// user's memory (or a restricted subject's) as the provenance of its own user's entity or
// relation, or of an org-level one. The source memory must be in the write's scope.
func TestGraphSourceMemoryInScope(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key, comp := s.NewKey("acme", "agent"), s.NewKey("acme", "compliance")
	memOf := func(user string) string {
		body := map[string]any{"text": "a memory of " + user}
		if user != "" {
			body["user_id"] = user
		}
		r := s.Do("POST", "/v1/memories", key, body)
		require.Equal(t, 201, r.Status, "%s", r.Body)
		return r.Map(t)["id"].(string)
	}
	victim, rose, own, org := memOf("victim"), memOf("rose"), memOf("me"), memOf("")
	need(t, s.Do("POST", "/v1/gdpr/restrictions/rose", comp, map[string]any{"reason": "disputed"}), 200, 201)

	for _, src := range []string{victim, rose} {
		requireProblemField(t, s.Do("POST", "/v1/graph/entities", key, map[string]any{"name": "Ana", "user_id": "me",
			"source_memory_id": src}), "body.source_memory_id")
		requireProblemField(t, s.Do("POST", "/v1/graph/entities", key, map[string]any{"name": "Ana",
			"source_memory_id": src}), "body.source_memory_id")
	}
	ana := graphEntity(t, s, key, map[string]any{"name": "Ana", "user_id": "me", "source_memory_id": own}, 201)
	r := s.Do("POST", "/v1/graph/relations", key, map[string]any{"subject_id": ana, "predicate": "likes",
		"object_value": "tea", "user_id": "me", "source_memory_id": victim})
	requireProblemField(t, r, "body.source_memory_id")
	require.Equal(t, 422, r.Status)
	r = s.Do("POST", "/v1/graph/relations", key, map[string]any{"subject_id": ana, "predicate": "likes",
		"object_value": "tea", "user_id": "me", "source_memory_id": own})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	graphEntity(t, s, key, map[string]any{"name": "Acme HQ", "source_memory_id": org}, 201)
	requireProblemField(t, s.Do("POST", "/v1/graph/entities", key, map[string]any{"name": "Bo", "user_id": "me",
		"source_memory_id": org}), "body.source_memory_id")
}

// TestGraphAliasTooLongIs422 is issue 57 finding 8: an alias over the length limit is a
// 422 naming it (body.aliases[0]), on resolve and on split, not a 413.
func TestGraphAliasTooLongIs422(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key, admin := s.NewKey("acme", "agent"), s.NewKey("acme", "admin")
	long := strings.Repeat("a", 501)
	r := s.Do("POST", "/v1/graph/entities", key, map[string]any{"name": "a", "aliases": []string{long}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	requireProblemField(t, r, "body.aliases[0]")
	ana := graphEntity(t, s, key, map[string]any{"name": "Ana"}, 201)
	r = s.Do("POST", "/v1/graph/entities/"+ana+"/split", admin, map[string]any{"name": "Bo", "aliases": []string{long}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	requireProblemField(t, r, "body.aliases[0]")
}
