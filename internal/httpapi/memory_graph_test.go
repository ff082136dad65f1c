package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestCreateMemoryGraph: POST /v1/memories with "graph": true writes the memory and, in the
// same transaction and one model call, its entities and relations in the memory's scope,
// each relation with the memory as its source and the caller's key as its writer. A
// malformed answer writes neither; without a model the answer is 503 naming
// STRATA_LLM_MODEL and nothing is written.
func TestCreateMemoryGraph(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, func(p llmtest.Prompt) string {
		if strings.Contains(p.Doc.Turns[0].Content, "garbage") {
			return `{"decisions": [], "entities": [{"name": "Ana", "user_id": "someone-else"}], "relations": []}`
		}
		return llmtest.GraphAnswer(
			// A decision the model adds anyway: discarded (the caller wrote the memory).
			[]llmtest.D{{Op: "ADD", Kind: "fact", Text: "Ana manages the Lisbon store", Turns: []int64{1}}},
			[]llmtest.E{{Name: "Ana Silva", Type: "person", Aliases: []string{"Ana"}}, {Name: "Lisbon store", Type: "place"}},
			[]llmtest.R{{Subject: "Ana", Predicate: "manages", Object: "Lisbon store", Functional: true, Decision: 0,
				Fact: "Ana manages the Lisbon store", Turns: []int64{1}}})
	})
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()))
	key := s.NewKey("acme", "agent")
	res := need(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": "Ana Silva manages the Lisbon store.",
		"user_id": "sam", "graph": true}), 201).Map(t)
	require.Len(t, llm.Calls(), 1)
	memID := res["id"].(string)
	g := res["graph"].(map[string]any)
	require.Equal(t, "extract-v2", g["prompt_version"])
	require.Len(t, g["entities"], 2)
	rels := g["relations"].([]any)
	require.Len(t, rels, 1)
	rel := rels[0].(map[string]any)
	require.Equal(t, "added", rel["result"])
	require.Equal(t, memID, rel["source_memory_id"])

	ctx := context.Background()
	owner := testenv.OwnerConn(t, s.DBURL)
	var n int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM graph_relations WHERE org_id = 'acme' AND user_id = 'sam'
		AND agent_id = '' AND session_id = '' AND source_memory_id = $1 AND created_by_key <> ''`, memID).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM memories WHERE org_id = 'acme' AND user_id = 'sam'`).Scan(&n))
	require.Equal(t, 1, n, "only the memory the caller wrote: the model's decision is not applied")

	// Malformed (a scope field the schema does not have): 502, neither memory nor graph written.
	requireProblem(t, s.Do("POST", "/v1/memories", key, map[string]any{"text": "garbage about Ana",
		"user_id": "sam", "graph": true}), 502, "")
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM memories WHERE org_id = 'acme' AND text LIKE 'garbage%'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM graph_entities WHERE org_id = 'acme'`).Scan(&n))
	require.Equal(t, 2, n)

	// Without a model.
	off := apptest.Start(t)
	k2 := off.NewKey("acme", "agent")
	r := off.Do("POST", "/v1/memories", k2, map[string]any{"text": "Ana manages the Lisbon store.", "user_id": "sam", "graph": true})
	requireProblem(t, r, 503, "")
	require.Contains(t, string(r.Body), "STRATA_LLM_MODEL")
	need(t, off.Do("POST", "/v1/memories", k2, map[string]any{"text": "Ana manages the Lisbon store.", "user_id": "sam"}), 201)
}
