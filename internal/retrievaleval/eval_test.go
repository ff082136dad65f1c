package retrievaleval_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/retrievaleval"
)

// floors is eval/retrieval/floors.json: the least hit@10 per category the small run must reach.
type floors struct {
	Conversations int                `json:"conversations"`
	HitAt10       map[string]float64 `json:"hit_at_10"`
}

// TestRetrievalFloors runs the first conversations of the committed set against a real server
// (Postgres, Redis, the default hash embedder) through HTTP and fails when a category's hit@10
// falls below its committed floor; it also checks that what the run wrote is gone afterwards.
func TestRetrievalFloors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../eval/retrieval/floors.json")
	require.NoError(t, err)
	var fl floors
	require.NoError(t, json.Unmarshal(raw, &fl))
	ds, layout, err := retrievaleval.Load("../../eval/retrieval/conversations.json")
	require.NoError(t, err)
	require.Equal(t, "native", layout)
	ds = ds.Subset(fl.Conversations)

	s := apptest.Start(t, apptest.NoAutoConsolidation())
	c := client.New(s.URL, s.NewKey("evalorg", "agent"))
	rep, err := retrievaleval.Run(context.Background(), c, ds, retrievaleval.Options{})
	require.NoError(t, err)
	out, _ := json.MarshalIndent(rep, "", " ")
	t.Logf("report:\n%s", out)

	require.Equal(t, len(ds.Questions), rep.Questions)
	for cat, floor := range fl.HitAt10 {
		m, ok := retrievaleval.Find(rep.Strata, cat)
		require.True(t, ok, "no %s questions in the subset", cat)
		require.GreaterOrEqual(t, m.HitAt10, floor, "%s: hit@10 %.3f fell below the floor %.3f (eval/retrieval/floors.json)", cat, m.HitAt10, floor)
	}
	b, ok := retrievaleval.Find(rep.BM25, "overall")
	require.True(t, ok)
	require.Greater(t, b.HitAt10, 0.0, "the BM25 baseline found nothing")
	require.Positive(t, rep.Abstention.Questions)
	require.Len(t, rep.Context, 3)

	// Cleanup: every memory the run wrote is deleted, so the run's scopes are empty.
	require.Positive(t, rep.Memories)
	require.Contains(t, rep.Cleanup, "deleted")
	for _, conv := range ds.Conversations {
		user := "eval-" + rep.RunID + "-" + conv.ID
		page, err := c.ListMemories(context.Background(), client.MemoryFilter{Scope: client.Scope{UserID: user}}, "", 10)
		require.NoError(t, err)
		require.Empty(t, page.Items, "the run left memories of %s behind: %s", user, rep.Cleanup)
	}
}
