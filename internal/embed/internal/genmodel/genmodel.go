// Package genmodel generates a tiny BERT-shaped sentence encoder for tests of the onnx
// embedder: a model.onnx with the inputs and output of a real BERT export (input_ids,
// attention_mask, token_type_ids → last_hidden_state [batch, sequence, hidden]) and a
// Hugging Face tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] … [SEP]
// template, truncation and fixed padding like all-MiniLM-L6-v2's), both written from code
// because no model weights can be downloaded here.
//
// The network is a BERT encoder — word, position and token-type embeddings, LayerNorm, then
// per layer multi-head self-attention with the additive attention mask, LayerNorm, a GELU
// feed-forward block, LayerNorm — with weights drawn from a fixed-seed PCG. It means nothing;
// it exercises the same ONNX operators, shapes and masking as the real thing. Tiny (one
// layer, 32 wide) is the committed test fixture; MiniLM has all-MiniLM-L6-v2's shape, for
// timing. The output is byte-for-byte deterministic, so the committed fixture can be
// checked against Tiny.Files().
//
// The ONNX protobuf is written with protowire from the field numbers of onnx.proto (stable
// since ONNX 1.0), so no ONNX Go types are needed.
package genmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
)

// Spec is the shape of a generated model.
type Spec struct {
	Layers       int // encoder layers
	Hidden       int // embedding dimension
	Heads        int // attention heads (Hidden must divide by it)
	FFN          int // feed-forward width
	MaxPositions int // rows of the position table
	Truncate     int // tokenizer.json's truncation.max_length (≤ MaxPositions)
	Vocab        int // vocabulary size; the word list is padded with [unusedN] tokens
}

// Tiny is the committed test fixture (testdata/tiny-bert): about 100 KB.
var Tiny = Spec{Layers: 1, Hidden: 32, Heads: 2, FFN: 64, MaxPositions: 64, Truncate: 64}

// MiniLM has the shape of all-MiniLM-L6-v2 (6 layers, 384 wide, 12 heads, 30522 tokens,
// ~90 MB) with random weights: for measuring the pure-Go runtime's speed, not meaning.
var MiniLM = Spec{Layers: 6, Hidden: 384, Heads: 12, FFN: 1536, MaxPositions: 512, Truncate: 128, Vocab: 30522}

const seed = 20261130

// vocabulary: special tokens first (BERT's order differs, ids don't matter), then
// punctuation, digits, letters, continuation pieces and a few hundred common words.
func vocab(size int) []string {
	v := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	for _, r := range `.,!?'"-:;()/&%$#@*+=<>[]_` {
		v = append(v, string(r))
	}
	for r := '0'; r <= '9'; r++ {
		v = append(v, string(r))
	}
	for r := 'a'; r <= 'z'; r++ {
		v = append(v, string(r))
	}
	for r := '0'; r <= '9'; r++ {
		v = append(v, "##"+string(r))
	}
	for r := 'a'; r <= 'z'; r++ {
		v = append(v, "##"+string(r))
	}
	v = append(v, "##es", "##ed", "##ing", "##er", "##ers", "##ly", "##ion", "##tion", "##al", "##ment", "##ness", "##able", "##ful", "##est")
	words := `the a an and or but if then of to in on at by for with from as is are was were be been
being has have had do does did not no yes this that these those it its he she they we you i me my
your our their his her them us user users agent agents job jobs task tasks memory memories fact facts
prefer prefers preferred preference dark light mode theme colour color editor file files code test
tests run runs build deploy server database query search result results error errors fix bug issue
time date day week month year today yesterday tomorrow morning night hour minute new old first last
next good bad best more less many much some all any each every other same different big small high
low long short fast slow open close start stop read write send receive paid pay invoice bank
transfer money price cost order customer account email phone name address city country language
english french german meeting call note notes project plan team work office home car train flight
hotel trip travel book booked weather rain sun cold warm coffee tea lunch dinner food water music
song movie game sport football likes like want wants need needs use uses used make made get got go
goes went see saw know knows think said say tell ask asked help helps please thank thanks hello
remember forget always never often sometimes usually because about after before during while until
when where why how what which who whom whose there here up down out over under again once only
also just very too so than can could will would should may might must shall`
	seen := map[string]bool{}
	for _, t := range v {
		seen[t] = true
	}
	for _, w := range splitFields(words) {
		if !seen[w] { // single letters ("a", "i") are already in
			seen[w] = true
			v = append(v, w)
		}
	}
	for i := 0; len(v) < size; i++ {
		v = append(v, fmt.Sprintf("[unused%d]", i))
	}
	return v
}

