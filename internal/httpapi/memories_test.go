package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/testenv"
)

type memResp struct {
	ID           string         `json:"id"`
	RootID       string         `json:"root_id"`
	Version      int            `json:"version"`
	Kind         string         `json:"kind"`
	Text         string         `json:"text"`
	UserID       string         `json:"user_id"`
	Metadata     map[string]any `json:"metadata"`
	Trust        string         `json:"trust"`
	SupersededBy string         `json:"superseded_by"`
	ValidFrom    time.Time      `json:"valid_from"`
	ValidTo      *time.Time     `json:"valid_to"`
	Deduplicated bool           `json:"deduplicated"`
	DedupCount   int            `json:"dedup_count"`
	LastVerified *time.Time     `json:"last_verified_at"`
	Dedup        *struct {
		Reason     string  `json:"reason"`
		Similarity float64 `json:"similarity"`
	} `json:"dedup"`
	Provenance struct {
		KeyID   string `json:"key_id"`
		AgentID string `json:"agent_id"`
		JobID   string `json:"job_id"`
	} `json:"provenance"`
	Embedding struct {
		Embedder string `json:"embedder"`
		Model    string `json:"model"`
		Dims     int    `json:"dims"`
	} `json:"embedding"`
}

type searchResp struct {
	Items []struct {
		Memory memResp        `json:"memory"`
		Score  map[string]any `json:"score"`
		Stale  bool           `json:"stale"`
	} `json:"items"`
	Search struct {
		Strategy string `json:"strategy"`
	} `json:"search"`
}

func (r searchResp) texts() []string {
	out := []string{}
	for _, it := range r.Items {
		out = append(out, it.Memory.Text)
	}
	return out
}

func create(t *testing.T, s *apptest.Server, key string, body map[string]any) (int, memResp) {
	t.Helper()
	r := s.Do("POST", "/v1/memories", key, body)
	require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
	var m memResp
	r.JSON(t, &m)
	return r.Status, m
}

func search(t *testing.T, s *apptest.Server, key string, body map[string]any) searchResp {
	t.Helper()
	r := s.Do("POST", "/v1/memories/search", key, body)
	require.Equal(t, 200, r.Status, string(r.Body))
	var out searchResp
	r.JSON(t, &out)
	return out
}

func ownerCount(t *testing.T, s *apptest.Server, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestMemoriesCreateAndDedup(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_DEDUP_THRESHOLD", "0.88"))
	key := s.NewKey("acme", "agent")

	st, m := create(t, s, key, map[string]any{"text": "User prefers dark mode.", "user_id": "u1",
		"metadata": map[string]any{"source": "chat"}, "provenance": map[string]any{"job_id": "j1", "event_seq": 3, "agent_id": "planner"}})
	require.Equal(t, 201, st)
	id := uuid.MustParse(m.ID)
	require.EqualValues(t, 7, id.Version(), "memory ids are UUIDv7")
	require.Equal(t, "fact", m.Kind)
	require.Equal(t, "agent_inferred", m.Trust)
	require.Equal(t, "lexical", m.Embedding.Embedder)
	require.Equal(t, embed.LexicalModel, m.Embedding.Model)
	require.Equal(t, 384, m.Embedding.Dims)
	require.NotEmpty(t, m.Provenance.KeyID)
	require.Equal(t, "planner", m.Provenance.AgentID)
	require.False(t, m.Deduplicated)

	// Exact duplicate after normalisation (case, whitespace): no row, same id, 200.
	st, d := create(t, s, key, map[string]any{"text": "  user PREFERS   dark mode. ", "user_id": "u1",
		"provenance": map[string]any{"job_id": "j2"}})
	require.Equal(t, 200, st)
	require.True(t, d.Deduplicated)
	require.Equal(t, m.ID, d.ID)
	require.Equal(t, "exact", d.Dedup.Reason)
	require.Equal(t, 1, d.DedupCount)
	require.Equal(t, "j2", d.Provenance.JobID, "provenance follows the newest write")

	// Near duplicate (cosine ≥ 0.88 with the lexical embedder).
	st, n := create(t, s, key, map[string]any{"text": "The user prefers dark mode", "user_id": "u1"})
	require.Equal(t, 200, st)
	require.Equal(t, m.ID, n.ID)
	require.Equal(t, "near", n.Dedup.Reason)
	require.GreaterOrEqual(t, n.Dedup.Similarity, 0.88)

	// Not duplicates: another scope, or a different claim.
	st, other := create(t, s, key, map[string]any{"text": "User prefers dark mode.", "user_id": "u2"})
	require.Equal(t, 201, st)
	require.NotEqual(t, m.ID, other.ID)
	st, _ = create(t, s, key, map[string]any{"text": "User prefers light mode", "user_id": "u1"})
	require.Equal(t, 201, st)
	require.Equal(t, 3, ownerCount(t, s, `SELECT count(*) FROM memories`))
}

func TestMemoriesConcurrentIdenticalWritesLeaveOneRow(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	ids := make([]string, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.Do("POST", "/v1/memories", key, map[string]any{"text": "The render farm is in Frankfurt", "agent_id": "a1"})
			statuses[i] = r.Status
			var m memResp
			_ = json.Unmarshal(r.Body, &m)
			ids[i] = m.ID
		}()
	}
	wg.Wait()
	created := 0
	for i := range 20 {
		require.Contains(t, []int{200, 201}, statuses[i])
		if statuses[i] == 201 {
			created++
		}
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, created)
	require.Equal(t, 1, ownerCount(t, s, `SELECT count(*) FROM memories`))
	require.Equal(t, 19, ownerCount(t, s, `SELECT dedup_count FROM memories`))
}

