package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/turncontext"
)

func must(t *testing.T, r *apptest.Response, status ...int) *apptest.Response {
	t.Helper()
	for _, s := range status {
		if r.Status == s {
			return r
		}
	}
	t.Fatalf("status %d (want %v): %s", r.Status, status, r.Body)
	return r
}

// seedContext builds a job mid-way (two steps done, one in flight, a checkpoint), a session,
// preferences at two levels, memories of two users and a finished job's memory.
func seedContext(t *testing.T, s *apptest.Server, key string) {
	t.Helper()
	must(t, s.Do("PUT", "/v1/jobs/promo-7", key, map[string]any{"goal": "Cut the spring promo for three channels",
		"user_id": "u1", "owner": "editor"}), 201)
	for i, step := range []string{"cut", "colour"} {
		c := must(t, s.Do("POST", "/v1/jobs/promo-7/steps/"+step+"/start", key, map[string]any{"owner": "editor"}), 200).Map(t)
		must(t, s.Do("POST", "/v1/jobs/promo-7/steps/"+step+"/complete", key, map[string]any{
			"fencing_token": c["fencing_token"], "result": map[string]any{"asset": fmt.Sprintf("v%d.mp4", i+1)}}), 200)
		must(t, s.Do("POST", "/v1/jobs/promo-7/events", key, map[string]any{"op": "render." + step,
			"params": map[string]any{"step": step}, "result": map[string]any{"ok": true}}), 201)
	}
	must(t, s.Do("POST", "/v1/jobs/promo-7/steps/reframe-tiktok/start", key, map[string]any{"owner": "editor"}), 200)
	must(t, s.Do("PUT", "/v1/jobs/promo-7/checkpoint", key, map[string]any{"current_step": "reframe-tiktok",
		"next_action": "reframe the graded cut to 9:16", "done": []string{"cut", "colour"},
		"pending": []string{"reframe-tiktok", "captions", "export"}, "working_state": map[string]any{"cursor": 42}},
		"If-Match", `"0"`), 201)
	must(t, s.Do("PUT", "/v1/sessions/sess-1/state", key, map[string]any{"state": map[string]any{
		"brief": "spring promo, upbeat", "channel": "tiktok"}, "user_id": "u1", "agent_id": "editor"}), 201)
	must(t, s.Do("POST", "/v1/sessions/sess-1/messages", key, map[string]any{"role": "user", "content": "make it punchier"}), 201)
	must(t, s.Do("PUT", "/v1/kv/preferences/tone", key, map[string]any{"value": "playful", "user_id": "u1"}), 201)
	must(t, s.Do("PUT", "/v1/kv/preferences/tone", key, map[string]any{"value": "bold", "session_id": "sess-1"}), 201)
	must(t, s.Do("PUT", "/v1/kv/rules/max_length", key, map[string]any{"value": 60}), 201)
	must(t, s.Do("PUT", "/v1/kv/brand/palette", key, map[string]any{"value": "teal"}), 201)
	for _, m := range []string{"u1 wants captions in sentence case", "u1's brand colour is warm teal",
		"u1 dislikes jump cuts in captions", "u1 publishes on TikTok, Reels and Shorts"} {
		must(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": m, "user_id": "u1"}), 201)
	}
	must(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": "u2 secret: captions in all caps", "user_id": "u2"}), 201)
	must(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": "Winter promo captions and reframe for three channels",
		"kind": "job", "user_id": "u1", "metadata": map[string]any{"job_id": "promo-3", "outcome": "published",
			"parameters": map[string]any{"lut": "warm-teal-v2"}}}), 201)
}

type ctxResp struct {
	api.ContextBody
}

func getContext(t *testing.T, s *apptest.Server, key string, body map[string]any) ctxResp {
	t.Helper()
	var out ctxResp
	must(t, s.Do("POST", "/v1/context", key, body), 200).JSON(t, &out)
	return out
}

