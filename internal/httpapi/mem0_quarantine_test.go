package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
)

// TestMem0InferQuarantinedListsOnlyApplied is issue 57 finding 9: /mem0 add with infer by a
// quarantined agent. The model proposes a preference that is not written (result
// quarantined): the answer must not list it as added.
func TestMem0InferQuarantinedListsOnlyApplied(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, mediaAnswer)
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()))
	key, admin := s.NewKey("acme", "agent"), s.NewKey("acme", "admin")
	need(t, s.Do("POST", "/v1/admin/quarantines", admin, map[string]any{"agent_id": "editor",
		"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "reason": "poisoned"}), 201)
	msgs := []map[string]any{{"role": "user", "content": "Export in 4K please."}}
	r := s.Do("POST", "/mem0/v1/memories/", key, map[string]any{"messages": msgs, "user_id": "sam", "agent_id": "editor", "infer": true})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.False(t, strings.Contains(string(r.Body), "preferences/export_resolution"), "a preference not written is listed: %s", r.Body)
	require.Equal(t, 404, s.Do("GET", "/v1/kv/preferences/export_resolution?user_id=sam", key, nil).Status, "and it was not written")

	// Not quarantined: the written preference is listed.
	r = s.Do("POST", "/mem0/v1/memories/", key, map[string]any{"messages": msgs, "user_id": "kim", "agent_id": "other", "infer": true})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"id":"preferences/export_resolution","event":"ADD"`)
}
