package consolidation

import (
	"math"
	"sort"
	"strings"
	"unicode"
)

// The extractive rolling summariser: what a session or job summary is without an LLM (and
// when the LLM's answer is unusable). It does not truncate: it splits the previous summary
// and the new turns or events into sentences and picks, within the token budget, the most
// informative ones by SumBasic (Nenkova & Vanderwende, 2005) — a sentence's score is the
// mean probability of its content words in the whole text, and once a sentence is chosen
// the probabilities of its words are squared, so the next pick says something else. Values
// (numbers, codes such as 4K or #1A7F8E) and what the user said weigh more; sentences the
// previous summary kept weigh a little more, so a rolling summary does not churn. The
// chosen sentences are written in their original order. Deterministic: the same input
// gives the same summary.

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
		im ive id ill dont doesnt didnt cant wont isnt arent wasnt thats whats`) {
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
	prob := map[string]float64{}
	total := 0.0
	for _, s := range ss {
		for _, w := range s.words {
			prob[w]++
			total++
		}
	}
	for w := range prob {
		prob[w] /= total
	}
	for i := range ss {
		ss[i].cost = count(ss[i].text + "\n")
	}
	chosen := make([]bool, len(ss))
	used := 0
	for {
		best, bestScore := -1, 0.0
		for i, s := range ss {
			if chosen[i] || used+s.cost > budget {
				continue
			}
			sum := 0.0
			seen := map[string]bool{}
			n := 0
			for _, w := range s.words {
				if !seen[w] {
					seen[w] = true
					sum += prob[w]
					n++
				}
			}
			// Mean word probability, scaled down gently for very short sentences (one
			// frequent word is not a summary).
			score := sum / float64(n) * s.boost * math.Min(1, 0.5+float64(n)/8)
			if score > bestScore {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			break
		}
		chosen[best] = true
		used += ss[best].cost
		for _, w := range ss[best].words {
			prob[w] *= prob[w]
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
