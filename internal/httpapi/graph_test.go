package httpapi_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// graphEntity resolves an entity through the API and returns its id.
func graphEntity(t *testing.T, s *apptest.Server, key string, body map[string]any, want int) string {
	t.Helper()
	r := s.Do("POST", "/v1/graph/entities", key, body)
	require.Equal(t, want, r.Status, "%s", r.Body)
	return r.Map(t)["id"].(string)
}

func items(t *testing.T, r *apptest.Response) []map[string]any {
	t.Helper()
	var l struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"next_cursor"`
	}
	r.JSON(t, &l)
	return l.Items
}

// requireProblemField checks a 422 names the field.
func requireProblemField(t *testing.T, r *apptest.Response, field string) {
	t.Helper()
	require.Equal(t, 422, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"`+field+`"`, "the problem names %s", field)
}

// TestGraphAPI drives every graph route through the real server: resolution, relations with
// a contradiction closing the old one, as-of reads, history paging, neighbours, search,
// merge and split by an admin, delete; idempotent replay; bad input naming the field.
func TestGraphAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	admin := s.NewKey("acme", "admin")

	ana := graphEntity(t, s, agent, map[string]any{"name": "Ana Silva", "aliases": []string{"Ana"}, "type": "person",
		"summary": "Manages stores", "user_id": "u1"}, 201)
	r := s.Do("POST", "/v1/graph/entities", agent, map[string]any{"name": "ana", "user_id": "u1"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, ana, r.Map(t)["id"])
	require.Equal(t, false, r.Map(t)["created"])
	require.NotNil(t, r.Map(t)["embedding"], "the server embedded name + summary")
	lisbon := graphEntity(t, s, agent, map[string]any{"name": "Lisbon store", "type": "place", "user_id": "u1"}, 201)
	porto := graphEntity(t, s, agent, map[string]any{"name": "Porto store", "type": "place", "user_id": "u1"}, 201)

	t0 := time.Now().UTC().Add(-48 * time.Hour).Truncate(time.Second)
	t1 := t0.Add(24 * time.Hour)
	rel := map[string]any{"subject_id": ana, "predicate": "Works at", "object_id": lisbon, "functional": true,
		"fact": "Ana works at the Lisbon store", "valid_from": t0, "user_id": "u1"}
	r1 := s.Do("POST", "/v1/graph/relations", agent, rel, "Idempotency-Key", "rel-1")
	require.Equal(t, 201, r1.Status, "%s", r1.Body)
	first := r1.Map(t)["relation"].(map[string]any)
	require.Equal(t, "works_at", first["predicate"])
	r2 := s.Do("POST", "/v1/graph/relations", agent, rel, "Idempotency-Key", "rel-1")
	require.Equal(t, 201, r2.Status)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(r1.Body), string(r2.Body))
	r = s.Do("POST", "/v1/graph/relations", agent, rel)
	require.Equal(t, 200, r.Status, "the same relation in force is answered, not written: %s", r.Body)
	require.Equal(t, false, r.Map(t)["created"])

	rel2 := map[string]any{"subject_id": ana, "predicate": "works_at", "object_id": porto, "functional": true,
		"valid_from": t1, "user_id": "u1"}
	r = s.Do("POST", "/v1/graph/relations", agent, rel2)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	require.Equal(t, []any{first["id"]}, r.Map(t)["closed"], "the contradiction closed the old relation")

	about := func(q string) []map[string]any {
		t.Helper()
		r := s.Do("GET", "/v1/graph/entities/"+ana+q, agent, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var a struct {
			Entity    map[string]any   `json:"entity"`
			Relations []map[string]any `json:"relations"`
		}
		r.JSON(t, &a)
		require.Equal(t, ana, a.Entity["id"])
		return a.Relations
	}
	now := about("")
	require.Len(t, now, 1)
	require.Equal(t, porto, now[0]["object_id"])
	then := about("?as_of=" + url.QueryEscape(t0.Add(time.Hour).Format(time.RFC3339)))
	require.Len(t, then, 1)
	require.Equal(t, lisbon, then[0]["object_id"], "as of a day ago: Lisbon")
	known := about("?as_of=" + url.QueryEscape(t1.Add(time.Hour).Format(time.RFC3339)) +
		"&recorded_as_of=" + url.QueryEscape(time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)))
	require.Empty(t, known, "an hour ago Strata knew nothing of these relations")

	// History, paged.
	r = s.Do("GET", "/v1/graph/entities/"+ana+"/history?limit=1", agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var h struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"next_cursor"`
	}
	r.JSON(t, &h)
	require.Len(t, h.Items, 1)
	require.NotEmpty(t, h.NextCursor)
	r = s.Do("GET", "/v1/graph/entities/"+ana+"/history?limit=1&cursor="+h.NextCursor, agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	second := items(t, r)
	require.Len(t, second, 1)
	require.NotEqual(t, h.Items[0]["id"], second[0]["id"])

	// Neighbours: Porto (in force), not Lisbon (closed).
	r = s.Do("GET", "/v1/graph/entities/"+ana+"/neighbors?depth=2", agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	ns := items(t, r)
	require.Len(t, ns, 1)
	require.Equal(t, porto, ns[0]["entity"].(map[string]any)["id"])

	// Search: the exact alias leads.
	r = s.Do("GET", "/v1/graph/entities?q=Ana&user_id=u1", agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	hits := items(t, r)
	require.NotEmpty(t, hits)
	require.Equal(t, ana, hits[0]["entity"].(map[string]any)["id"])
	require.Equal(t, true, hits[0]["exact"])

	// Bad input: 422 naming the field.
	requireProblemField(t, s.Do("GET", "/v1/graph/entities/"+ana+"/neighbors?depth=4", agent, nil), "query.depth")
	requireProblemField(t, s.Do("GET", "/v1/graph/entities/"+ana+"?as_of=yesterday", agent, nil), "query.as_of")
	requireProblemField(t, s.Do("GET", "/v1/graph/entities/"+ana+"/history?cursor=zz", agent, nil), "query.cursor")
	requireProblemField(t, s.Do("GET", "/v1/graph/entities?q=%20", agent, nil), "query.q")
	requireProblemField(t, s.Do("POST", "/v1/graph/entities", agent, map[string]any{"name": "x\u0000y"}), "body.name")
	requireProblemField(t, s.Do("POST", "/v1/graph/relations", agent, map[string]any{"subject_id": "nope", "predicate": "p", "object_value": "v"}), "body.subject_id")
	requireProblemField(t, s.Do("POST", "/v1/graph/relations", agent, map[string]any{"subject_id": ana, "predicate": "p", "user_id": "u1"}), "body.object_id")

	// Merge and split: admins only.
	dup := graphEntity(t, s, agent, map[string]any{"name": "A. Silva", "user_id": "u1"}, 201)
	r = s.Do("POST", "/v1/graph/entities/"+dup+"/merge", agent, map[string]any{"into": ana})
	require.Equal(t, 403, r.Status, "%s", r.Body)
	r = s.Do("POST", "/v1/graph/entities/"+dup+"/merge", admin, map[string]any{"into": ana})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Contains(t, r.Map(t)["survivor"].(map[string]any)["aliases"], "A. Silva")
	r = s.Do("GET", "/v1/graph/entities/"+dup, agent, nil)
	require.Equal(t, 200, r.Status, "a merged id reads its survivor: %s", r.Body)
	require.Equal(t, ana, r.Map(t)["entity"].(map[string]any)["id"])
	r = s.Do("POST", "/v1/graph/entities/"+ana+"/split", admin, map[string]any{"name": "A. Silva (the other)", "aliases": []string{"A. Silva"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotEqual(t, ana, r.Map(t)["new"].(map[string]any)["id"])

	// Delete.
	r = s.Do("DELETE", "/v1/graph/entities/"+porto, agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.EqualValues(t, 1, r.Map(t)["entities"])
	require.EqualValues(t, 1, r.Map(t)["relations"])
	require.Equal(t, 404, s.Do("GET", "/v1/graph/entities/"+porto, agent, nil).Status)
	require.Len(t, about(""), 0, "the relation went with its object")
}

// TestGraphAPIOrgIsolation: another org's key sees nothing of org A's graph: 404 for its
// ids (as for an id that exists nowhere), empty searches, no writes onto its entities.
func TestGraphAPIOrgIsolation(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	a := s.NewKey("org-a", "agent")
	b := s.NewKey("org-b", "admin")
	ana := graphEntity(t, s, a, map[string]any{"name": "Ana"}, 201)
	store := graphEntity(t, s, a, map[string]any{"name": "Lisbon store"}, 201)
	r := s.Do("POST", "/v1/graph/relations", a, map[string]any{"subject_id": ana, "predicate": "manages", "object_id": store})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	for _, p := range []string{"", "/neighbors", "/history"} {
		r := s.Do("GET", "/v1/graph/entities/"+ana+p, b, nil)
		require.Equal(t, 404, r.Status, "%s: %s", p, r.Body)
	}
	r = s.Do("GET", "/v1/graph/entities?q=Ana", b, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, items(t, r))
	require.Equal(t, 404, s.Do("DELETE", "/v1/graph/entities/"+ana, b, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/graph/entities/"+ana+"/merge", b, map[string]any{"into": store}).Status)
	r = s.Do("POST", "/v1/graph/relations", b, map[string]any{"subject_id": ana, "predicate": "p", "object_value": "v"})
	require.Equal(t, 404, r.Status, "%s", r.Body)
	// B resolving the same name makes its own entity.
	require.NotEqual(t, ana, graphEntity(t, s, b, map[string]any{"name": "Ana"}, 201))
	r = s.Do("GET", "/v1/graph/entities/"+ana, a, nil)
	require.Equal(t, 200, r.Status)
	var about struct {
		Relations []any `json:"relations"`
	}
	r.JSON(t, &about)
	require.Len(t, about.Relations, 1)
}

// TestGraphAPIRestriction: while a subject is restricted (GDPR Art. 18) their entities are
// refused (403) by id, left out of searches and walks and of other entities' relations;
// lifting the restriction restores them.
func TestGraphAPIRestriction(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	ana := graphEntity(t, s, agent, map[string]any{"name": "Ana", "user_id": "u-ana"}, 201)
	shop := graphEntity(t, s, agent, map[string]any{"name": "Ana's shop"}, 201) // org-level
	r := s.Do("POST", "/v1/graph/relations", agent, map[string]any{"subject_id": ana, "predicate": "owns", "object_id": shop, "user_id": "u-ana"})
	require.Equal(t, 201, r.Status, "%s", r.Body)

	// Writes leave audit rows (the unit of work's), without the names.
	for action, n := range map[string]int{"resolve-graph-entity": 2, "add-graph-relation": 1} {
		r := s.Do("GET", "/v1/audit?action="+action, comp, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		require.Len(t, items(t, r), n, action)
		require.NotContains(t, string(r.Body), "Ana", "the audit log keeps no bodies")
	}

	require.Equal(t, 201, s.Do("POST", "/v1/gdpr/restrictions/u-ana", comp, map[string]any{"reason": "contested"}).Status)
	for _, p := range []string{"", "/neighbors", "/history"} {
		r := s.Do("GET", "/v1/graph/entities/"+ana+p, agent, nil)
		require.Equal(t, 403, r.Status, "%s: %s", p, r.Body)
	}
	r = s.Do("GET", "/v1/graph/entities?q=Ana&user_id=u-ana", agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	for _, h := range items(t, r) {
		require.NotEqual(t, ana, h["entity"].(map[string]any)["id"], "a restricted subject's entity is not found")
	}
	r = s.Do("GET", "/v1/graph/entities/"+shop, agent, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), ana, "the relation from the restricted subject's entity is left out")
	r = s.Do("GET", "/v1/graph/entities/"+shop+"/neighbors", agent, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, items(t, r))

	require.Equal(t, 200, s.Do("DELETE", "/v1/gdpr/restrictions/u-ana", comp, nil).Status)
	require.Equal(t, 200, s.Do("GET", "/v1/graph/entities/"+ana, agent, nil).Status)
	r = s.Do("GET", "/v1/graph/entities/"+shop+"/neighbors", agent, nil)
	require.Len(t, items(t, r), 1)
}

// TestContextGraphSection: POST /v1/context gains the entities the query mentions, with
// their relations in force visible to the scope, packed with the other sections and saying
// why each was chosen; an org without entities gets a note, not a lookup; a restricted
// subject's entity stays out; a tight budget leaves it out with the rest.
func TestContextGraphSection(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	other := s.NewKey("empty-org", "agent")

	graphSec := func(c ctxResp) (sec struct {
		Text, Note    string
		Included, Why []string
	}) {
		t.Helper()
		for _, p := range c.Sections {
			if p.Name == "graph" {
				sec.Text, sec.Note, sec.Included, sec.Why = p.Text, p.Note, p.Included, p.Why
				return sec
			}
		}
		t.Fatal("no graph section")
		return sec
	}
	c := getContext(t, s, other, map[string]any{"user_id": "u1", "query": "what does Ana manage?"})
	require.Equal(t, "this org has no entities", graphSec(c).Note)

	ana := graphEntity(t, s, agent, map[string]any{"name": "Ana Silva", "aliases": []string{"Ana"}, "type": "person", "user_id": "u1"}, 201)
	store := graphEntity(t, s, agent, map[string]any{"name": "Lisbon store", "summary": "The flagship"}, 201)
	bob := graphEntity(t, s, agent, map[string]any{"name": "Bob", "user_id": "u2"}, 201)
	for _, rel := range []map[string]any{
		{"subject_id": ana, "predicate": "manages", "object_id": store, "fact": "Ana manages the Lisbon store", "user_id": "u1"},
		{"subject_id": ana, "predicate": "title", "object_value": "director", "functional": true, "user_id": "u1"},
		{"subject_id": bob, "predicate": "visited", "object_id": store, "fact": "Bob visited the Lisbon store", "user_id": "u2"},
	} {
		r := s.Do("POST", "/v1/graph/relations", agent, rel)
		require.Equal(t, 201, r.Status, "%s", r.Body)
	}

	c = getContext(t, s, agent, map[string]any{"user_id": "u1", "query": "Did ana's team hit target at the Lisbon Store?"})
	g := graphSec(c)
	require.ElementsMatch(t, []string{ana, store}, g.Included, "%+v", g)
	require.Contains(t, g.Why, "mentioned: 'ana'")
	require.Contains(t, g.Why, "mentioned: 'Lisbon Store'")
	require.Contains(t, g.Text, "Ana Silva (person; also: Ana)")
	require.Contains(t, g.Text, "Ana manages the Lisbon store")
	require.Contains(t, g.Text, "Ana Silva title director")
	require.NotContains(t, g.Text, "Bob", "a relation written for another user stays out")
	require.Contains(t, c.Prompt, g.Text)

	// u2 does not see u1's entity.
	c = getContext(t, s, agent, map[string]any{"user_id": "u2", "query": "Ana and the Lisbon store"})
	g = graphSec(c)
	require.Equal(t, []string{store}, g.Included)
	require.Contains(t, g.Text, "Bob visited the Lisbon store")

	// Packed within the budget with the others: a budget too small leaves it out, and says so.
	c = getContext(t, s, agent, map[string]any{"user_id": "u1", "query": "Ana", "max_tokens": 50})
	require.LessOrEqual(t, c.Tokens, 50)
	g = graphSec(c)
	if len(g.Included) == 0 {
		require.NotEmpty(t, g.Note)
	}

	// Restricted (Art. 18): u2's context is refused wholesale, graph section included, and
	// nothing of u2's reaches an org-level context.
	require.Equal(t, 201, s.Do("POST", "/v1/gdpr/restrictions/u2", comp, map[string]any{"reason": "contested"}).Status)
	c = getContext(t, s, agent, map[string]any{"user_id": "u2", "query": "Bob and the Lisbon store"})
	require.Contains(t, graphSec(c).Note, "restricted")
	require.Empty(t, graphSec(c).Included)
	c = getContext(t, s, agent, map[string]any{"query": "Bob and the Lisbon store"})
	g = graphSec(c)
	require.Equal(t, []string{store}, g.Included)
	require.NotContains(t, c.Prompt, "Bob")
}

// TestGraphAPIQuarantineAndExport: through the API, a relation an agent under an active
// quarantine wrote is left out of the entity's reads until the quarantine is released; the
// subject's export (GET /v1/gdpr/exports) carries their entities and relations.
func TestGraphAPIQuarantineAndExport(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent, admin, comp := s.NewKey("gq", "agent"), s.NewKey("gq", "admin"), s.NewKey("gq", "compliance")
	ana := graphEntity(t, s, agent, map[string]any{"name": "Ana", "type": "person", "user_id": "u1"}, 201)
	q := s.Do("POST", "/v1/admin/quarantines", admin, map[string]any{"agent_id": "rogue",
		"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "reason": "poisoned"})
	require.Equal(t, 201, q.Status, "%s", q.Body)
	for agentID, value := range map[string]string{"good": "coffee", "rogue": "poison"} {
		r := s.Do("POST", "/v1/graph/relations", agent, map[string]any{"subject_id": ana, "predicate": "likes",
			"object_value": value, "user_id": "u1", "agent_id": agentID})
		require.Equal(t, 201, r.Status, "%s", r.Body)
	}
	likes := func() []string {
		t.Helper()
		r := s.Do("GET", "/v1/graph/entities/"+ana+"?user_id=u1&agent_id=good", agent, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var a struct {
			Relations []struct {
				ObjectValue string `json:"object_value"`
			} `json:"relations"`
		}
		r.JSON(t, &a)
		var out []string
		for _, rel := range a.Relations {
			out = append(out, rel.ObjectValue)
		}
		return out
	}
	require.Equal(t, []string{"coffee"}, likes(), "the quarantined agent's relation is left out")
	require.Equal(t, 200, s.Do("POST", "/v1/admin/quarantines/"+q.Map(t)["id"].(string)+"/release", admin, nil).Status)
	require.ElementsMatch(t, []string{"coffee", "poison"}, likes(), "released: shown again")

	r := s.Do("GET", "/v1/gdpr/exports?user_id=u1", comp, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"tier":"graph","type":"entity","id":"`+ana+`"`)
	require.Equal(t, 2, strings.Count(string(r.Body), `"tier":"graph","type":"relation"`))
}