func TestMemoriesScopeCompositionAndIsolation(t *testing.T) {
	t.Parallel()
	// STRATA_SEARCH_EXACT_BELOW=1 sends every search through the HNSW index (iterative
	// scan), so isolation is proven on the index path with row-level security binding.
	for _, mode := range []struct{ name, exactBelow, strategy string }{{"hnsw", "1", "hnsw"}, {"exact", "5000", "exact"}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			s := apptest.Start(t, apptest.Env("STRATA_SEARCH_EXACT_BELOW", mode.exactBelow))
			a := s.NewKey("acme", "agent")
			b := s.NewKey("globex", "agent")
			w := func(key, text string, sc map[string]any) {
				sc["text"] = text
				create(t, s, key, sc)
			}
			w(a, "colour grading uses the org LUT", map[string]any{})
			w(a, "colour grading for u1 is warm", map[string]any{"user_id": "u1"})
			w(a, "colour grading for u2 is cold", map[string]any{"user_id": "u2"})
			w(a, "colour grading agent a1 notes", map[string]any{"agent_id": "a1"})
			w(a, "colour grading agent a2 notes", map[string]any{"agent_id": "a2"})
			w(a, "colour grading in session s1 of u1", map[string]any{"user_id": "u1", "session_id": "s1"})
			w(a, "colour grading in session s2 of u1", map[string]any{"user_id": "u1", "session_id": "s2"})
			w(a, "colour grading u2 with a1", map[string]any{"user_id": "u2", "agent_id": "a1"})
			for i := range 5 {
				w(b, fmt.Sprintf("colour grading secret of globex %d", i), map[string]any{})
				w(b, fmt.Sprintf("colour grading for u1 at globex %d", i), map[string]any{"user_id": "u1"})
			}

			r := search(t, s, a, map[string]any{"query": "colour grading", "user_id": "u1", "agent_id": "a1", "session_id": "s1", "top_k": 100})
			require.Equal(t, mode.strategy, r.Search.Strategy)
			require.ElementsMatch(t, []string{"colour grading uses the org LUT", "colour grading for u1 is warm",
				"colour grading agent a1 notes", "colour grading in session s1 of u1"}, r.texts())
			for _, it := range r.Items {
				require.Contains(t, it.Score, "rrf")
				require.Contains(t, it.Score, "recency")
			}

			r = search(t, s, a, map[string]any{"query": "colour grading", "top_k": 100})
			require.Equal(t, []string{"colour grading uses the org LUT"}, r.texts(), "no scope sees org-level only")

			r = search(t, s, b, map[string]any{"query": "colour grading for u1 is warm", "user_id": "u1", "top_k": 100})
			require.Len(t, r.Items, 10)
			for _, txt := range r.texts() {
				require.Contains(t, txt, "globex", "another org's memory never appears")
			}
			// Another org's memory is not found by id either.
			ra := search(t, s, a, map[string]any{"query": "colour grading", "user_id": "u1", "top_k": 1})
			require.Equal(t, 404, s.Do("GET", "/v1/memories/"+ra.Items[0].Memory.ID, b, nil).Status)
			require.Equal(t, 404, s.Do("DELETE", "/v1/memories/"+ra.Items[0].Memory.ID, b, nil).Status)
		})
	}
}

