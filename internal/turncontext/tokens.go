// Package turncontext assembles the per-turn context an agent sends its model: sections in
// priority order (job resume summary, working state, preferences, memories, similar jobs),
// packed into a token budget counted with the model's real tokenizer. The Assembler reads
// the tiers through small interfaces (assemble.go) in the request's unit of work, and
// knows nothing of HTTP: internal/httpapi decodes the request and encodes its answer.
package turncontext

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// DefaultModel is the model whose tokenizer counts when a request names none.
const DefaultModel = "gpt-4o"

// Counter counts tokens the way one model's tokenizer does. Safe for concurrent use.
type Counter struct {
	model    string
	encoding string
	// Estimated is true when the model is not an OpenAI model this build knows: the count is
	// then o200k_base's, an estimate (see docs/context.md for how close it runs).
	estimated bool
	codec     tokenizer.Codec
	cache     *countCache
	// split: count by pieces (see Count). Only for cl100k and o200k, whose pre-tokenizer
	// takes whitespace before a newline together with it; p50k's and r50k's (\s+(?!\S))
	// split "  \n" differently at the end of a piece than inside a text.
	split bool
}

// Model is the model asked for; Encoding the BPE vocabulary that counts.
func (c *Counter) Model() string    { return c.model }
func (c *Counter) Encoding() string { return c.encoding }
func (c *Counter) Estimated() bool  { return c.estimated }

var (
	codecsMu sync.Mutex
	codecs   = map[tokenizer.Encoding]tokenizer.Codec{}
	caches   = map[tokenizer.Encoding]*countCache{}
)

// codecFor returns the shared codec of an encoding: the vocabularies are Go maps compiled
// into the binary (github.com/tiktoken-go/tokenizer), built once per process, nothing is
// downloaded.
func codecFor(enc tokenizer.Encoding) (tokenizer.Codec, *countCache, error) {
	codecsMu.Lock()
	defer codecsMu.Unlock()
	if c, ok := codecs[enc]; ok {
		return c, caches[enc], nil
	}
	c, err := tokenizer.Get(enc)
	if err != nil {
		return nil, nil, err
	}
	codecs[enc], caches[enc] = c, newCountCache(1<<16)
	return c, caches[enc], nil
}

// Encodings this package counts with, besides model names.
var encodings = map[string]tokenizer.Encoding{
	"o200k_base": tokenizer.O200kBase, "cl100k_base": tokenizer.Cl100kBase,
	"p50k_base": tokenizer.P50kBase, "r50k_base": tokenizer.R50kBase,
}

// NewCounter returns the counter of a model ("gpt-4o", "gpt-4.1-mini", "gpt-3.5-turbo",
// "o3", ...) or of an encoding name ("o200k_base", "cl100k_base"). Any other model name
// (another vendor's) is counted with o200k_base and marked estimated. "" means DefaultModel.
func NewCounter(model string) (*Counter, error) {
	if model == "" {
		model = DefaultModel
	}
	enc, ok := encodings[model]
	estimated := false
	if !ok {
		if c, err := tokenizer.ForModel(tokenizer.Model(strings.ToLower(model))); err == nil {
			enc = tokenizer.Encoding(c.GetName())
		} else {
			enc, estimated = tokenizer.O200kBase, true
		}
	}
	c, cache, err := codecFor(enc)
	if err != nil {
		return nil, err
	}
	return &Counter{model: model, encoding: string(enc), estimated: estimated, codec: c, cache: cache,
		split: enc == tokenizer.O200kBase || enc == tokenizer.Cl100kBase}, nil
}

// Count returns the number of tokens of s, exactly as the model's tokenizer counts it.
//
// Long texts are counted line by line: s is cut after a newline that is followed by a
// character that is neither whitespace nor '/', where every encoding's pre-tokenizer
// (the regular expression that splits text before BPE) ends a piece — no pattern of
// cl100k, o200k, p50k or r50k continues across such a cut — so the pieces' counts add up
// to the count of s (the tests check this against the tokenizer on generated and real
// prompts). That holds for cl100k and o200k (every OpenAI chat model); texts for p50k and
// r50k are counted whole. Each piece's count comes from a bounded cache: the lines of a context (memory
// texts, completed steps, preferences) recur turn after turn, so a turn's prompt is mostly
// counted by lookups instead of BPE.
func (c *Counter) Count(s string) int {
	if s == "" {
		return 0
	}
	if !c.split {
		return c.piece(s)
	}
	n, start := 0, 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\n' && cuttable(s[i+1]) && i+1-start >= minPiece {
			n += c.piece(s[start : i+1])
			start = i + 1
		}
	}
	return n + c.piece(s[start:])
}

// minPiece is the shortest piece worth a cache entry of its own.
const minPiece = 32

// cuttable reports whether a piece may start with b: not whitespace (which the newline's
// pre-token could take), not '/' (which o200k's punctuation pattern takes after newlines).
// Before such a byte, the newline ends a pre-token whatever precedes it: after letters,
// digits or spaces by \s*[\r\n]+, after punctuation by ?[^\s\p{L}\p{N}]+[\r\n/]*.
// Bytes ≥ 0x80 start multi-byte runes; the Unicode spaces among them (U+0085, U+00A0,
// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000) are excluded too.
func cuttable(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\v', '\f', '/':
		return false
	}
	return b < 0x80 || (b != 0xc2 && b != 0xe1 && b != 0xe2 && b != 0xe3)
}

// piece counts one piece of Count's split, through the cache.
func (c *Counter) piece(s string) int {
	if len(s) < 8 {
		return c.count(s)
	}
	h := maphash.String(seed, s)
	if n, ok := c.cache.get(h, len(s)); ok {
		return n
	}
	n := c.count(s)
	c.cache.put(h, len(s), n)
	return n
}

func (c *Counter) count(s string) int {
	n, err := c.codec.Count(s)
	if err != nil {
		// Only invalid UTF-8 in strict mode errors, which this codec does not use; a
		// byte-based figure is the safe over-estimate.
		return len(s)
	}
	return n
}

var seed = maphash.MakeSeed()

// countCache maps a string's hash (and length, to make collisions vanishingly rare) to its
// token count. When full it is emptied: recurring strings come back within a turn or two.
type countCache struct {
	mu  sync.RWMutex
	max int
	m   map[[2]uint64]int
}

func newCountCache(max int) *countCache { return &countCache{max: max, m: make(map[[2]uint64]int)} }

func (k *countCache) get(h uint64, n int) (int, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	v, ok := k.m[[2]uint64{h, uint64(n)}]
	return v, ok
}

func (k *countCache) put(h uint64, n, count int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= k.max {
		clear(k.m)
	}
	k.m[[2]uint64{h, uint64(n)}] = count
}
