package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

// Conversation memory: `strata memories extract` and `strata eval extraction`
// (docs/extraction.md).

// extractDecision is one decision of POST /v1/memories/extract.
type extractDecision struct {
	Op             string  `json:"op"`
	Kind           string  `json:"kind"`
	Text           string  `json:"text,omitempty"`
	Key            string  `json:"key,omitempty"`
	MemoryID       string  `json:"memory_id,omitempty"`
	Turns          []int64 `json:"turns"`
	Result         string  `json:"result,omitempty"`
	ResultMemoryID string  `json:"result_memory_id,omitempty"`
	KVVersion      int64   `json:"kv_version,omitempty"`
}

type extractResult struct {
	SessionID     string            `json:"session_id,omitempty"`
	UserID        string            `json:"user_id,omitempty"`
	FromSeq       int64             `json:"from_seq,omitempty"`
	ToSeq         int64             `json:"to_seq,omitempty"`
	Model         string            `json:"model"`
	PromptVersion string            `json:"prompt_version"`
	Decisions     []extractDecision `json:"decisions"`
	Usage         struct {
		Calls            int `json:"calls"`
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Applied bool `json:"applied"`
}

func (a *app) memoriesExtractCmd() *cobra.Command {
	var session, user, agent, file string
	var dry bool
	cmd := &cobra.Command{Use: "extract (--session ID | --messages FILE)", Short: "Extract facts and preferences from a session's new turns or from messages (LLM)",
		Example: "  strata memories extract --session s1\n  strata memories extract --user u1 --messages chat.json --dry-run   # [{\"role\":\"user\",\"content\":\"...\"}]",
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{"dry_run": dry}
			switch {
			case session != "" && file != "":
				return fmt.Errorf("--session or --messages, not both")
			case session != "":
				body["session_id"] = session
			case file != "":
				raw, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				var msgs []map[string]any
				if err := json.Unmarshal(raw, &msgs); err != nil {
					return fmt.Errorf("%s: want a JSON array of {\"role\", \"content\"}: %w", file, err)
				}
				body["messages"], body["user_id"], body["agent_id"] = msgs, user, agent
			default:
				return fmt.Errorf("--session or --messages is required")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var res extractResult
			if _, err := c.Do(cmd.Context(), client.Call{Method: http.MethodPost, Path: "/v1/memories/extract", Body: body}, &res); err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(res, nil, nil)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "OP\tKIND\tKEY/MEMORY\tTEXT\tTURNS\tRESULT")
			for _, d := range res.Decisions {
				target := d.Key
				if target == "" {
					target = d.MemoryID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", d.Op, d.Kind, target, d.Text, d.Turns, d.Result)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "model %s (%s), %d calls, %d tokens, applied: %v\n", res.Model, res.PromptVersion,
				res.Usage.Calls, res.Usage.PromptTokens+res.Usage.CompletionTokens, res.Applied)
			return nil
		}}
	cmd.Flags().StringVar(&session, "session", "", "extract the session's turns not extracted yet")
	cmd.Flags().StringVar(&file, "messages", "", "a JSON file of messages to extract from (not stored)")
	cmd.Flags().StringVar(&user, "user", "", "the data subject (with --messages)")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent (with --messages)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "print the decisions, apply nothing")
	return cmd
}

// EvalDataset is a labelled dialogue set (eval/extraction-dialogues.json).
type EvalDataset struct {
	Version   int          `json:"version"`
	Dialogues []EvalDialog `json:"dialogues"`
}

// EvalDialog is one dialogue with what a good extraction decides.
type EvalDialog struct {
	ID       string `json:"id"`
	Domain   string `json:"domain"`
	Existing struct {
		Memories    []string          `json:"memories"`
		Preferences map[string]string `json:"preferences"`
	} `json:"existing"`
	Turns []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"turns"`
	Expected []EvalItem `json:"expected"`
}

// EvalItem is one expected (or predicted) decision: op add/update/delete (facts) or
// set/delete (preferences); target is the existing memory's text for update and delete.
type EvalItem struct {
	Op     string `json:"op"`
	Kind   string `json:"kind"`
	Text   string `json:"text,omitempty"`
	Target string `json:"target,omitempty"`
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
}

// Type is the scored decision type.
func (e EvalItem) Type() string { return e.Kind + "." + e.Op }

// EvalTypes are the decision types scored, in print order.
var EvalTypes = []string{"fact.add", "fact.update", "fact.delete", "preference.set", "preference.delete"}

// EvalScore is precision/recall/F1 of one decision type.
type EvalScore struct {
	Type      string  `json:"type"`
	TP        int     `json:"tp"`
	FP        int     `json:"fp"`
	FN        int     `json:"fn"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

var stop = map[string]bool{"the": true, "a": true, "an": true, "is": true, "are": true, "of": true, "in": true, "on": true,
	"for": true, "to": true, "and": true, "user": true, "user's": true, "their": true, "with": true, "at": true, "now": true}

func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '\'' || r > 127)
	}) {
		if !stop[w] {
			out[w] = true
		}
	}
	return out
}