func TestMemoriesSearchFilters(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	_, f1 := create(t, s, key, map[string]any{"text": "export preset is ProRes 422 HQ", "kind": "preference",
		"metadata": map[string]any{"project": "p1", "tags": []string{"export"}}, "trust": "user_stated", "importance": 0.9})
	// Just after f1's valid_from (Postgres keeps microseconds); f2 is written a round trip later.
	mid := f1.ValidFrom.UTC().Add(time.Microsecond)
	_, f2 := create(t, s, key, map[string]any{"text": "export preset for the trailer is H.264", "kind": "fact",
		"metadata": map[string]any{"project": "p2"}, "trust": "tool_output"})
	_, f3 := create(t, s, key, map[string]any{"text": "export bitrate settled at 40 Mbps", "kind": "case_study.v2",
		"metadata": map[string]any{"project": "p1"}, "trust": "verified"})

	q := func(extra map[string]any) []string {
		body := map[string]any{"query": "export preset", "top_k": 10}
		for k, v := range extra {
			body[k] = v
		}
		var ids []string
		for _, it := range search(t, s, key, body).Items {
			ids = append(ids, it.Memory.ID)
		}
		return ids
	}
	require.ElementsMatch(t, []string{f1.ID, f2.ID, f3.ID}, q(nil))
	require.Equal(t, []string{f1.ID}, q(map[string]any{"kinds": []string{"preference"}}))
	require.ElementsMatch(t, []string{f1.ID, f3.ID}, q(map[string]any{"metadata": map[string]any{"project": "p1"}}))
	require.Equal(t, []string{f1.ID}, q(map[string]any{"metadata": map[string]any{"tags": []string{"export"}}}))
	require.ElementsMatch(t, []string{f2.ID, f3.ID}, q(map[string]any{"trust": []string{"tool_output", "verified"}}))
	require.Equal(t, []string{f1.ID}, q(map[string]any{"created_before": mid}))
	require.ElementsMatch(t, []string{f2.ID, f3.ID}, q(map[string]any{"created_after": mid}))
	require.Empty(t, q(map[string]any{"as_of": mid.Add(-time.Hour)}), "nothing existed an hour ago")

	// Staleness: facts past the verification age are flagged (only facts), and can be
	// excluded; verifying one makes it fresh again.
	r := search(t, s, key, map[string]any{"query": "export preset", "stale_after": "1ns"})
	for _, it := range r.Items {
		require.Equal(t, it.Memory.Kind == "fact", it.Stale, it.Memory.Text)
	}
	require.NotContains(t, q(map[string]any{"stale_after": "1ns", "exclude_stale": true}), f2.ID)
	require.Contains(t, q(map[string]any{"stale_after": "1h", "exclude_stale": true}), f2.ID)
	rv := s.Do("POST", "/v1/memories/"+f2.ID+"/verify", key, nil)
	require.Equal(t, 200, rv.Status, string(rv.Body))
	var v memResp
	rv.JSON(t, &v)
	require.NotNil(t, v.LastVerified)
	require.Contains(t, q(map[string]any{"stale_after": "1m", "exclude_stale": true}), f2.ID)

	// The ranking: importance lifts f1 above an equally matching memory.
	r = search(t, s, key, map[string]any{"query": "export preset"})
	require.Equal(t, f1.ID, r.Items[0].Memory.ID)
	sc := r.Items[0].Score
	for _, k := range []string{"vector_rank", "vector_similarity", "text_rank", "rrf", "relevance", "recency", "importance", "access", "score"} {
		require.Contains(t, sc, k)
	}
}

