package consolidation

import (
	"math"
	"sort"
	"strings"
	"unicode"
)

// The extractive rolling summariser: what a session or job summary is without an LLM (and
// when the LLM's answer is unusable). It does not truncate: it splits the previous summary
// and the new turns or events into sentences and picks, greedily within the token budget,
// the most informative ones. A word weighs log(1 + sentences/df)·(1 + log(tf)/4) (a topic the
// conversation returns to counts a little; a phrase in every other sentence does not); a sentence
// scores the mean weight of its content words, and once one is chosen its words weigh less
// (SumBasic's redundancy step, Nenkova & Vanderwende 2005), so the next pick says something
// else. Values (numbers, codes such as 4K or #1A7F8E) and what the user said weigh more;
// sentences the previous summary kept weigh a little less than new ones, so a rolling
// summary follows the conversation and keeps an old sentence only while it stays
// distinctive. The chosen sentences are written in their original order. Deterministic: the same
// input gives the same summary.

// Passage is one unit of input: a turn or an event, with the speaker or op it is from.
type Passage struct {
	Seq   int64
	Label string // "user", "assistant", "event video.cut", ... ("" for the previous summary)
	Text  string
	// Weight multiplies its sentences' scores (1 when zero).
	Weight float64
}

type sentence struct {
	text  string
	pos   int
	words []string
	boost float64
	cost  int
}

var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the and or but if then else of to in on at by for with from as is are was
		were be been being am do does did done have has had having i me my mine we us our you your yours he him his she
		her it its they them their this that these those there here what which who whom whose when where why how all any
		both each few more most other some such no nor not only own same so than too very can will just should would
		could may might must shall also about above after again against before below between into through during out
		over under up down off once further let lets okay ok yes yeah sure please thanks thank hi hello hey well oh
		im ive id ill dont doesnt didnt cant wont isnt arent wasnt thats whats anything something nothing everything
		got noted sure understood great nice good sounds fine right bye goodbye cool perfect awesome alright will`) {
		m[w] = true
	}
	return m
}()

// contentWords are the lower-cased words of s that carry content, and whether s holds a
// value (a word with a digit, or a code with an inner capital or a #).
func contentWords(s string) ([]string, bool) {
	var out []string
	value := false
	for _, f := range strings.FieldsFunc(s, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '#' || r == '\'')
	}) {
		w := strings.Trim(strings.ReplaceAll(f, "'", ""), "#")
		if w == "" {
			continue
		}
		hasDigit := strings.IndexFunc(w, unicode.IsDigit) >= 0
		if hasDigit || strings.HasPrefix(f, "#") || strings.IndexFunc(w[1:], unicode.IsUpper) >= 0 {
			value = true
		}
		lw := strings.ToLower(w)
		if stopwords[lw] || (len([]rune(lw)) < 2 && !hasDigit) {
			continue
		}
		out = append(out, lw)
	}
	return out, value
}

// splitSentences cuts text at sentence ends (. ! ? followed by a space or the end) and at
// line breaks; decimals and versions (4.5, v1.2) stay whole.
func splitSentences(text string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if s := strings.TrimSpace(b.String()); s != "" {
			out = append(out, s)
		}
		b.Reset()
	}
	rs := []rune(text)
	for i, r := range rs {
		if r == '\n' || r == '\r' {
			flush()
			continue
		}
		b.WriteRune(r)
		if (r == '.' || r == '!' || r == '?') && (i+1 == len(rs) || unicode.IsSpace(rs[i+1])) {
			flush()
		}
	}
	flush()
	return out
}

// maxSentenceRunes bounds one sentence (a pasted document is cut, never the whole budget).
const maxSentenceRunes = 400

// Extract writes the extractive summary of passages within budget tokens (count counts
// them), one sentence per line, labelled by where it came from.
func Extract(passages []Passage, budget int, count func(string) int) string {
	var ss []sentence
	for _, p := range passages {
		w := p.Weight
		if w == 0 {
			w = 1
		}
		for _, t := range splitSentences(p.Text) {
			if r := []rune(t); len(r) > maxSentenceRunes {
				t = string(r[:maxSentenceRunes-1]) + "…"
			}
			words, value := contentWords(t)
			if len(words) == 0 {
				continue
			}
			line := t
			if p.Label != "" {
				line = p.Label + ": " + t
			}
			boost := w
			if value {
				boost *= 1.5
			}
			ss = append(ss, sentence{text: line, pos: len(ss), words: words, boost: boost})
		}
	}
	if len(ss) == 0 || budget <= 0 {
		return ""
	}
	// Word weights: log(1 + sentences / sentences with the word) × (1 + log(tf)/4): what is
	// distinctive counts most, a topic the conversation returns to a little more, and a
	// phrase repeated in every other sentence ("sounds good", the op of a thousand trims)
	// never drowns the one sentence that holds a value.
	tf, df := map[string]float64{}, map[string]float64{}
	for _, s := range ss {
		seen := map[string]bool{}
		for _, w := range s.words {
			tf[w]++
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
	}
	weight := map[string]float64{}
	for w := range tf {
		weight[w] = math.Log(1+float64(len(ss))/df[w]) * (1 + math.Log(tf[w])/4)
	}
	// Identical sentences are candidates once (the first).
	dup := map[string]bool{}
	for i := range ss {
		k := strings.Join(ss[i].words, " ")
		if dup[k] {
			ss[i].cost = -1
			continue
		}
		dup[k] = true
		ss[i].cost = count(ss[i].text + "\n")
	}
	chosen := make([]bool, len(ss))
	used := 0
	for {
		best, bestScore := -1, 0.0
		for i, s := range ss {
			if chosen[i] || s.cost < 0 || used+s.cost > budget {
				continue
			}
			sum := 0.0
			seen := map[string]bool{}
			n := 0
			for _, w := range s.words {
				if !seen[w] {
					seen[w] = true
					sum += weight[w]
					n++
				}
			}
			// Mean word weight, scaled down for very short sentences (one word is rarely a
			// summary) and gently for very long ones.
			score := sum / float64(n) * s.boost * math.Min(1, 0.4+float64(n)/6) / math.Max(1, math.Sqrt(float64(n)/25))
			if score > bestScore {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			break
		}
		chosen[best] = true
		used += ss[best].cost
		// SumBasic's redundancy step: what was said weighs less in the next pick.
		for _, w := range ss[best].words {
			weight[w] *= 0.3
		}
	}
	var picked []sentence
	for i, s := range ss {
		if chosen[i] {
			picked = append(picked, s)
		}
	}
	sort.SliceStable(picked, func(i, j int) bool { return picked[i].pos < picked[j].pos })
	lines := make([]string, len(picked))
	for i, s := range picked {
		lines[i] = s.text
	}
	return strings.Join(lines, "\n")
}