func TestContextAssemblesSectionsInPriorityOrder(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	seedContext(t, s, key)

	c := getContext(t, s, key, map[string]any{"user_id": "u1", "agent_id": "editor", "session_id": "sess-1",
		"job_id": "promo-7", "query": "captions for the reels version", "max_tokens": 8000})
	require.Equal(t, "gpt-4o", c.Model)
	require.Equal(t, "o200k_base", c.Encoding)
	require.False(t, c.Estimated)
	counter, err := turncontext.NewCounter("gpt-4o")
	require.NoError(t, err)
	require.Equal(t, counter.Count(c.Prompt), c.Tokens, "tokens are the real tokenizer's count of the prompt")
	require.LessOrEqual(t, c.Tokens, 8000)
	names := []string{}
	for _, sec := range c.Sections {
		names = append(names, sec.Name)
		require.Zero(t, sec.LeftOutCount, sec.Name)
		require.Equal(t, counter.Count(sec.Text), sec.Tokens, sec.Name)
	}
	require.Equal(t, []string{"job", "working_state", "summary", "preferences", "memories", "graph", "similar_jobs"}, names)

	p := c.Prompt
	order := []string{"## Job promo-7 (running)", "## Working state (session sess-1", "## Preferences", "## Relevant memories", "## Similar past jobs"}
	last := -1
	for _, h := range order {
		i := strings.Index(p, h)
		require.Greater(t, i, last, "%q in order in:\n%s", h, p)
		last = i
	}
	require.Contains(t, p, "Current step: reframe-tiktok")
	require.Contains(t, p, "Next action: reframe the graded cut to 9:16")
	require.Contains(t, p, "- Done: cut → {\"asset\":\"v1.mp4\"}")
	require.Contains(t, p, "- Done: colour → {\"asset\":\"v2.mp4\"}")
	require.Contains(t, p, "never run them again")
	require.Contains(t, p, "- In flight: reframe-tiktok, held by editor (lease live")
	require.Less(t, strings.Index(p, "Done: cut"), strings.Index(p, "Done: colour"), "done steps shown in completion order")
	require.Contains(t, p, "- brief: \"spring promo, upbeat\"")
	require.Contains(t, p, "- [user] make it punchier")
	require.Contains(t, p, "- preferences/tone = \"bold\" (session)", "the session level wins over the user's")
	require.Contains(t, p, "- rules/max_length = 60 (org)")
	require.NotContains(t, p, "brand/palette", "only the requested (default) namespaces")
	require.Contains(t, p, "u1 wants captions in sentence case")
	require.NotContains(t, p, "u2 secret", "another user's memory never shows")
	require.Contains(t, p, "- Job promo-3: Winter promo")
	require.Contains(t, p, `parameters: {"lut":"warm-teal-v2"}`)
	require.NotNil(t, c.Job)
	require.EqualValues(t, 1, c.Job.CheckpointVersion)
	require.EqualValues(t, 2, c.Job.LastEventSeq)
	require.Equal(t, 2, c.Job.CompletedSteps)
	require.Equal(t, []string{"preferences", "rules"}, c.KVNamespaces)

	// The memories the model was given are in their retrieval log, as served by "context".
	memID := c.Sections[4].Included[0]
	var rl struct {
		Items []struct {
			Operation string `json:"operation"`
			JobID     string `json:"job_id"`
		} `json:"items"`
	}
	must(t, s.Do("GET", "/v1/memories/"+memID+"/retrievals", key, nil), 200).JSON(t, &rl)
	require.Len(t, rl.Items, 1)
	require.Equal(t, "context", rl.Items[0].Operation)
	require.Equal(t, "promo-7", rl.Items[0].JobID)

	// Named namespaces; another tokenizer; no session: the checkpoint's snapshot.
	c = getContext(t, s, key, map[string]any{"user_id": "u1", "job_id": "promo-7", "kv_namespaces": []string{"brand"},
		"model": "gpt-4", "similar_jobs": 0})
	require.Equal(t, "cl100k_base", c.Encoding)
	require.Contains(t, c.Prompt, "- brand/palette = \"teal\" (org)")
	require.Contains(t, c.Prompt, "## Working state (snapshot from checkpoint v1)\n- cursor: 42")
	require.Equal(t, "no query given", c.Sections[4].Note)

	c = getContext(t, s, key, map[string]any{"query": "captions", "model": "claude-sonnet-4"})
	require.True(t, c.Estimated)
	require.Equal(t, "no job_id given", c.Sections[0].Note)
}

// TestContextReadsALostSessionFromPostgres: context reads the working tier beside its own
// transaction from Redis alone; when Redis lost the session that read needs the durable
// copy, and the session is read again through the request's transaction: the section is
// the same as before the loss.
func TestContextReadsALostSessionFromPostgres(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	seedContext(t, s, key)
	body := map[string]any{"user_id": "u1", "agent_id": "editor", "session_id": "sess-1", "job_id": "promo-7",
		"query": "captions for the reels version", "max_tokens": 8000}
	before := getContext(t, s, key, body)
	require.Contains(t, before.Prompt, "- brief: \"spring promo, upbeat\"")
	require.Contains(t, before.Prompt, "- [user] make it punchier")

	flushPrefix(t, s.Prefix)
	after := getContext(t, s, key, body)
	require.Equal(t, before.Sections[1].Text, after.Sections[1].Text, "the working state, restored from Postgres")
	require.Equal(t, before.Sections[0].Text, after.Sections[0].Text)
	require.Equal(t, before.Sections[3].Text, after.Sections[3].Text, "preferences come from Postgres either way")
	// Restored into Redis: the next state read answers from there.
	r := must(t, s.Do("GET", "/v1/sessions/sess-1/state", key, nil), 200)
	require.Contains(t, string(r.Body), "spring promo, upbeat")
}