func TestMemoriesSupersessionHistoryAsOf(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	_, v1 := create(t, s, key, map[string]any{"text": "the delivery deadline is March 3", "user_id": "u1"})
	// Just after v1's valid_from; the PATCH below supersedes it a round trip later.
	between := v1.ValidFrom.UTC().Add(time.Microsecond)

	// Stale If-Match → 409, nothing written.
	r := s.Do("PATCH", "/v1/memories/"+v1.ID, key, map[string]any{"text": "x"}, "If-Match", `"7"`)
	require.Equal(t, 409, r.Status, string(r.Body))

	r = s.Do("PATCH", "/v1/memories/"+v1.ID, key, map[string]any{"text": "the delivery deadline moved to March 10",
		"provenance": map[string]any{"agent_id": "editor"}}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	var v2 memResp
	r.JSON(t, &v2)
	require.NotEqual(t, v1.ID, v2.ID)
	require.Equal(t, v1.ID, v2.RootID)
	require.Equal(t, 2, v2.Version)
	require.Equal(t, "u1", v2.UserID)

	r = s.Do("GET", "/v1/memories/"+v1.ID, key, nil)
	require.Equal(t, 200, r.Status)
	var old memResp
	r.JSON(t, &old)
	require.Equal(t, v2.ID, old.SupersededBy)
	require.NotNil(t, old.ValidTo)

	// The superseded version cannot be patched or verified.
	require.Equal(t, 409, s.Do("PATCH", "/v1/memories/"+v1.ID, key, map[string]any{"text": "y"}).Status)
	require.Equal(t, 409, s.Do("POST", "/v1/memories/"+v1.ID+"/verify", key, nil).Status)

	// Search sees only the current version; as_of sees the past one.
	cur := search(t, s, key, map[string]any{"query": "delivery deadline", "user_id": "u1"})
	require.Equal(t, []string{"the delivery deadline moved to March 10"}, cur.texts())
	past := search(t, s, key, map[string]any{"query": "delivery deadline", "user_id": "u1", "as_of": between})
	require.Equal(t, []string{"the delivery deadline is March 3"}, past.texts())

	// A metadata-only change is a version too; history lists all with actor and time.
	r = s.Do("PATCH", "/v1/memories/"+v2.ID, key, map[string]any{"importance": 1, "metadata": map[string]any{"k": "v"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	var v3 memResp
	r.JSON(t, &v3)
	require.Equal(t, v2.Text, v3.Text)
	r = s.Do("GET", "/v1/memories/"+v1.ID+"/history", key, nil)
	require.Equal(t, 200, r.Status)
	var h struct{ Items []memResp }
	r.JSON(t, &h)
	require.Len(t, h.Items, 3)
	for i, it := range h.Items {
		require.Equal(t, i+1, it.Version)
		require.NotEmpty(t, it.Provenance.KeyID)
		require.False(t, it.ValidFrom.IsZero())
	}
	require.Equal(t, "editor", h.Items[1].Provenance.AgentID)
	require.Equal(t, v3.ID, h.Items[1].SupersededBy)
	require.Nil(t, h.Items[2].ValidTo)
}

func TestMemoriesDeleteLeavesNoTextOrVector(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	secret := "the client's door code is 4471"
	r := s.Do("POST", "/v1/memories", key, map[string]any{"text": secret, "user_id": "u9"}, "Idempotency-Key", "k-del-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	var m memResp
	r.JSON(t, &m)
	r = s.Do("PATCH", "/v1/memories/"+m.ID, key, map[string]any{"text": secret + " (changed monthly)"}, "Idempotency-Key", "k-del-2")
	require.Equal(t, 200, r.Status, string(r.Body))
	_, keep := create(t, s, key, map[string]any{"text": "an unrelated memory about door frames", "user_id": "u9"})
	sr := s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "door code", "user_id": "u9"}, "X-Request-Id", "req-del-1")
	require.Equal(t, 200, sr.Status)
	require.Positive(t, ownerCount(t, s, `SELECT count(*) FROM idempotency_keys WHERE position('4471' in convert_from(response_body, 'UTF8')) > 0`))

	r = s.Do("DELETE", "/v1/memories/"+m.ID, key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var del struct {
		Versions []string `json:"deleted_versions"`
	}
	r.JSON(t, &del)
	require.Len(t, del.Versions, 2)

	require.Equal(t, 404, s.Do("GET", "/v1/memories/"+m.ID, key, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/memories/"+m.ID+"/history", key, nil).Status)
	require.Equal(t, 404, s.Do("DELETE", "/v1/memories/"+m.ID, key, nil).Status)
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memories WHERE text LIKE '%4471%' OR root_id = $1`, uuid.MustParse(m.ID)))
	require.Equal(t, 1, ownerCount(t, s, `SELECT count(*) FROM memories WHERE embedding IS NOT NULL`), "only the unrelated memory's vector is left")
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM idempotency_keys WHERE position('4471' in convert_from(response_body, 'UTF8')) > 0`))
	// The retrieval log keeps ids only.
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memory_retrievals r WHERE r::text LIKE '%4471%'`))
	require.Equal(t, 200, s.Do("GET", "/v1/memories/"+keep.ID, key, nil).Status)
}

func TestMemoriesRetrievalLogAndSimilarJobs(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	_, j1 := create(t, s, key, map[string]any{"kind": "job", "text": "reframed a 16:9 interview to 9:16 vertical with face tracking",
		"metadata": map[string]any{"job_id": "job-17", "outcome": "succeeded", "parameters": map[string]any{"aspect": "9:16", "tracking": "face"}}})
	create(t, s, key, map[string]any{"kind": "job", "text": "translated captions of a cooking show to German",
		"metadata": map[string]any{"job_id": "job-18", "outcome": "failed"}})
	create(t, s, key, map[string]any{"kind": "fact", "text": "vertical reframe of interviews needs face tracking"})

	r := s.Do("POST", "/v1/jobs/similar", key, map[string]any{"query": "reframe an interview to vertical 9:16", "top_k": 1, "job_id": "job-99"},
		"X-Request-Id", "req-sim-1")
	require.Equal(t, 200, r.Status, string(r.Body))
	var sim struct {
		Items []struct {
			MemoryID   string         `json:"memory_id"`
			JobID      string         `json:"job_id"`
			Outcome    string         `json:"outcome"`
			Parameters map[string]any `json:"parameters"`
		}
	}
	r.JSON(t, &sim)
	require.Len(t, sim.Items, 1)
	require.Equal(t, j1.ID, sim.Items[0].MemoryID)
	require.Equal(t, "job-17", sim.Items[0].JobID)
	require.Equal(t, "succeeded", sim.Items[0].Outcome)
	require.Equal(t, "9:16", sim.Items[0].Parameters["aspect"])

	sr := s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "vertical reframe", "session_id": "s5", "job_id": "job-100"},
		"X-Request-Id", "req-search-2")
	require.Equal(t, 200, sr.Status)
	r = s.Do("GET", "/v1/memories/"+j1.ID+"/retrievals?limit=1", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var page struct {
		Items []struct {
			RequestID string `json:"request_id"`
			Operation string `json:"operation"`
			JobID     string `json:"job_id"`
			KeyID     string `json:"key_id"`
			SessionID string `json:"session_id"`
		}
		NextCursor string `json:"next_cursor"`
	}
	r.JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, "req-sim-1", page.Items[0].RequestID)
	require.Equal(t, "similar_jobs", page.Items[0].Operation)
	require.Equal(t, "job-99", page.Items[0].JobID)
	require.NotEmpty(t, page.Items[0].KeyID)
	require.NotEmpty(t, page.NextCursor)
	r = s.Do("GET", "/v1/memories/"+j1.ID+"/retrievals?cursor="+page.NextCursor, key, nil)
	page.NextCursor = ""
	r.JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, "req-search-2", page.Items[0].RequestID)
	require.Equal(t, "s5", page.Items[0].SessionID)
	require.Empty(t, page.NextCursor)

	// Access counts follow what was served (written in batches, STRATA_ACCESS_FLUSH).
	require.Eventually(t, func() bool {
		return ownerCount(t, s, `SELECT access_count FROM memories WHERE id = $1`, uuid.MustParse(j1.ID)) == 2
	}, 15*time.Second, 20*time.Millisecond)
}

func TestMemoriesBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	compliance := s.NewKey("acme", "compliance")
	cases := []struct {
		name   string
		path   string
		body   any
		status int
		field  string
	}{
		{"empty text", "/v1/memories", map[string]any{"text": ""}, 422, "body.text"},
		{"blank text", "/v1/memories", map[string]any{"text": "  \n "}, 422, "body.text"},
		{"oversize text", "/v1/memories", map[string]any{"text": strings.Repeat("x", 16385)}, 422, "body.text"},
		{"NUL in text", "/v1/memories", map[string]any{"text": "a\x00b"}, 422, "body.text"},
		{"NUL in metadata", "/v1/memories", `{"text":"ok","metadata":{"a":"\u0000"}}`, 422, "body.metadata"},
		{"metadata not an object", "/v1/memories", `{"text":"ok","metadata":[1]}`, 422, "body.metadata"},
		{"bad kind", "/v1/memories", map[string]any{"text": "ok", "kind": "no spaces allowed"}, 422, "body.kind"},
		{"bad trust", "/v1/memories", map[string]any{"text": "ok", "trust": "gossip"}, 422, "body.trust"},
		{"importance > 1", "/v1/memories", map[string]any{"text": "ok", "importance": 1.5}, 422, "body.importance"},
		{"bad scope", "/v1/memories", map[string]any{"text": "ok", "user_id": "a/b"}, 422, "body.user_id"},
		{"unknown field", "/v1/memories", map[string]any{"text": "ok", "org_id": "other"}, 422, "body"},
		{"top_k over cap", "/v1/memories/search", map[string]any{"query": "x", "top_k": 101}, 422, "body.top_k"},
		{"empty query", "/v1/memories/search", map[string]any{"query": ""}, 422, "body.query"},
		{"bad kinds", "/v1/memories/search", map[string]any{"query": "x", "kinds": []string{"a b"}}, 422, "body.kinds[0]"},
		{"bad trust filter", "/v1/memories/search", map[string]any{"query": "x", "trust": []string{"gossip"}}, 422, "body.trust[0]"},
		{"bad stale_after", "/v1/memories/search", map[string]any{"query": "x", "stale_after": "soon"}, 422, "body.stale_after"},
		{"similar top_k over cap", "/v1/jobs/similar", map[string]any{"query": "x", "top_k": 51}, 422, "body.top_k"},
		{"malformed JSON", "/v1/memories", `{"text":`, 400, ""},
	}
	for _, c := range cases {
		r := s.Do("POST", c.path, key, c.body)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), c.name)
		if c.field != "" {
			require.Contains(t, string(r.Body), `"location":"`+c.field, "%s: %s", c.name, r.Body)
		}
	}
	require.Equal(t, 422, s.Do("GET", "/v1/memories/not-a-uuid", key, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/memories/"+uuid.Must(uuid.NewV7()).String(), key, nil).Status)
	require.Equal(t, 403, s.Do("POST", "/v1/memories", compliance, map[string]any{"text": "ok"}).Status)
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memories`))
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memory_retrievals`))
}

// fakeOpenAI speaks POST /v1/embeddings like OpenAI, with lexical vectors of dims.
func fakeOpenAI(t *testing.T, dims int, calls *int) *httptest.Server {
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*calls++
		first := *calls == 1
		mu.Unlock()
		if first { // the first call is rate limited: the client must retry
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"slow down","type":"rate_limit_error"}}`))
			return
		}
		var req struct {
			Input []string `json:"input"`
			Model string   `json:"model"`
		}
		if r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, "bad request", 400)
			return
		}
		data := []map[string]any{}
		for i, in := range req.Input {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": embed.NewLexical(dims).One(in)})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model,
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestMemoriesOpenAIEmbedder(t *testing.T) {
	t.Parallel()
	calls := 0
	fake := fakeOpenAI(t, 384, &calls)
	s := apptest.Start(t, apptest.Env("STRATA_EMBEDDER", "openai"), apptest.Env("OPENAI_BASE_URL", fake.URL+"/v1"),
		apptest.Env("OPENAI_API_KEY", "sk-test"), apptest.Env("STRATA_EMBEDDING_MODEL", "bge-small-en"),
		apptest.Env("STRATA_EMBEDDING_DIMS", "384"))
	key := s.NewKey("acme", "agent")
	st, m := create(t, s, key, map[string]any{"text": "the narrator's voice is Sam"})
	require.Equal(t, 201, st)
	require.Equal(t, "openai", m.Embedding.Embedder)
	require.Equal(t, "bge-small-en", m.Embedding.Model)
	r := search(t, s, key, map[string]any{"query": "who is the narrator voice"})
	require.Equal(t, []string{"the narrator's voice is Sam"}, r.texts())
	require.GreaterOrEqual(t, calls, 3) // one 429, then the write and the search
}

// A malformed embedder answer (vectors of the wrong length) is a 502 naming the rule, not a
// 503 that invites retries (issue 57 finding 5).
func TestMemoriesOpenAIDimensionMismatchIs502(t *testing.T) {
	t.Parallel()
	calls := 1 // skip the 429
	fake := fakeOpenAI(t, 64, &calls)
	s := apptest.Start(t, apptest.Env("STRATA_EMBEDDER", "openai"), apptest.Env("OPENAI_BASE_URL", fake.URL+"/v1"),
		apptest.Env("OPENAI_API_KEY", "sk-test"), apptest.Env("STRATA_EMBEDDING_MODEL", "m"))
	key := s.NewKey("acme", "agent")
	r := s.Do("POST", "/v1/memories", key, map[string]any{"text": "x"})
	require.Equal(t, 502, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Retry-After"))
	require.Contains(t, string(r.Body), "returned 64 dimensions")
	require.Zero(t, ownerCount(t, s, `SELECT count(*) FROM memories`))
}

// TestMemoryIdempotentWrites: a memory write's Idempotency-Key claim rides in front of its
// first statement (claimInWrite). The same key and body replays the first answer (a second
// run would find the memory and answer 200, deduplicated), with one row and one audit
// record; another body is refused; another org's key is its own; a key held by a request in
// flight answers 409 and nothing is written; a refused body claims nothing.
func TestMemoryIdempotentWrites(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_IDEMPOTENCY_WAIT", "300ms"))
	k := s.NewKey("acme", "agent")
	other := s.NewKey("globex", "agent")
	write := func(key, text, apiKey string) *apptest.Response {
		return s.Do("POST", "/v1/memories", apiKey, map[string]any{"text": text, "user_id": "u-1"}, "Idempotency-Key", key)
	}
	audited := func() int {
		var n int
		require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
			`SELECT count(*) FROM audit_log WHERE org_id = 'acme' AND action = 'create-memory'`).Scan(&n))
		return n
	}
	memories := func(org string) (n, dedups int) {
		require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
			`SELECT count(*), coalesce(sum(dedup_count), 0) FROM memories WHERE org_id = $1`, org).Scan(&n, &dedups))
		return n, dedups
	}

	first := write("k-1", "the colourist prefers the warm LUT", k)
	require.Equal(t, 201, first.Status, string(first.Body))
	again := write("k-1", "the colourist prefers the warm LUT", k)
	require.Equal(t, 201, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	require.Equal(t, 1, audited(), "a replay is not audited again")
	n, dedups := memories("acme")
	require.Equal(t, 1, n)
	require.Zero(t, dedups, "the replay did not run the write again")

	// The key with another body: refused, nothing written.
	r := write("k-1", "exports go to the shared drive", k)
	require.Equal(t, 422, r.Status, string(r.Body))
	n, _ = memories("acme")
	require.Equal(t, 1, n)
	// Another org's request with the same key is its own.
	require.Equal(t, 201, write("k-1", "the colourist prefers the warm LUT", other).Status)

	// A body refused before any statement claims nothing: the key serves the next request.
	r = s.Do("POST", "/v1/memories", k, map[string]any{"text": "", "user_id": "u-1"}, "Idempotency-Key", "k-2")
	require.Equal(t, 422, r.Status, string(r.Body))
	r = write("k-2", "captions use the studio font", k)
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))

	// A key held by a request in flight: 409 after the wait, nothing written; once the
	// holder rolls back, the key is free.
	ctx := context.Background()
	holder := testenv.OwnerConn(t, s.DBURL)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (org_id, key, request_hash, method, path, response_status, expires_at)
		VALUES ('acme', 'k-3', '\x00', 'POST', '/v1/memories', 0, now() + interval '1 hour')`)
	require.NoError(t, err)
	r = write("k-3", "the client wants 4k masters", k)
	require.Equal(t, 409, r.Status, string(r.Body))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	n, _ = memories("acme")
	require.Equal(t, 2, n)
	require.NoError(t, tx.Rollback(ctx))
	r = write("k-3", "the client wants 4k masters", k)
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
	n, _ = memories("acme")
	require.Equal(t, 3, n)
	require.Equal(t, 3, audited())
}
