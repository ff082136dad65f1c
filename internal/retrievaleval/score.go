package retrievaleval

import (
	"math"
	"sort"
	"strings"
	"unicode"
)

// BM25 is Okapi BM25 (k1 1.2, b 0.75) over one conversation's turns, with a plain tokenizer:
// lower-cased runs of letters and digits, no stemming, no stop words. It is the baseline the
// report shows beside Strata's numbers.
type BM25 struct {
	ids   []string
	tf    []map[string]int
	lens  []int
	df    map[string]int
	avgdl float64
}

// Tokens splits text into lower-cased runs of letters and digits.
func Tokens(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// NewBM25 indexes docs (id -> text, in ids' order).
func NewBM25(ids, texts []string) *BM25 {
	x := &BM25{ids: ids, df: map[string]int{}}
	total := 0
	for _, t := range texts {
		toks := Tokens(t)
		tf := map[string]int{}
		for _, w := range toks {
			tf[w]++
		}
		for w := range tf {
			x.df[w]++
		}
		x.tf = append(x.tf, tf)
		x.lens = append(x.lens, len(toks))
		total += len(toks)
	}
	if len(texts) > 0 {
		x.avgdl = float64(total) / float64(len(texts))
	}
	return x
}

// Search returns the ids of the k best-scoring documents (score > 0), best first; ties keep
// the documents' order.
func (x *BM25) Search(query string, k int) []string {
	const k1, b = 1.2, 0.75
	n := float64(len(x.ids))
	q := map[string]bool{}
	for _, w := range Tokens(query) {
		q[w] = true
	}
	type hit struct {
		i     int
		score float64
	}
	var hits []hit
	for i, tf := range x.tf {
		s := 0.0
		for w := range q {
			f := float64(tf[w])
			if f == 0 {
				continue
			}
			df := float64(x.df[w])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			s += idf * f * (k1 + 1) / (f + k1*(1-b+b*float64(x.lens[i])/x.avgdl))
		}
		if s > 0 {
			hits = append(hits, hit{i, s})
		}
	}
	sort.SliceStable(hits, func(a, c int) bool { return hits[a].score > hits[c].score })
	var out []string
	for _, h := range hits[:min(k, len(hits))] {
		out = append(out, x.ids[h.i])
	}
	return out
}

// Ranked is one question's answer as ranked turns: each rank holds the turn ids its result
// stands for (a memory written by several identical turns stands for all of them).
type Ranked [][]string

// Scores are one question's figures.
type Scores struct {
	RecallAt5, RecallAt10, HitAt10, NDCG10, RR float64
}

// Score rates a ranking against the evidence turns: recall@k is the share of evidence turns
// among the first k results, hit@10 whether any is in the first 10, NDCG@10 gains 1 at each
// rank that brings an evidence turn not seen above it (the ideal puts every evidence turn
// first), and the reciprocal rank is 1/rank of the first result holding evidence.
func Score(r Ranked, evidence []string) Scores {
	want := map[string]bool{}
	for _, e := range evidence {
		want[e] = true
	}
	if len(want) == 0 {
		return Scores{}
	}
	seen := map[string]bool{}
	var s Scores
	dcg := 0.0
	for rank, turns := range r {
		if rank >= 10 {
			break
		}
		gain := false
		for _, t := range turns {
			if want[t] && !seen[t] {
				seen[t] = true
				gain = true
			}
		}
		if gain {
			dcg += 1 / math.Log2(float64(rank+2))
			if s.RR == 0 {
				s.RR = 1 / float64(rank+1)
			}
		}
		if rank == 4 {
			s.RecallAt5 = float64(len(seen)) / float64(len(want))
		}
	}
	if len(r) < 5 {
		s.RecallAt5 = float64(len(seen)) / float64(len(want))
	}
	s.RecallAt10 = float64(len(seen)) / float64(len(want))
	if len(seen) > 0 {
		s.HitAt10 = 1
	}
	idcg := 0.0
	for i := 0; i < min(len(want), 10); i++ {
		idcg += 1 / math.Log2(float64(i+2))
	}
	s.NDCG10 = dcg / idcg
	return s
}

// Wilson is the Wilson score interval at 95 % for k successes in n trials.
func Wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 0
	}
	const z = 1.959964
	p := float64(k) / float64(n)
	nf := float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return math.Max(0, mid-half), math.Min(1, mid+half)
}

// Quantile is the q-quantile (nearest rank) of xs; xs is sorted in place.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