// similar is the word-overlap F1 of two texts (stop words removed).
func similar(a, b string) float64 {
	wa, wb := words(a), words(b)
	if len(wa) == 0 || len(wb) == 0 {
		return 0
	}
	n := 0
	for w := range wa {
		if wb[w] {
			n++
		}
	}
	p, r := float64(n)/float64(len(wa)), float64(n)/float64(len(wb))
	if p+r == 0 {
		return 0
	}
	return 2 * p * r / (p + r)
}

func norm(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

// matches says whether a predicted decision counts as an expected one.
func matches(want, got EvalItem) bool {
	if want.Type() != got.Type() {
		return false
	}
	switch want.Type() {
	case "fact.add":
		return similar(want.Text, got.Text) >= 0.5
	case "fact.update":
		return norm(want.Target) == norm(got.Target) && similar(want.Text, got.Text) >= 0.4
	case "fact.delete":
		return norm(want.Target) == norm(got.Target)
	case "preference.set":
		return want.Key == got.Key || norm(want.Value) == norm(got.Value) ||
			(similar(want.Key, got.Key) > 0 && similar(want.Value, got.Value) >= 0.5)
	case "preference.delete":
		return want.Key == got.Key
	}
	return false
}

// ScoreDialog counts true and false positives and misses per type for one dialogue (each
// prediction matches at most one expected item).
func ScoreDialog(want, got []EvalItem, into map[string]*EvalScore) {
	used := make([]bool, len(want))
	for _, g := range got {
		s := into[g.Type()]
		if s == nil {
			continue
		}
		hit := false
		for i, w := range want {
			if !used[i] && matches(w, g) {
				used[i], hit = true, true
				break
			}
		}
		if hit {
			s.TP++
		} else {
			s.FP++
		}
	}
	for i, w := range want {
		if s := into[w.Type()]; !used[i] && s != nil {
			s.FN++
		}
	}
}

// Finish computes the ratios (a type with nothing expected and nothing predicted scores 1).
func (s *EvalScore) Finish() {
	s.Precision, s.Recall = ratio(s.TP, s.TP+s.FP), ratio(s.TP, s.TP+s.FN)
	if s.Precision+s.Recall > 0 {
		s.F1 = 2 * s.Precision * s.Recall / (s.Precision + s.Recall)
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// EvalReport is what `strata eval extraction` prints.
type EvalReport struct {
	Dataset   string      `json:"dataset"`
	Dialogues int         `json:"dialogues"`
	Model     string      `json:"model"`
	Failed    int         `json:"failed" doc:"Dialogues whose extraction call failed (scored as missing everything)."`
	Scores    []EvalScore `json:"scores"`
	Overall   EvalScore   `json:"overall"`
	Calls     int         `json:"llm_calls"`
	Tokens    int         `json:"tokens"`
}

// RunEval runs every dialogue against the server's model: it writes the dialogue's existing
// memories and preferences for a fresh user, asks POST /v1/memories/extract with dry_run,
// scores the decisions, and removes what it wrote.
func RunEval(ctx context.Context, c *client.Client, ds EvalDataset, logf func(string, ...any)) (EvalReport, error) {
	scores := map[string]*EvalScore{}
	for _, t := range EvalTypes {
		scores[t] = &EvalScore{Type: t}
	}
	rep := EvalReport{Dialogues: len(ds.Dialogues)}
	run := uuid.NewString()[:8]
	for _, d := range ds.Dialogues {
		user := "eval-" + run + "-" + d.ID
		ids := map[string]string{} // memory id → text
		var created []string
		for _, m := range d.Existing.Memories {
			var out struct {
				ID string `json:"id"`
			}
			if _, err := c.Do(ctx, client.Call{Method: http.MethodPost, Path: "/v1/memories",
				Body: map[string]any{"text": m, "kind": "fact", "user_id": user}}, &out); err != nil {
				return rep, fmt.Errorf("dialogue %s: writing an existing memory: %w", d.ID, err)
			}
			ids[out.ID] = m
			created = append(created, out.ID)
		}
		keys := make([]string, 0, len(d.Existing.Preferences))
		for k, v := range d.Existing.Preferences {
			keys = append(keys, k)
			if _, err := c.Do(ctx, client.Call{Method: http.MethodPut, Path: "/v1/kv/preferences/" + url.PathEscape(k),
				Body: map[string]any{"value": v, "user_id": user}}, nil); err != nil {
				return rep, fmt.Errorf("dialogue %s: writing an existing preference: %w", d.ID, err)
			}
		}
		msgs := make([]map[string]string, len(d.Turns))
		for i, t := range d.Turns {
			msgs[i] = map[string]string{"role": t.Role, "content": t.Content}
		}
		var res extractResult
		_, err := c.Do(ctx, client.Call{Method: http.MethodPost, Path: "/v1/memories/extract",
			Body: map[string]any{"messages": msgs, "user_id": user, "dry_run": true}}, &res)
		var got []EvalItem
		if err != nil {
			rep.Failed++
			logf("dialogue %s: %v", d.ID, err)
		} else {
			rep.Model = res.Model
			rep.Calls += res.Usage.Calls
			rep.Tokens += res.Usage.PromptTokens + res.Usage.CompletionTokens
			for _, x := range res.Decisions {
				switch {
				case x.Op == "noop":
				case x.Kind == "fact":
					got = append(got, EvalItem{Op: x.Op, Kind: "fact", Text: x.Text, Target: ids[x.MemoryID]})
				case x.Op == "delete":
					got = append(got, EvalItem{Op: "delete", Kind: "preference", Key: x.Key})
				default:
					got = append(got, EvalItem{Op: "set", Kind: "preference", Key: x.Key, Value: x.Text})
				}
			}
		}
		ScoreDialog(d.Expected, got, scores)
		for _, id := range created {
			_, _ = c.Do(ctx, client.Call{Method: http.MethodDelete, Path: "/v1/memories/" + id}, nil)
		}
		for _, k := range keys {
			_, _ = c.Do(ctx, client.Call{Method: http.MethodDelete, Path: "/v1/kv/preferences/" + url.PathEscape(k),
				Query: url.Values{"user_id": {user}}}, nil)
		}
	}
	all := EvalScore{Type: "overall"}
	for _, t := range EvalTypes {
		s := scores[t]
		s.Finish()
		rep.Scores = append(rep.Scores, *s)
		all.TP, all.FP, all.FN = all.TP+s.TP, all.FP+s.FP, all.FN+s.FN
	}
	all.Finish()
	rep.Overall = all
	return rep, nil
}

func (a *app) evalCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "eval", Short: "Measure the quality of server features against labelled data"}
	var dataset string
	ex := &cobra.Command{Use: "extraction --dataset FILE",
		Short:   "Run labelled dialogues through the server's extraction model and print precision/recall/F1 per decision type",
		Example: "  strata eval extraction --dataset eval/extraction-dialogues.json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataset == "" {
				return fmt.Errorf("--dataset is required (e.g. eval/extraction-dialogues.json)")
			}
			raw, err := os.ReadFile(dataset)
			if err != nil {
				return err
			}
			var ds EvalDataset
			if err := json.Unmarshal(raw, &ds); err != nil {
				return fmt.Errorf("%s: %w", dataset, err)
			}
			if len(ds.Dialogues) == 0 {
				return fmt.Errorf("%s has no dialogues", dataset)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			rep, err := RunEval(cmd.Context(), c, ds, func(f string, args ...any) { fmt.Fprintf(a.errOut, f+"\n", args...) })
			if err != nil {
				return err
			}
			rep.Dataset = dataset
			if a.output == "json" {
				return a.print(rep, nil, nil)
			}
			fmt.Fprintf(a.out, "%d dialogues, model %s, %d failed, %d LLM calls, %d tokens\n", rep.Dialogues, rep.Model,
				rep.Failed, rep.Calls, rep.Tokens)
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tTP\tFP\tFN\tPRECISION\tRECALL\tF1")
			rows := append(append([]EvalScore{}, rep.Scores...), rep.Overall)
			for _, s := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\n", s.Type, s.TP, s.FP, s.FN, s.Precision, s.Recall, s.F1)
			}
			return tw.Flush()
		}}
	ex.Flags().StringVar(&dataset, "dataset", "", "the labelled dialogues (JSON, see eval/extraction-dialogues.json)")
	cmd.AddCommand(ex)
	return cmd
}
