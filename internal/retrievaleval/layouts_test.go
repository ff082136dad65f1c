package retrievaleval

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoCoMoLayout(t *testing.T) {
	t.Parallel()
	ds, layout, err := Load("testdata/locomo.json")
	require.NoError(t, err)
	require.Equal(t, "locomo", layout)
	require.Len(t, ds.Conversations, 1)
	c := ds.Conversations[0]
	require.Equal(t, "conv-1", c.ID)
	require.Len(t, c.Sessions, 2)
	require.Equal(t, time.Date(2023, 5, 8, 13, 56, 0, 0, time.UTC), c.Sessions[0].Date)
	require.Equal(t, Turn{ID: "conv-1:D1:2", Speaker: "Melanie", Text: "That's great, Caroline! I'm painting a sunrise over the lake these days."}, c.Sessions[0].Turns[1])
	require.Len(t, ds.Questions, 5)
	cats := []string{}
	for _, q := range ds.Questions {
		cats = append(cats, q.Category)
	}
	require.Equal(t, []string{Temporal, SingleHop, MultiHop, "open-domain", Abstention}, cats)
	require.Equal(t, []string{"conv-1:D1:3", "conv-1:D2:2"}, ds.Questions[2].Evidence, "several ids in one evidence string")
	require.Empty(t, ds.Questions[4].Evidence, "adversarial questions are scored as abstention")
}

func TestLongMemEvalLayout(t *testing.T) {
	t.Parallel()
	ds, layout, err := Load("testdata/longmemeval.json")
	require.NoError(t, err)
	require.Equal(t, "longmemeval", layout)
	require.Len(t, ds.Conversations, 3, "each question has its own haystack")
	require.Equal(t, []string{"q-bike:sess-a:1"}, ds.Questions[0].Evidence, "the turns marked has_answer")
	require.Equal(t, SingleHop, ds.Questions[0].Category)
	require.Equal(t, []string{"q-move:s2:1", "q-move:s2:2"}, ds.Questions[1].Evidence, "no turn marked: the answer session's turns")
	require.Equal(t, KnowledgeUpdate, ds.Questions[1].Category)
	require.Equal(t, Abstention, ds.Questions[2].Category)
	require.Empty(t, ds.Questions[2].Evidence)
	require.Equal(t, time.Date(2023, 5, 20, 2, 21, 0, 0, time.UTC), ds.Conversations[0].Sessions[0].Date)
	require.Equal(t, "user", ds.Conversations[0].Sessions[0].Turns[0].Speaker)
}

func TestLoadSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`[{"foo": 1}]`: "neither LoCoMo",
		`nope`:         "not JSON",
		`{"conversations":[{"id":"c","sessions":[{"id":"s","turns":[{"id":"t1","speaker":"a","text":"x"}]}]}],"questions":[{"id":"q","conversation":"c","question":"?","evidence":["t9"],"category":"single-hop"}]}`: `questions[0].evidence[0] "t9" is not a turn of conversation "c"`,
		`{"conversations":[{"id":"c","sessions":[{"id":"s","turns":[{"id":"t1","speaker":"a","text":"x"}]}]}],"questions":[{"id":"q","conversation":"c","question":"?","evidence":["t1"],"category":"abstention"}]}`: "must be empty for an abstention question",
	} {
		_, _, err := Parse([]byte(raw))
		require.ErrorContains(t, err, want)
	}
}

// TestCommittedSetIsWhatGenWrites: conversations.json is gen.py's output, with the sizes the
// layout promises.
func TestCommittedSetIsWhatGenWrites(t *testing.T) {
	t.Parallel()
	ds, _, err := Load("../../eval/retrieval/conversations.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ds.Conversations), 40)
	require.GreaterOrEqual(t, len(ds.Questions), 500)
	per := map[string]int{}
	for _, q := range ds.Questions {
		per[q.Category]++
	}
	for _, c := range Categories {
		require.Positive(t, per[c], c)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("no python3 on PATH: gen.py's output not compared")
		return
	}
	gen, err := exec.Command(py, "../../eval/retrieval/gen.py").Output()
	require.NoError(t, err)
	committed, err := os.ReadFile("../../eval/retrieval/conversations.json")
	require.NoError(t, err)
	require.True(t, bytes.Equal(gen, committed), "conversations.json is not gen.py's output: run python3 eval/retrieval/gen.py > eval/retrieval/conversations.json")
}

func TestScore(t *testing.T) {
	t.Parallel()
	// Evidence a, b; a at rank 3, b at rank 12 (beyond 10).
	r := Ranked{{"x"}, {"y"}, {"a"}, {"z"}, {"w"}, {"v"}, {"u"}, {"t"}, {"s"}, {"q"}, {"p"}, {"b"}}
	s := Score(r, []string{"a", "b"})
	require.Equal(t, 0.5, s.RecallAt5)
	require.Equal(t, 0.5, s.RecallAt10)
	require.Equal(t, 1.0, s.HitAt10)
	require.InDelta(t, 1.0/3, s.RR, 1e-9)
	require.InDelta(t, 0.5/(1+1/1.584962500721156), s.NDCG10, 1e-9)
	// One memory standing for two turns counts both, once.
	s = Score(Ranked{{"a", "b"}, {"a"}}, []string{"a", "b"})
	require.Equal(t, 1.0, s.RecallAt5)
	require.InDelta(t, 1/(1+1/1.584962500721156), s.NDCG10, 1e-9)
	require.Equal(t, Scores{}, Score(Ranked{{"x"}}, []string{"a"}))
	lo, hi := Wilson(60, 100)
	require.InDelta(t, 0.502, lo, 0.001)
	require.InDelta(t, 0.691, hi, 0.001)
}

func TestBM25(t *testing.T) {
	t.Parallel()
	x := NewBM25([]string{"t1", "t2", "t3"}, []string{"Tom: the cat sat", "Ana: I adopted a greyhound called Pepper", "Tom: dogs, dogs, dogs"})
	require.Equal(t, []string{"t2", "t1"}, x.Search("What is the name of the greyhound Ana adopted?", 10), "t1 shares only \"the\"")
	require.Empty(t, x.Search("zebra", 10))
}
