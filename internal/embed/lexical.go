package embed

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// LexicalModel is the Model() of the lexical embedder. Bump it when the feature scheme
// changes: stored vectors of another scheme are then re-embedded (see docs/semantic.md).
const LexicalModel = "strata-lexical-v1"

// Lexical is the offline default: feature hashing of
//
//   - word unigrams (weight 1.0),
//   - word bigrams (weight 0.5), and
//   - character 3- and 4-grams of each word with boundary marks (each weighing sqrt(2/n)
//     for a word of n grams, so a word's pieces together weigh twice its whole form and
//     "prefers" lands near "preferred"),
//
// each hashed (FNV-1a, 64 bit) to one of Dims buckets with a sign taken from another bit
// of the hash (so collisions cancel in expectation instead of piling up), term
// accumulated weights above 1 dampened to 1+log(w), and the result L2-normalised, so a dot product is a
// cosine similarity. Deterministic across runs, machines and Go versions.
//
// It captures lexical similarity only: shared words and word pieces ("prefer" ~
// "preferred"), not synonyms or meaning.
type Lexical struct{ dims int }

// NewLexical returns a lexical embedder producing dims-long vectors.
func NewLexical(dims int) *Lexical { return &Lexical{dims: dims} }

// Name implements Embedder.
func (l *Lexical) Name() string { return "lexical" }

// Model implements Embedder.
func (l *Lexical) Model() string { return LexicalModel }

// Dims implements Embedder.
func (l *Lexical) Dims() int { return l.dims }

// Embed implements Embedder. It never fails except on a cancelled context.
func (l *Lexical) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = l.One(t)
	}
	return out, nil
}

// One embeds a single text.
func (l *Lexical) One(text string) []float32 {
	feats := map[string]float64{}
	words := Words(text)
	for i, w := range words {
		feats["w:"+w] += 1
		if i > 0 {
			feats["b:"+words[i-1]+" "+w] += 0.5
		}
		grams := charGrams(w)
		gw := math.Sqrt(2 / float64(len(grams)))
		for _, g := range grams {
			feats["c:"+g] += gw
		}
	}
	v := make([]float32, l.dims)
	for f, tf := range feats {
		h := fnv.New64a()
		h.Write([]byte(f))
		s := h.Sum64()
		idx := int(s % uint64(l.dims))
		w := tf
		if tf > 1 {
			w = 1 + math.Log(tf) // repeated features count sublinearly
		}
		if s>>63 == 1 {
			w = -w
		}
		v[idx] += float32(w)
	}
	return Normalize(v)
}

// Words lower-cases text and splits it into runs of letters and digits.
func Words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func charGrams(w string) []string {
	r := []rune("<" + w + ">")
	var out []string
	for n := 3; n <= 4; n++ {
		for i := 0; i+n <= len(r); i++ {
			out = append(out, string(r[i:i+n]))
		}
	}
	if len(out) == 0 {
		out = append(out, string(r))
	}
	return out
}
