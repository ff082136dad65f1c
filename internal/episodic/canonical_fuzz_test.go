package episodic

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzCanonicalize checks canonical JSON on arbitrary bytes: no panic; what it accepts is
// valid JSON and its output is canonical (idempotent) and valid; re-encoding the same value
// differently (Go's key order and escaping, exact numbers) canonicalises to the same bytes;
// and the op fingerprint depends only on the canonical form.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1.0,1e0,10e-1,-0],"c":{"z":null,"y":true}}`,
		`{"\u00e9":"e\u0301","é":1}`,
		`[1e21, 0.000001, 1e-7, 123456789012345678901234567890]`,
		`{"a":"\ud83d\ude00","b":"<>&\u2028"}`,
		`"\ud800"`, `{"a":1,"a":2}`, `[[[[[[[[[[]]]]]]]]]]`, `1e1001`, ` {"x" : [ ] } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Canonicalize(data, 0)
		if err != nil {
			if _, ok := err.(*JSONError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q is not JSON", c)
		}
		c2, err := Canonicalize(c, 0)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q → %q (%v)", c, c2, err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		re, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		c3, err := Canonicalize(re, 0)
		if err != nil || !bytes.Equal(c, c3) {
			t.Fatalf("same value, other encoding: %q → %q, %q → %q (%v)", data, c, re, c3, err)
		}
		f1, err1 := Fingerprint("op", data)
		f2, err2 := Fingerprint("op", c)
		if err1 != nil || err2 != nil || f1 != f2 {
			t.Fatalf("fingerprint differs between a text and its canonical form: %s %s (%v %v)", f1, f2, err1, err2)
		}
	})
}
