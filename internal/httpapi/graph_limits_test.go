package httpapi_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// Issue 57 item 7: the graph's small holes, attacked from outside.

// incompressible returns n distinct-looking 4-byte characters (CJK extension B, which has
// no case), so Postgres cannot compress an index entry made of them.
func incompressible(n int) string {
	r := rand.New(rand.NewPCG(57, 7))
	var b strings.Builder
	for range n {
		b.WriteRune(rune(0x20000 + r.IntN(0xA6D0)))
	}
	return b.String()
}

// TestGraphEntityTooLongForIndex: a name (or alias) of 500 four-byte characters in a
// scope of 200-character ids made an index entry over Postgres's b-tree row limit
// (SQLSTATE 54000): a 500 that logged the whole name. It is a 422 naming the field now,
// nothing is written and the name is in no log; every other text field at its documented
// maximum still writes.
func TestGraphEntityTooLongForIndex(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	// The index entry is (org, user, agent, session, name key): long ids leave the name less.
	key := s.NewKey(strings.Repeat("o", 150), "agent")
	id := func(c string) string { return strings.Repeat(c, 200) }
	scope := map[string]any{"user_id": id("u"), "agent_id": id("a"), "session_id": id("s")}
	with := func(m map[string]any) map[string]any {
		for k, v := range scope {
			m[k] = v
		}
		return m
	}
	long := incompressible(500)
	r := s.Do("POST", "/v1/graph/entities", key, with(map[string]any{"name": long}))
	requireProblemField(t, r, "body.name")
	r = s.Do("POST", "/v1/graph/entities", key, with(map[string]any{"name": "Ana", "aliases": []string{"A.", long}}))
	requireProblemField(t, r, "body.aliases[1]")
	r = s.Do("GET", "/v1/graph/entities?q=Ana&user_id="+id("u")+"&agent_id="+id("a")+"&session_id="+id("s"), key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Empty(t, items(t, r), "nothing was written")
	require.NotContains(t, s.Logs(), long[:40], "the name is in no log")

	// The limit class of the other fields: each at its maximum, in four-byte characters,
	// in the widest scope, is stored.
	fits := incompressible(375) // 1500 bytes: the most a name may take
	subject := graphEntity(t, s, key, with(map[string]any{"name": fits, "aliases": []string{incompressible(374) + "x"},
		"type": incompressible(100), "summary": incompressible(8192)}), 201)
	value := incompressible(500)
	r = s.Do("POST", "/v1/graph/relations", key, with(map[string]any{"subject_id": subject,
		"predicate": incompressible(200), "object_value": value, "fact": incompressible(2000)}))
	require.Equal(t, 201, r.Status, "%s", r.Body)
	require.NotContains(t, s.Logs(), "internal error")
}

// TestGraphMergeProblemNamesRealField: a bad merge named body.merged_id, a field the
// request does not have; it names the path's id (the entity merged) now.
func TestGraphMergeProblemNamesRealField(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	admin := s.NewKey("acme", "admin")
	ana := graphEntity(t, s, agent, map[string]any{"name": "Ana", "user_id": "u1"}, 201)
	other := graphEntity(t, s, agent, map[string]any{"name": "Ana S.", "user_id": "u2"}, 201)

	r := s.Do("POST", "/v1/graph/entities/"+ana+"/merge", admin, map[string]any{"into": ana})
	requireProblemLocation(t, r, "path.id")
	r = s.Do("POST", "/v1/graph/entities/"+other+"/merge", admin, map[string]any{"into": ana})
	requireProblemLocation(t, r, "path.id")
	r = s.Do("POST", "/v1/graph/entities/00000000-0000-7000-8000-000000000000/merge", admin, map[string]any{"into": ana})
	require.Equal(t, 404, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), "merged_id")
}

// requireProblemLocation checks a problem's errors[].location are exactly loc.
func requireProblemLocation(t *testing.T, r *apptest.Response, loc string) {
	t.Helper()
	require.Equal(t, 422, r.Status, "%s", r.Body)
	var p struct {
		Errors []struct {
			Location string `json:"location"`
		} `json:"errors"`
	}
	r.JSON(t, &p)
	require.NotEmpty(t, p.Errors, "%s", r.Body)
	for _, e := range p.Errors {
		require.Equal(t, loc, e.Location, "%s", r.Body)
	}
}

// TestGraphSourceMemoryOfAnotherOrg: a relation (or entity) could name any memory id as its
// source, another org's too, and erasure by memory follows that link. A memory the
// caller's org does not have is a 422 naming body.source_memory_id, nothing written; the
// org's own memory is accepted.
func TestGraphSourceMemoryOfAnotherOrg(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	mine := s.NewKey("acme", "agent")
	theirs := s.NewKey("globex", "agent")
	_, own := create(t, s, mine, map[string]any{"text": "Ana works in Lisbon", "user_id": "u1"})
	_, foreign := create(t, s, theirs, map[string]any{"text": "Bo works in Porto", "user_id": "u1"})

	ana := graphEntity(t, s, mine, map[string]any{"name": "Ana", "user_id": "u1"}, 201)
	for _, src := range []string{foreign.ID, "00000000-0000-7000-8000-000000000000"} {
		r := s.Do("POST", "/v1/graph/relations", mine, map[string]any{"subject_id": ana, "predicate": "lives_in",
			"object_value": "Lisbon", "user_id": "u1", "source_memory_id": src})
		requireProblemLocation(t, r, "body.source_memory_id")
		r = s.Do("POST", "/v1/graph/entities", mine, map[string]any{"name": "Bo", "user_id": "u1", "source_memory_id": src})
		requireProblemLocation(t, r, "body.source_memory_id")
	}
	r := s.Do("GET", "/v1/graph/entities/"+ana+"/history", mine, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Empty(t, items(t, r), "no relation was written")
	r = s.Do("GET", "/v1/graph/entities?q=Bo&user_id=u1", mine, nil)
	for _, it := range items(t, r) {
		require.NotEqual(t, "Bo", it["entity"].(map[string]any)["name"], "no entity was written")
	}

	r = s.Do("POST", "/v1/graph/relations", mine, map[string]any{"subject_id": ana, "predicate": "lives_in",
		"object_value": "Lisbon", "user_id": "u1", "source_memory_id": own.ID})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	graphEntity(t, s, mine, map[string]any{"name": "Bo", "user_id": "u1", "source_memory_id": own.ID}, 201)
}