func splitFields(s string) []string {
	var out []string
	start := -1
	for i, r := range s {
		space := r == ' ' || r == '\n' || r == '\t'
		if !space && start < 0 {
			start = i
		}
		if space && start >= 0 {
			out = append(out, s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// Files returns the files of a model of shape sp by name: model.onnx and tokenizer.json.
func (sp Spec) Files() (map[string][]byte, error) {
	if sp.Hidden%sp.Heads != 0 || sp.Truncate > sp.MaxPositions || sp.Layers < 1 {
		return nil, fmt.Errorf("genmodel: bad spec %+v", sp)
	}
	voc := vocab(sp.Vocab)
	tok, err := sp.tokenizerJSON(voc)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"model.onnx": sp.modelONNX(len(voc)), "tokenizer.json": tok}, nil
}

// Write writes sp.Files() into dir (created if missing).
func (sp Spec) Write(dir string) error {
	files, err := sp.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// --- tokenizer.json (Hugging Face tokenizers format, as all-MiniLM-L6-v2 ships it) ---

func (sp Spec) tokenizerJSON(voc []string) ([]byte, error) {
	ids := map[string]int{}
	for i, t := range voc {
		if _, dup := ids[t]; dup {
			return nil, fmt.Errorf("genmodel: duplicate vocabulary entry %q", t)
		}
		ids[t] = i
	}
	special := func(t string) map[string]any {
		return map[string]any{"id": ids[t], "content": t, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true}
	}
	tmpl := func(t string) map[string]any {
		return map[string]any{"id": t, "ids": []int{ids[t]}, "tokens": []string{t}}
	}
	spec := map[string]any{
		"version": "1.0",
		"truncation": map[string]any{"direction": "Right", "max_length": sp.Truncate,
			"strategy": "LongestFirst", "stride": 0},
		"padding": map[string]any{"strategy": map[string]any{"Fixed": sp.Truncate}, "direction": "Right",
			"pad_to_multiple_of": nil, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
		"added_tokens": []any{special("[PAD]"), special("[UNK]"), special("[CLS]"), special("[SEP]"), special("[MASK]")},
		"normalizer": map[string]any{"type": "BertNormalizer", "clean_text": true,
			"handle_chinese_chars": true, "strip_accents": nil, "lowercase": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"post_processor": map[string]any{
			"type": "TemplateProcessing",
			"single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "[CLS]", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": "[SEP]", "type_id": 0}},
			},
			"pair": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "[CLS]", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": "[SEP]", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}},
				map[string]any{"SpecialToken": map[string]any{"id": "[SEP]", "type_id": 1}},
			},
			"special_tokens": map[string]any{"[CLS]": tmpl("[CLS]"), "[SEP]": tmpl("[SEP]")},
		},
		"decoder": map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]",
			"continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": ids},
	}
	b, err := json.MarshalIndent(spec, "", " ") // map keys sorted: deterministic
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// --- model.onnx ---

// ONNX enums and opset.
const (
	tFloat = 1
	tInt64 = 7

	attrFloat = 1
	attrInt   = 2
	attrInts  = 7

	opset     = 17 // LayerNormalization
	irVersion = 8
)

type graph struct {
	nodes, inits [][]byte
	n            int
	rng          *rand.Rand
	hidden       int64
}

func (g *graph) name(prefix string) string {
	g.n++
	return fmt.Sprintf("%s_%d", prefix, g.n)
}

// node appends one operator node and returns its (single) output name.
func (g *graph) node(op string, inputs []string, attrs ...[]byte) string {
	return g.nodeOut(op, g.name(op), inputs, attrs...)
}

// nodeOut appends one operator node whose output is named out.
func (g *graph) nodeOut(op, out string, inputs []string, attrs ...[]byte) string {
	var b []byte
	for _, in := range inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, out)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, out)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, op)
	for _, a := range attrs {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
	}
	g.nodes = append(g.nodes, b)
	return out
}

func attrI(name string, v int64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(v))
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, attrInt)
}

func attrF(name string, v float32) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, math.Float32bits(v))
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, attrFloat)
}

func attrIs(name string, vs ...int64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	var packed []byte
	for _, v := range vs {
		packed = protowire.AppendVarint(packed, uint64(v))
	}
	b = protowire.AppendTag(b, 8, protowire.BytesType)
	b = protowire.AppendBytes(b, packed)
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, attrInts)
}

// tensor encodes a TensorProto with raw little-endian data.
func tensor(name string, dtype int, dims []int64, raw []byte) []byte {
	var b []byte
	for _, d := range dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(dtype))
	b = protowire.AppendTag(b, 8, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	return protowire.AppendBytes(b, raw)
}

func (g *graph) floats(prefix string, dims []int64, vals []float32) string {
	name := g.name(prefix)
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	g.inits = append(g.inits, tensor(name, tFloat, dims, raw))
	return name
}

func (g *graph) ints(prefix string, vals ...int64) string {
	name := g.name(prefix)
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	g.inits = append(g.inits, tensor(name, tInt64, []int64{int64(len(vals))}, raw))
	return name
}

func (g *graph) scalar(prefix string, v float32) string {
	return g.floats(prefix, nil, []float32{v})
}

// random returns a weight tensor of normal(0, std) values.
func (g *graph) random(prefix string, std float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(g.rng.NormFloat64() * std)
	}
	return g.floats(prefix, dims, vals)
}

func (g *graph) constant(prefix string, v float32, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = v
	}
	return g.floats(prefix, dims, vals)
}

func (g *graph) layerNorm(x string) string {
	return g.node("LayerNormalization", []string{x, g.constant("ln_gamma", 1, g.hidden), g.random("ln_beta", 0.02, g.hidden)},
		attrI("axis", -1), attrF("epsilon", 1e-12))
}

func (g *graph) linear(x string, in, out int64) string {
	return g.node("Add", []string{g.node("MatMul", []string{x, g.random("w", 1/math.Sqrt(float64(in)), in, out)}), g.random("b", 0.02, out)})
}

// valueInfo encodes a ValueInfoProto with a tensor type; a dim is a value (>0) or a
// symbolic name.
func valueInfo(name string, elem int, dims ...any) []byte {
	var shape []byte
	for _, d := range dims {
		var dim []byte
		switch d := d.(type) {
		case int:
			dim = protowire.AppendTag(dim, 1, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d))
		case string:
			dim = protowire.AppendTag(dim, 2, protowire.BytesType)
			dim = protowire.AppendString(dim, d)
		}
		shape = protowire.AppendTag(shape, 1, protowire.BytesType)
		shape = protowire.AppendBytes(shape, dim)
	}
	var tt []byte
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(elem))
	tt = protowire.AppendTag(tt, 2, protowire.BytesType)
	tt = protowire.AppendBytes(tt, shape)
	var typ []byte
	typ = protowire.AppendTag(typ, 1, protowire.BytesType)
	typ = protowire.AppendBytes(typ, tt)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, typ)
}

