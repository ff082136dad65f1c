package consolidation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
)

// StepFact is one step of a finished job.
type StepFact struct {
	StepID      string  `json:"step_id"`
	Status      string  `json:"status"`
	Attempts    int     `json:"attempts"`
	Seconds     float64 `json:"seconds"`
	Disposition string  `json:"disposition,omitempty"`
}

// Edit is the settled form of one op: the params of its last event that was not reverted.
type Edit struct {
	Op     string          `json:"op"`
	Params json.RawMessage `json:"params"`
	Seq    int64           `json:"seq"`
}

// Facts is everything a job summary is written from.
type Facts struct {
	JobID      string                   `json:"job_id"`
	Goal       string                   `json:"goal"`
	Status     string                   `json:"status"`
	Outcome    json.RawMessage          `json:"outcome,omitempty"`
	UserID     string                   `json:"-"`
	AgentID    string                   `json:"agent_id,omitempty"`
	CreatedAt  time.Time                `json:"created_at"`
	FinishedAt *time.Time               `json:"finished_at,omitempty"`
	Steps      []StepFact               `json:"steps"`
	Settled    []Edit                   `json:"settled_edits"`
	Events     int                      `json:"events" doc:"Edits in the log (reverts and compaction summaries not counted)."`
	Reverted   int                      `json:"reverted_edits"`
	Overridden int                      `json:"overridden_edits" doc:"Edits a later edit of the same op replaced."`
	Assets     []episodic.ProducedAsset `json:"assets"`
	LastSeq    int64                    `json:"last_seq"`
}

// Duration is how long the job ran (creation to finish).
func (f Facts) Duration() time.Duration {
	if f.FinishedAt == nil {
		return 0
	}
	return f.FinishedAt.Sub(f.CreatedAt)
}

// maxSummaryEvents bounds how much of a very long log a summary reads.
const maxSummaryEvents = 200000

// Settle computes the settled edits of a log: for each op (in order of first appearance),
// the params of its last event that no revert points at. Revert events and compaction
// summaries are not edits.
func Settle(evs []episodic.Event) (settled []Edit, edits, reverted, overridden int) {
	rev := map[int64]bool{}
	for _, e := range evs {
		if e.Op == episodic.OpRevert && e.RevertsSeq > 0 {
			rev[e.RevertsSeq] = true
		}
	}
	last := map[string]Edit{}
	var order []string
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Op == episodic.OpRevert || e.Op == episodic.OpCompaction {
			continue
		}
		edits++
		if !seen[e.Op] {
			seen[e.Op] = true
			order = append(order, e.Op)
		}
		if rev[e.Seq] {
			reverted++
			continue
		}
		if _, ok := last[e.Op]; ok {
			overridden++
		}
		last[e.Op] = Edit{Op: e.Op, Params: e.Params, Seq: e.Seq}
	}
	for _, op := range order {
		if ed, ok := last[op]; ok {
			settled = append(settled, ed)
		}
	}
	return settled, edits, reverted, overridden
}

// gather reads the facts of a finished job.
func (c *Consolidator) gather(ctx context.Context, q pg.DBTX, org, jobID string) (Facts, error) {
	j, err := c.Jobs.GetJob(ctx, q, org, jobID)
	if err != nil {
		return Facts{}, err
	}
	f := Facts{JobID: j.JobID, Goal: j.Goal, Status: j.Status, Outcome: j.Outcome, UserID: j.UserID, AgentID: j.AgentID,
		CreatedAt: j.CreatedAt, FinishedAt: j.FinishedAt, Steps: []StepFact{}, Assets: []episodic.ProducedAsset{}}
	after := ""
	for len(f.Steps) < 1000 {
		steps, err := c.Jobs.ListSteps(ctx, q, org, jobID, after, 200)
		if err != nil {
			return Facts{}, err
		}
		for _, s := range steps {
			sf := StepFact{StepID: s.StepID, Status: s.Status, Attempts: s.Attempts, Disposition: s.Disposition}
			if s.FinishedAt != nil {
				sf.Seconds = s.FinishedAt.Sub(s.StartedAt).Seconds()
			}
			f.Steps = append(f.Steps, sf)
		}
		if len(steps) < 200 {
			break
		}
		after = jobs.StepCursor(steps[len(steps)-1])
	}
	var evs []episodic.Event
	var afterSeq int64
	for len(evs) < maxSummaryEvents {
		page, err := c.Episodic.List(ctx, q, org, jobID, episodic.ListQuery{AfterSeq: afterSeq, Limit: episodic.MaxListLimit})
		if err != nil {
			if isNotFound(err) { // a job that never logged an event
				break
			}
			return Facts{}, err
		}
		evs = append(evs, page...)
		if len(page) < episodic.MaxListLimit {
			break
		}
		afterSeq = page[len(page)-1].Seq
	}
	f.Settled, f.Events, f.Reverted, f.Overridden = Settle(evs)
	if f.Settled == nil {
		f.Settled = []Edit{}
	}
	if len(evs) > 0 {
		f.LastSeq = evs[len(evs)-1].Seq
	}
	if f.Assets, err = c.Episodic.AssetsOfJob(ctx, q, org, jobID, 100); err != nil {
		return Facts{}, err
	}
	if f.Assets == nil {
		f.Assets = []episodic.ProducedAsset{}
	}
	return f, nil
}

