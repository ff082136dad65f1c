package console

import (
	"fmt"
	"sort"
	"strings"
)

// An erasure receipt in plain words: per tier, what was removed and whether the re-check
// found anything left; the internal counters (cache keys, search indexes, notifications,
// stored responses) are folded away under their own heading.

// tierNames are the tiers as a compliance officer reads them, in the order the page lists them.
var tierNames = []struct{ key, name string }{
	{"semantic", "Memories"},
	{"keyvalue", "Preferences (key-value)"},
	{"graph", "Graph memory (entities and relations)"},
	{"working", "Conversations and working state"},
	{"jobs", "Jobs, steps and checkpoints"},
	{"episodic", "Job event logs"},
	{"assets", "Assets"},
	{"extraction", "Extraction records"},
	{"summaries", "Summaries"},
	{"gdpr", "Restrictions"},
	{"river", "Queued background work"},
	{"idempotency", "Stored API responses"},
}

// itemNames says what a counter counts (one, many); a counter not listed is internal
// bookkeeping.
var itemNames = map[string][2]string{
	"semantic.memories":   {"memory", "memories"},
	"semantic.versions":   {"earlier version", "earlier versions"},
	"semantic.retrievals": {"retrieval record", "retrieval records"},
	"graph.entities":      {"entity", "entities"}, "graph.relations": {"relation", "relations"},
	"keyvalue.entries":          {"preference", "preferences"},
	"keyvalue.versions":         {"earlier value", "earlier values"},
	"working.sessions":          {"session", "sessions"},
	"working.states":            {"state document", "state documents"},
	"working.turns":             {"conversation turn", "conversation turns"},
	"jobs.jobs":                 {"job", "jobs"},
	"jobs.steps":                {"step", "steps"},
	"jobs.attempts":             {"step attempt", "step attempts"},
	"jobs.checkpoints":          {"checkpoint", "checkpoints"},
	"jobs.handoffs":             {"handoff", "handoffs"},
	"jobs.langgraph":            {"LangGraph checkpoint", "LangGraph checkpoints"},
	"jobs.checkpoints_redacted": {"checkpoint redacted", "checkpoints redacted"},
	"episodic.events_deleted":   {"event deleted", "events deleted"},
	"episodic.events_redacted":  {"event redacted", "events redacted"},
	"assets.assets":             {"asset", "assets"},
	"assets.versions":           {"asset version", "asset versions"},
	"assets.versions_redacted":  {"asset version redacted", "asset versions redacted"},
	"extraction.states":         {"extraction state", "extraction states"},
	"extraction.provenance":     {"provenance record", "provenance records"},
	"summaries.versions":        {"summary", "summaries"},
	"gdpr.restrictions":         {"restriction", "restrictions"},
	"river.jobs":                {"queued job", "queued jobs"},
	"idempotency.records":       {"stored response", "stored responses"},
}

type receiptRow struct {
	Tier     string
	Removed  string // "3 memories, 2 earlier versions" or "nothing"
	Verified string // "nothing left", "2 left", or "" before verification
	Clean    bool
}

type receiptView struct {
	Rows     []receiptRow
	Internal []string // "semantic.scope_indexes: 1", for the folded details
}

// receipt groups an erasure's counts (tier → counter → n) and its verification's
// remaining checks ("tier.table" → n) by tier.
func receipt(e map[string]any) receiptView {
	var v receiptView
	counts := map[string]map[string]float64{}
	for tier, m := range obj(e["counts"]) {
		counts[tier] = map[string]float64{}
		for k, n := range obj(m) {
			f, _ := n.(float64)
			counts[tier][k] = f
		}
	}
	remaining := map[string]float64{}
	verified := false
	if ver := obj(e["verification"]); ver != nil {
		verified = true
		for k, n := range obj(ver["remaining"]) {
			f, _ := n.(float64)
			tier, _, _ := strings.Cut(k, ".") // "river.river_job", "jobs.job_tree", "working.redis_sessions" too
			remaining[tier] += f
		}
	}
	for _, t := range tierNames {
		var parts []string
		for _, k := range sortedKeys(counts[t.key]) {
			n := counts[t.key][k]
			name, plain := itemNames[t.key+"."+k]
			if n == 0 {
				continue
			}
			if !plain {
				v.Internal = append(v.Internal, fmt.Sprintf("%s.%s: %d", t.key, k, int64(n)))
				continue
			}
			word := name[1]
			if n == 1 {
				word = name[0]
			}
			parts = append(parts, fmt.Sprintf("%d %s", int64(n), word))
		}
		left, checked := remaining[t.key]
		if len(parts) == 0 && !(checked && left > 0) {
			continue
		}
		row := receiptRow{Tier: t.name, Removed: strings.Join(parts, ", "), Clean: left == 0}
		if row.Removed == "" {
			row.Removed = "nothing"
		}
		if verified {
			row.Verified = "nothing left"
			if left > 0 {
				row.Verified = fmt.Sprintf("%d left", int64(left))
			}
		}
		v.Rows = append(v.Rows, row)
	}
	for tier, m := range counts { // tiers the page does not name yet: shown, never dropped
		if !knownTier(tier) {
			for k, n := range m {
				v.Internal = append(v.Internal, fmt.Sprintf("%s.%s: %d", tier, k, int64(n)))
			}
		}
	}
	sort.Strings(v.Internal)
	return v
}

func knownTier(t string) bool {
	for _, x := range tierNames {
		if x.key == t {
			return true
		}
	}
	return false
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }
