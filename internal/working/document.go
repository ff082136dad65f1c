package working

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/strata-mem/strata/internal/strata"
)

// parseObject decodes raw as a JSON object, keeping numbers exact (json.Number).
func parseObject(field string, raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, strata.Invalid(field, "must be a JSON object")
	}
	if dec.More() {
		return nil, strata.Invalid(field, "must be a single JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, strata.Invalid(field, "must be a JSON object, not %s", jsonKind(v))
	}
	return m, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return "another type"
}

// checkDoc validates a document (or merge patch) from a request and returns it compacted:
// a JSON object, no NUL characters (Postgres cannot store them), nested at most maxDepth.
func (s *Store) checkDoc(field string, raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, strata.Invalid(field, "is required and must be a JSON object")
	}
	if err := strata.CheckJSON(field, raw); err != nil {
		return nil, err
	}
	if _, err := parseObject(field, raw); err != nil {
		return nil, err
	}
	if d := strata.JSONDepth(raw); d > s.opt.MaxDepth {
		return nil, strata.Invalid(field, "is nested %d levels deep; the limit is %d", d, s.opt.MaxDepth)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, strata.Invalid(field, "must be valid JSON")
	}
	return buf.Bytes(), nil
}

// checkSize refuses a document larger than the configured cap with 413, naming the field.
func (s *Store) checkSize(field string, doc []byte) error {
	if len(doc) > s.opt.MaxStateBytes {
		return strata.TooLarge(field, "the state document would be %d bytes; the limit is %d (STRATA_MAX_STATE_BYTES)", len(doc), s.opt.MaxStateBytes)
	}
	return nil
}

// MergePatch applies an RFC 7386 JSON merge patch to target and returns the result: members
// of an object patch replace the target's (recursively for objects), null removes a member,
// and any non-object patch replaces the target entirely.
func MergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok || tm == nil {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = MergePatch(tm[k], v)
	}
	return tm
}

// applyPatch merges patch (a validated object) into doc (nil: {}) and returns the encoded
// result.
func applyPatch(doc, patch []byte) ([]byte, error) {
	var target map[string]any
	if doc != nil {
		var err error
		if target, err = parseObject("state", doc); err != nil {
			return nil, fmt.Errorf("stored state is not an object: %w", err)
		}
	}
	p, err := parseObject("state", patch)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(MergePatch(target, p)); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
