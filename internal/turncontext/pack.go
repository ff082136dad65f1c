package turncontext

import (
	"sort"
	"strings"
)

// Section names, in priority order.
const (
	SectionJob         = "job"
	SectionWorking     = "working_state"
	SectionSummary     = "summary"
	SectionPreferences = "preferences"
	SectionMemories    = "memories"
	SectionGraph       = "graph"
	SectionSimilarJobs = "similar_jobs"
)

// Item is one candidate line of a section.
type Item struct {
	// ID names the item in the report of what was left out (a step id, a memory id, a
	// key, ...).
	ID string
	// Text is what the model reads (one or more lines, no trailing newline).
	Text string
	// Why says why the item was chosen, when its section says (graph: "mentioned: 'Ana'").
	Why string
	// Order places the item when the section is rendered (ascending; ties keep priority
	// order). Items are chosen in slice order (priority) but may be shown in another order,
	// e.g. completed steps chosen newest first and shown oldest first.
	Order int
}

// Section is one block of the context: a header and its candidate items in priority order.
type Section struct {
	Name   string
	Header string
	Items  []Item
	// Note says why a section is empty (no job_id given, nothing found, restricted...).
	Note string
}

// LeftOut is an item that did not fit in the budget.
type LeftOut struct {
	ID     string `json:"id"`
	Tokens int    `json:"tokens" doc:"What it would have cost."`
}

// maxLeftOutListed bounds the left_out list of one section (left_out_count has them all).
const maxLeftOutListed = 50

// Packed is one section as placed in the context.
type Packed struct {
	Name         string    `json:"name" enum:"job,working_state,summary,preferences,memories,graph,similar_jobs"`
	Tokens       int       `json:"tokens" doc:"Tokens this section's text takes (with the model's tokenizer)."`
	Text         string    `json:"text" doc:"The section as the model should read it (empty when nothing was included)."`
	Candidates   int       `json:"candidates" doc:"Items that were available."`
	Included     []string  `json:"included" doc:"Ids of the items included, in priority order."`
	Why          []string  `json:"why,omitempty" doc:"Why each included item was chosen, in the order of included, for sections whose items say (graph: \"mentioned: 'Ana'\")."`
	LeftOut      []LeftOut `json:"left_out" doc:"Items left out for the budget (at most 50 listed; left_out_count has the total)."`
	LeftOutCount int       `json:"left_out_count"`
	Note         string    `json:"note,omitempty" doc:"Why the section is empty or partial."`
}

// Result is the assembled context.
type Result struct {
	Sections []Packed
	Prompt   string
	Tokens   int
}

const sectionSep = "\n\n"

// Pack places the sections in priority order within budget tokens: a section's header
// goes in only with at least one of its items (or alone when it has none but a note); items
// go in greedily in priority order, and an item that does not fit is left out while later,
// smaller ones may still fit. Every count is the counter's; the prompt's total is counted
// again as one string and items are dropped from the lowest-priority section until it fits,
// so Tokens ≤ budget always holds.
func Pack(c *Counter, budget int, sections []Section) Result {
	type state struct {
		sec      Section
		header   int
		included []int // indexes into sec.Items, priority order
		costs    []int
	}
	st := make([]*state, len(sections))
	used := 0
	sepCost := c.Count(sectionSep)
	for i, sec := range sections {
		s := &state{sec: sec, costs: make([]int, len(sec.Items))}
		st[i] = s
		if len(sec.Items) == 0 {
			continue
		}
		s.header = c.Count(sec.Header + "\n")
		overhead := s.header
		if used > 0 {
			overhead += sepCost
		}
		for j, it := range sec.Items {
			s.costs[j] = c.Count(it.Text + "\n")
			need := s.costs[j]
			if len(s.included) == 0 {
				need += overhead
			}
			if used+need <= budget {
				used += need
				s.included = append(s.included, j)
			}
		}
	}
	render := func() (string, []string) {
		var parts []string
		texts := make([]string, len(st))
		for i, s := range st {
			if len(s.included) == 0 {
				continue
			}
			idx := append([]int(nil), s.included...)
			sort.SliceStable(idx, func(a, b int) bool { return s.sec.Items[idx[a]].Order < s.sec.Items[idx[b]].Order })
			var b strings.Builder
			b.WriteString(s.sec.Header)
			for _, j := range idx {
				b.WriteString("\n")
				b.WriteString(s.sec.Items[j].Text)
			}
			texts[i] = b.String()
			parts = append(parts, texts[i])
		}
		return strings.Join(parts, sectionSep), texts
	}
	prompt, texts := render()
	total := c.Count(prompt)
	// Token boundaries across joined pieces can differ from the sum of the pieces by a few
	// tokens: trim from the end until the real count fits.
	for total > budget {
		dropped := false
		for i := len(st) - 1; i >= 0 && !dropped; i-- {
			if n := len(st[i].included); n > 0 {
				st[i].included = st[i].included[:n-1]
				dropped = true
			}
		}
		if !dropped {
			break
		}
		prompt, texts = render()
		total = c.Count(prompt)
	}

	out := Result{Prompt: prompt, Tokens: total, Sections: make([]Packed, len(st))}
	for i, s := range st {
		p := Packed{Name: s.sec.Name, Text: texts[i], Candidates: len(s.sec.Items), Note: s.sec.Note,
			Included: []string{}, LeftOut: []LeftOut{}}
		if texts[i] != "" {
			p.Tokens = c.Count(texts[i])
		}
		in := make(map[int]bool, len(s.included))
		for _, j := range s.included {
			in[j] = true
			p.Included = append(p.Included, s.sec.Items[j].ID)
			if w := s.sec.Items[j].Why; w != "" {
				p.Why = append(p.Why, w)
			}
		}
		for j, it := range s.sec.Items {
			if in[j] {
				continue
			}
			p.LeftOutCount++
			if len(p.LeftOut) < maxLeftOutListed {
				p.LeftOut = append(p.LeftOut, LeftOut{ID: it.ID, Tokens: s.costs[j]})
			}
		}
		if p.LeftOutCount > 0 && p.Note == "" {
			if len(p.Included) == 0 {
				p.Note = "left out: the budget was spent on higher-priority sections"
			} else {
				p.Note = "partial: the rest did not fit in the budget"
			}
		}
		out.Sections[i] = p
	}
	return out
}

// Truncate cuts s to at most max runes, marking the cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "…"
}
