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

// TestModelAnswerSizeCapped is issue 57's attack on extraction: a model (or whatever
// answers at OPENAI_BASE_URL) that streams a 50 MB answer. Strata reads a bounded part of
// it (a multiple of the requested max tokens), refuses it with an error that gives its
// size and the limit, does not retry or send it back, and writes nothing. A rejected
// answer under the cap goes back to the model as a short description, never in full.
func TestModelAnswerSizeCapped(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, mediaAnswer)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()))
	key := s.NewKey("acme", "agent")
	msgs := []map[string]any{{"role": "user", "content": "I edit wedding films. Export in 4K please."}}
	owner := testenv.OwnerConn(t, s.DBURL)
	written := func(user string) int {
		var n int
		require.NoError(t, owner.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM kv_entries WHERE user_id = $1)
			+ (SELECT count(*) FROM memories WHERE user_id = $1)`, user).Scan(&n))
		return n
	}

	llm.HugeAnswer(50 << 20)
	start := time.Now()
	r := s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "kim"})
	requireProblem(t, r, 502, "")
	require.Less(t, time.Since(start), 10*time.Second, "refused fast, not after reading 50 MB")
	require.Less(t, llm.Written(), int64(8<<20), "the client stopped reading early (kernel buffers aside)")
	require.Len(t, llm.Calls(), 1, "a refused answer is not retried, so not sent back")
	require.NotContains(t, string(r.Body), llmtest.HugeFill)
	require.Zero(t, written("kim"), "nothing written")
	require.Eventually(t, func() bool { return strings.Contains(s.Logs(), "bytes of it") }, 5*time.Second, 50*time.Millisecond,
		"the log says the size and the limit")
	require.NotContains(t, s.Logs(), llmtest.HugeFill, "no model output in the log")

	// An answer under the cap that fails validation goes back as a description only.
	llm.HugeAnswer(0)
	junk := strings.Repeat("REJECTED-PART-", 1500) // ~21 KB: under the cap, refused by the schema
	llm.SetAnswer(func(p llmtest.Prompt) string {
		if p.Attempt == 1 {
			return `{"decisions": [], "entities": [], "relations": [], "notes": "` + junk + `"}`
		}
		return mediaAnswer(p)
	})
	before := len(llm.Calls())
	need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"messages": msgs, "user_id": "lee"}), 200)
	calls := llm.Calls()[before:]
	require.Len(t, calls, 2, "one rejected answer, one retry")
	for _, m := range calls[1].Messages {
		require.NotContains(t, m.Content, "REJECTED-PART-", "the rejected answer is not sent back")
		require.Less(t, len(m.Content), 8<<10, "every message of the retry is short or the prompt")
	}
	require.Contains(t, calls[1].Messages[len(calls[1].Messages)-1].Content, "rejected", "the reason still goes back")
}