func TestContextBudgetLeavesOutLowerPriorityFirst(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	seedContext(t, s, key)
	base := map[string]any{"user_id": "u1", "agent_id": "editor", "session_id": "sess-1", "job_id": "promo-7",
		"query": "captions for the reels version"}
	full := getContext(t, s, key, base)
	for _, budget := range []int{150, 250, full.Tokens - 20} {
		body := map[string]any{"max_tokens": budget}
		for k, v := range base {
			body[k] = v
		}
		c := getContext(t, s, key, body)
		require.LessOrEqual(t, c.Tokens, budget)
		leftOut := 0
		for _, sec := range c.Sections {
			require.Equal(t, sec.Candidates, len(sec.Included)+sec.LeftOutCount, sec.Name)
			if sec.LeftOutCount > 0 {
				require.NotEmpty(t, sec.Note)
				for _, lo := range sec.LeftOut {
					require.Positive(t, lo.Tokens, "left out for the budget: says what it would have cost")
				}
			}
			leftOut += sec.LeftOutCount
		}
		require.Positive(t, leftOut, "budget %d leaves something out", budget)
		require.Contains(t, c.Prompt, "## Job promo-7", "the job summary comes first")
	}
	small := getContext(t, s, key, map[string]any{"user_id": "u1", "job_id": "promo-7", "query": "captions", "max_tokens": 150})
	require.Empty(t, small.Sections[4].Included, "memories wait for the job")
	require.NotEmpty(t, small.Sections[4].LeftOut)
	require.Equal(t, "left out: the budget was spent on higher-priority sections", small.Sections[4].Note)
}

func TestContextIsolationAndBadInput(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	seedContext(t, s, key)
	other := s.NewKey("globex", "agent")
	c := getContext(t, s, other, map[string]any{"user_id": "u1", "job_id": "promo-7", "session_id": "sess-1", "query": "captions"})
	require.Equal(t, "no job promo-7 in this org yet (create it with PUT /v1/jobs/promo-7)", c.Sections[0].Note)
	require.Empty(t, c.Prompt, "nothing of another org")

	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"max_tokens": 10}, "body.max_tokens"},
		{map[string]any{"kv_namespaces": []string{"bad ns"}}, "body.kv_namespaces[0]"},
		{map[string]any{"job_id": "a/b"}, "body.job_id"},
		{map[string]any{"top_k": 500}, "body.top_k"},
		{map[string]any{"model": "gpt 4"}, "body.model"},
	} {
		r := s.Do("POST", "/v1/context", key, tc.body)
		require.Equal(t, 422, r.Status, "%v: %s", tc.body, r.Body)
		require.Contains(t, string(r.Body), tc.field)
	}
	require.Equal(t, 403, s.Do("POST", "/v1/context", s.NewKey("acme", "compliance"), map[string]any{}).Status)
}

// TestContextOnASmallPool: context reads preferences and similar jobs beside its own
// transaction only when a connection is free at once, so requests that outnumber a small
// pool queue for it and finish — none holds one connection while waiting for a second (which
// deadlocked a 3-connection pool until the request timeout).
func TestContextOnASmallPool(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_DB_MAX_CONNS", "3"), apptest.Env("STRATA_REQUEST_TIMEOUT", "20s"))
	key := s.NewKey("acme", "agent")
	seedContext(t, s, key)
	body := map[string]any{"user_id": "u1", "agent_id": "editor", "session_id": "sess-1", "job_id": "promo-7",
		"query": "captions for the reels version", "max_tokens": 8000, "kv_namespaces": []string{"preferences"}}
	const n = 12
	var wg sync.WaitGroup
	out := make([]*apptest.Response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.Do("POST", "/v1/context", key, body)
		}()
	}
	wg.Wait()
	for i, r := range out {
		require.Equal(t, 200, r.Status, "request %d: %s", i, r.Body)
		var c ctxResp
		r.JSON(t, &c)
		require.Contains(t, c.Prompt, "preferences/tone = \"bold\" (session)", "request %d", i)
		require.Contains(t, c.Prompt, "- Job promo-3", "request %d", i)
		require.Contains(t, c.Prompt, "Current step: reframe-tiktok", "request %d", i)
	}
}
