package cli

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
)

const evalDataset = "../../eval/extraction-dialogues.json"

// labelAnswer is a fake model answering each dialogue from its labels (wrong: it drops
// every other label and invents a fact), proving the plumbing and the scorer.
func labelAnswer(t *testing.T, ds EvalDataset, wrong bool) func(llmtest.Prompt) string {
	byFirst := map[string]EvalDialog{}
	for _, d := range ds.Dialogues {
		byFirst[d.Turns[0].Content] = d
	}
	return func(p llmtest.Prompt) string {
		d, ok := byFirst[p.Doc.Turns[0].Content]
		if !ok {
			return llmtest.Answer()
		}
		var out []llmtest.D
		for i, e := range d.Expected {
			if wrong && i%2 == 0 {
				continue
			}
			x := llmtest.D{Kind: e.Kind, Turns: []int64{1}}
			switch e.Type() {
			case "fact.add":
				x.Op, x.Text = "ADD", e.Text
			case "fact.update":
				x.Op, x.Ref, x.Text = "UPDATE", p.Doc.Ref(e.Target), e.Text
			case "fact.delete":
				x.Op, x.Ref = "DELETE", p.Doc.Ref(e.Target)
			case "preference.set":
				x.Op, x.Key, x.Text = "ADD", e.Key, e.Value
			case "preference.delete":
				x.Op, x.Key = "DELETE", e.Key
			}
			out = append(out, x)
		}
		if wrong {
			out = append(out, llmtest.D{Op: "ADD", Kind: "fact", Text: "User enjoys quantum origami", Turns: []int64{1}})
		}
		return llmtest.Answer(out...)
	}
}

// TestEvalExtraction runs `strata eval extraction` on the committed dataset against a fake
// model answering from the labels (every score 1), then against one that answers wrong
// (scores drop).
func TestEvalExtraction(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(evalDataset)
	require.NoError(t, err)
	var ds EvalDataset
	require.NoError(t, json.Unmarshal(raw, &ds))
	require.GreaterOrEqual(t, len(ds.Dialogues), 40)
	domains := map[string]int{}
	types := map[string]int{}
	for _, d := range ds.Dialogues {
		domains[d.Domain]++
		for _, e := range d.Expected {
			types[e.Type()]++
		}
	}
	require.GreaterOrEqual(t, domains["media"], 8)
	for _, ty := range EvalTypes {
		require.GreaterOrEqual(t, types[ty], 2, ty)
	}

	llm := llmtest.New(t, labelAnswer(t, ds, false))
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()))
	env := map[string]string{"STRATA_URL": s.URL, "STRATA_API_KEY": s.NewKey("acme", "agent")}
	if r := s.Do("PUT", "/v1/admin/policies", s.NewKey("acme", "admin"), map[string]any{"extraction": map[string]any{
		"enabled": true, "debounce": "1h", "every_turns": 0}}); r.Status != 200 && r.Status != 201 {
		t.Fatalf("enabling extraction: %d %s", r.Status, r.Body)
	}
	code, out, errs := run(t, env, "eval", "extraction", "--dataset", evalDataset, "-o", "json")
	require.Zero(t, code, errs)
	var rep EvalReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, len(ds.Dialogues), rep.Dialogues)
	require.Zero(t, rep.Failed)
	require.Equal(t, "fake-model", rep.Model)
	for _, sc := range rep.Scores {
		require.InDelta(t, 1.0, sc.F1, 1e-9, "%+v", sc)
	}
	require.InDelta(t, 1.0, rep.Overall.F1, 1e-9)

	llm.SetAnswer(labelAnswer(t, ds, true))
	code, out, errs = run(t, env, "eval", "extraction", "--dataset", evalDataset)
	require.Zero(t, code, errs)
	require.Contains(t, out, "PRECISION")
	code, out, _ = run(t, env, "eval", "extraction", "--dataset", evalDataset, "-o", "json")
	require.Zero(t, code)
	var bad EvalReport
	require.NoError(t, json.Unmarshal([]byte(out), &bad))
	require.Less(t, bad.Overall.Recall, 0.7)
	require.Less(t, bad.Overall.Precision, 1.0)
	require.Less(t, bad.Overall.F1, rep.Overall.F1)
}

func TestEvalScorer(t *testing.T) {
	t.Parallel()
	sc := map[string]*EvalScore{}
	for _, ty := range EvalTypes {
		sc[ty] = &EvalScore{Type: ty}
	}
	want := []EvalItem{{Op: "add", Kind: "fact", Text: "User lives in Lisbon"}, {Op: "set", Kind: "preference", Key: "export_resolution", Value: "4K"},
		{Op: "delete", Kind: "fact", Target: "User is vegetarian"}}
	got := []EvalItem{{Op: "add", Kind: "fact", Text: "The user lives in Lisbon, Portugal"}, {Op: "set", Kind: "preference", Key: "resolution", Value: "4k"},
		{Op: "add", Kind: "fact", Text: "User likes cats"}}
	ScoreDialog(want, got, sc)
	require.Equal(t, EvalScore{Type: "fact.add", TP: 1, FP: 1}, *sc["fact.add"])
	require.Equal(t, 1, sc["preference.set"].TP)
	require.Equal(t, 1, sc["fact.delete"].FN)
	sc["fact.add"].Finish()
	require.InDelta(t, 0.5, sc["fact.add"].Precision, 1e-9)
	require.InDelta(t, 1.0, sc["fact.add"].Recall, 1e-9)
}