func (sp Spec) modelONNX(vocabSize int) []byte {
	g := &graph{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), hidden: int64(sp.Hidden)}
	hidden, ffn, nHeads := int64(sp.Hidden), int64(sp.FFN), int64(sp.Heads)
	headDim := hidden / nHeads

	// Embeddings: word + token type + position (a slice of the table as long as the input).
	word := g.node("Gather", []string{g.random("word_embeddings", 1, int64(vocabSize), hidden), "input_ids"})
	typ := g.node("Gather", []string{g.random("token_type_embeddings", 0.5, 2, hidden), "token_type_ids"})
	seqLen := g.node("Slice", []string{g.node("Shape", []string{"input_ids"}), g.ints("one", 1), g.ints("two", 2), g.ints("axis0", 0)})
	pos := g.node("Slice", []string{g.random("position_embeddings", 0.5, int64(sp.MaxPositions), hidden), g.ints("zero", 0), seqLen, g.ints("axis0", 0)})
	h := g.layerNorm(g.node("Add", []string{g.node("Add", []string{word, typ}), pos}))

	// BERT's additive mask (1 - mask) * -10000, shaped [B, 1, 1, S].
	mask := g.node("Unsqueeze", []string{g.node("Cast", []string{"attention_mask"}, attrI("to", tFloat)), g.ints("mask_axes", 1, 2)})
	additive := g.node("Mul", []string{g.node("Sub", []string{g.scalar("one_f", 1), mask}), g.scalar("neg", -10000)})

	for range sp.Layers {
		// Multi-head self-attention.
		heads := func(x string, perm ...int64) string {
			r := g.node("Reshape", []string{x, g.ints("heads_shape", 0, 0, nHeads, headDim)})
			return g.node("Transpose", []string{r}, attrIs("perm", perm...))
		}
		q := heads(g.linear(h, hidden, hidden), 0, 2, 1, 3) // [B, H, S, d]
		k := heads(g.linear(h, hidden, hidden), 0, 2, 3, 1) // [B, H, d, S]
		v := heads(g.linear(h, hidden, hidden), 0, 2, 1, 3) // [B, H, S, d]
		scores := g.node("Mul", []string{g.node("MatMul", []string{q, k}), g.scalar("scale", float32(1/math.Sqrt(float64(headDim))))})
		probs := g.node("Softmax", []string{g.node("Add", []string{scores, additive})}, attrI("axis", -1))
		ctx := g.node("Transpose", []string{g.node("MatMul", []string{probs, v})}, attrIs("perm", 0, 2, 1, 3))
		ctx = g.node("Reshape", []string{ctx, g.ints("merge_shape", 0, 0, hidden)})
		h = g.layerNorm(g.node("Add", []string{g.linear(ctx, hidden, hidden), h}))

		// Feed-forward with exact GELU: x * 0.5 * (1 + erf(x / sqrt 2)).
		f := g.linear(h, hidden, ffn)
		erf := g.node("Erf", []string{g.node("Div", []string{f, g.scalar("sqrt2", math.Sqrt2)})})
		gelu := g.node("Mul", []string{g.node("Mul", []string{f, g.node("Add", []string{erf, g.scalar("one_f", 1)})}), g.scalar("half", 0.5)})
		h = g.layerNorm(g.node("Add", []string{g.linear(gelu, ffn, hidden), h}))
	}
	g.nodeOut("Identity", "last_hidden_state", []string{h}) // the name BERT exports use

	var gb []byte
	for _, n := range g.nodes {
		gb = protowire.AppendTag(gb, 1, protowire.BytesType)
		gb = protowire.AppendBytes(gb, n)
	}
	gb = protowire.AppendTag(gb, 2, protowire.BytesType)
	gb = protowire.AppendString(gb, "tiny_bert")
	for _, t := range g.inits {
		gb = protowire.AppendTag(gb, 5, protowire.BytesType)
		gb = protowire.AppendBytes(gb, t)
	}
	for _, in := range []string{"input_ids", "attention_mask", "token_type_ids"} {
		gb = protowire.AppendTag(gb, 11, protowire.BytesType)
		gb = protowire.AppendBytes(gb, valueInfo(in, tInt64, "batch_size", "sequence_length"))
	}
	gb = protowire.AppendTag(gb, 12, protowire.BytesType)
	gb = protowire.AppendBytes(gb, valueInfo("last_hidden_state", tFloat, "batch_size", "sequence_length", sp.Hidden))

	var opsetB []byte
	opsetB = protowire.AppendTag(opsetB, 1, protowire.BytesType)
	opsetB = protowire.AppendString(opsetB, "")
	opsetB = protowire.AppendTag(opsetB, 2, protowire.VarintType)
	opsetB = protowire.AppendVarint(opsetB, opset)

	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType)
	m = protowire.AppendVarint(m, irVersion)
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendString(m, "strata-genmodel")
	m = protowire.AppendTag(m, 7, protowire.BytesType)
	m = protowire.AppendBytes(m, gb)
	m = protowire.AppendTag(m, 8, protowire.BytesType)
	return protowire.AppendBytes(m, opsetB)
}