func compactJSON(raw json.RawMessage, max int) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return ""
	}
	s := b.String()
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// Extractive writes a deterministic summary from the facts alone: the same facts always
// give the same text. It is what runs without an LLM, and the fallback when one fails.
func Extractive(f Facts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s (%s)", f.JobID, f.Status)
	if g := strings.TrimSpace(f.Goal); g != "" {
		fmt.Fprintf(&b, ": %s", strings.TrimSuffix(g, "."))
	}
	b.WriteString(".")
	if len(f.Outcome) > 0 && string(f.Outcome) != "null" {
		fmt.Fprintf(&b, " Outcome: %s.", compactJSON(f.Outcome, 400))
	}
	if len(f.Settled) > 0 {
		fmt.Fprintf(&b, " Settled parameters (%d):", len(f.Settled))
		for i, e := range f.Settled {
			if i == 40 {
				fmt.Fprintf(&b, " … and %d more", len(f.Settled)-i)
				break
			}
			sep := ";"
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s %s", sep, e.Op, compactJSON(e.Params, 300))
		}
		b.WriteString(".")
	} else {
		b.WriteString(" No edits were recorded.")
	}
	if f.Reverted > 0 || f.Overridden > 0 {
		fmt.Fprintf(&b, " Tried and discarded: %d reverted, %d replaced by a later edit of the same op (of %d edits).",
			f.Reverted, f.Overridden, f.Events)
	}
	if len(f.Steps) > 0 {
		var total float64
		counts := map[string]int{}
		for _, s := range f.Steps {
			total += s.Seconds
			counts[s.Status]++
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d %s", counts[k], k)
		}
		fmt.Fprintf(&b, " Steps: %d (%s), %s of step time:", len(f.Steps), strings.Join(parts, ", "),
			roundDuration(time.Duration(total*float64(time.Second))))
		for i, s := range f.Steps {
			if i == 20 {
				fmt.Fprintf(&b, " … and %d more", len(f.Steps)-i)
				break
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s %s %s", sep, s.StepID, s.Status, roundDuration(time.Duration(s.Seconds*float64(time.Second))))
		}
		b.WriteString(".")
	}
	if len(f.Assets) > 0 {
		b.WriteString(" Assets produced:")
		for i, a := range f.Assets {
			if i == 20 {
				fmt.Fprintf(&b, " … and %d more", len(f.Assets)-i)
				break
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s v%d", sep, a.AssetID, a.Version)
			if a.MediaType != "" {
				fmt.Fprintf(&b, " (%s)", a.MediaType)
			}
		}
		b.WriteString(".")
	}
	if d := f.Duration(); d > 0 {
		fmt.Fprintf(&b, " Took %s.", roundDuration(d))
	}
	return b.String()
}

// metadata is the job memory's metadata: what POST /v1/jobs/similar answers (job_id,
// outcome, parameters) and what an operator wants to filter on. It is kept under the
// API's 16 KiB metadata limit by dropping detail (steps, assets, then parameters).
func metadata(f Facts, summarizer string) map[string]any {
	var outcome any = f.Status
	if len(f.Outcome) > 0 && string(f.Outcome) != "null" {
		_ = json.Unmarshal(f.Outcome, &outcome)
	}
	params := map[string]any{}
	for _, e := range f.Settled {
		var v any
		if json.Unmarshal(e.Params, &v) == nil {
			params[e.Op] = v
		}
	}
	m := map[string]any{
		"job_id": f.JobID, "outcome": outcome, "status": f.Status, "parameters": params,
		"duration_seconds": f.Duration().Seconds(), "events": f.Events, "reverted_edits": f.Reverted,
		"overridden_edits": f.Overridden, "steps": f.Steps, "assets": f.Assets, "summarizer": summarizer,
		"last_seq": f.LastSeq,
	}
	size := func() int { b, _ := json.Marshal(m); return len(b) }
	const limit = 16 << 10
	if size() > limit {
		m["steps"], m["steps_truncated"] = f.Steps[:min(len(f.Steps), 10)], true
	}
	if size() > limit {
		delete(m, "assets")
		m["assets_truncated"] = true
	}
	if size() > limit {
		kept := map[string]any{}
		m["parameters"], m["parameters_truncated"] = kept, true
		for _, e := range f.Settled {
			kept[e.Op] = params[e.Op]
			if size() > limit {
				delete(kept, e.Op)
				break
			}
		}
	}
	if size() > limit {
		m["outcome"] = f.Status
	}
	return m
}
