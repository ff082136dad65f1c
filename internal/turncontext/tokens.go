// Package turncontext assembles the per-turn context an agent sends its model: sections in
// priority order (job resume summary, working state, preferences, memories, similar jobs),
// packed into a token budget counted with the model's real tokenizer. It knows nothing of
// the stores: internal/httpapi reads them and hands the candidates in.
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
	return &Counter{model: model, encoding: string(enc), estimated: estimated, codec: c, cache: cache}, nil
}

// Count returns the number of tokens of s. Counts of strings seen before come from a
// bounded cache (memory texts and step results recur turn after turn).
func (c *Counter) Count(s string) int {
	if s == "" {
		return 0
	}
	if len(s) < 64 {
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
