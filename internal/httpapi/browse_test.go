package httpapi_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestBrowseMemoriesAndSessions: GET /v1/memories filters by scope, kind, trust and
// provenance, pages newest first through its cursor; GET /v1/sessions lists a user's
// sessions newest first; bad filters are problems naming the query field; another org sees
// nothing; a restricted subject's items are left out.
func TestBrowseMemoriesAndSessions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key, other, comp := s.NewKey("acme", "agent"), s.NewKey("globex", "agent"), s.NewKey("acme", "compliance")

	var ids []string
	for i := 0; i < 7; i++ {
		body := map[string]any{"text": fmt.Sprintf("Sam prefers take %d of the interview", i), "user_id": "sam"}
		switch {
		case i%3 == 1:
			body["kind"], body["trust"] = "preference", "user_stated"
		case i%3 == 2:
			body["trust"], body["session_id"] = "extracted", "s-2"
		}
		m := need(t, s.Do("POST", "/v1/memories", key, body), 201).Map(t)
		ids = append(ids, m["id"].(string))
	}
	need(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": "Ana likes 24 fps", "user_id": "ana"}), 201)

	list := func(q string) ([]string, string) {
		m := need(t, s.Do("GET", "/v1/memories?"+q, key, nil), 200).Map(t)
		var out []string
		for _, it := range m["items"].([]any) {
			out = append(out, it.(map[string]any)["id"].(string))
		}
		c, _ := m["next_cursor"].(string)
		return out, c
	}
	all, _ := list("user_id=sam")
	require.Equal(t, []string{ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}, all, "newest first")
	prefs, _ := list("user_id=sam&kind=preference")
	require.Equal(t, []string{ids[4], ids[1]}, prefs)
	ext, _ := list("user_id=sam&provenance=extracted")
	require.Equal(t, []string{ids[5], ids[2]}, ext)
	tr, _ := list("trust=extracted&session_id=s-2")
	require.Equal(t, ext, tr)
	written, _ := list("user_id=sam&provenance=written")
	require.Len(t, written, 5)

	// Paging: three pages of 3, 3, 1, no item twice.
	var paged []string
	cursor := ""
	for range 5 {
		q := "user_id=sam&limit=3"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		page, next := list(q)
		paged = append(paged, page...)
		if cursor = next; cursor == "" {
			break
		}
	}
	require.Equal(t, all, paged)

	// A memory updated gets a new version: the list shows the current one, first.
	upd := need(t, s.Do("PATCH", "/v1/memories/"+ids[0], key, map[string]any{"text": "Sam prefers take 0, re-cut"}), 200).Map(t)
	all2, _ := list("user_id=sam")
	require.Equal(t, upd["id"], all2[0])
	require.NotContains(t, all2, ids[0])

	// Time filters.
	first := need(t, s.Do("GET", "/v1/memories/"+ids[3], key, nil), 200).Map(t)
	since, _ := list("user_id=sam&created_after=" + url.QueryEscape(first["valid_from"].(string)))
	require.Equal(t, []string{upd["id"].(string), ids[6], ids[5], ids[4]}, since)

	// Bad filters name the query field; nothing else is answered.
	requireProblem(t, s.Do("GET", "/v1/memories?trust=gospel", key, nil), 422, "query.trust")
	requireProblem(t, s.Do("GET", "/v1/memories?provenance=rumour", key, nil), 422, "query.provenance")
	requireProblem(t, s.Do("GET", "/v1/memories?created_after=yesterday", key, nil), 422, "query.created_after")
	requireProblem(t, s.Do("GET", "/v1/memories?created_after=2026-12-02T00:00:00Z&created_before=2026-12-01T00:00:00Z", key, nil), 422, "query.created_after")
	requireProblem(t, s.Do("GET", "/v1/memories?cursor=not-a-cursor", key, nil), 422, "query.cursor")
	requireProblem(t, s.Do("GET", "/v1/memories?user_id=bad%20id", key, nil), 422, "query.user_id")
	requireProblem(t, s.Do("GET", "/v1/memories?limit=5000", key, nil), 422, "query.limit")

	// Another org sees none of it.
	m := need(t, s.Do("GET", "/v1/memories", other, nil), 200).Map(t)
	require.Empty(t, m["items"])

	// Sessions: a user's, newest first, paged.
	for _, sess := range []string{"s-1", "s-2", "s-3"} {
		need(t, s.Do("POST", "/v1/sessions/"+sess+"/messages", key, map[string]any{"role": "user", "content": "hi", "user_id": "sam"}), 201)
	}
	need(t, s.Do("POST", "/v1/sessions/a-1/messages", key, map[string]any{"role": "user", "content": "hi", "user_id": "ana"}), 201)
	sl := need(t, s.Do("GET", "/v1/sessions?user_id=sam&limit=2", key, nil), 200).Map(t)
	items := sl["items"].([]any)
	require.Len(t, items, 2)
	require.Equal(t, "s-3", items[0].(map[string]any)["session_id"])
	require.Equal(t, "s-2", items[1].(map[string]any)["session_id"])
	require.EqualValues(t, 1, items[0].(map[string]any)["turns"])
	sl2 := need(t, s.Do("GET", "/v1/sessions?user_id=sam&limit=2&cursor="+url.QueryEscape(sl["next_cursor"].(string)), key, nil), 200).Map(t)
	require.Len(t, sl2["items"], 1)
	require.Equal(t, "s-1", sl2["items"].([]any)[0].(map[string]any)["session_id"])
	require.Nil(t, sl2["next_cursor"])
	allS := need(t, s.Do("GET", "/v1/sessions", key, nil), 200).Map(t)
	require.Len(t, allS["items"], 4)
	require.Empty(t, need(t, s.Do("GET", "/v1/sessions", other, nil), 200).Map(t)["items"])
	requireProblem(t, s.Do("GET", "/v1/sessions?cursor=zzz", key, nil), 422, "query.cursor")

	// Restricted subject (Art. 18): left out of both lists.
	need(t, s.Do("POST", "/v1/gdpr/restrictions/sam", comp, map[string]any{"reason": "disputed"}), 200, 201)
	left, _ := list("")
	require.Len(t, left, 1)
	allS = need(t, s.Do("GET", "/v1/sessions", key, nil), 200).Map(t)
	require.Len(t, allS["items"], 1)
}
