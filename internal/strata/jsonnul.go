package strata

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// NULPath finds the first string or key of a JSON text that holds a NUL character, which
// Postgres cannot store, and returns its path below the document (".a.b[2]", "[1].op", ""
// for the document itself) with ok true; ok is false when there is none or the JSON is
// malformed (the decoder reports malformed JSON itself).
func NULPath(b []byte) (path string, ok bool) {
	if bytes.IndexByte(b, 0) < 0 && !bytes.Contains(b, []byte(`\u0000`)) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj    bool
		key    string
		idx    int
		expect bool // object: expecting a key next
	}
	var stack []frame
	at := func() (string, bool) {
		var sb strings.Builder
		for _, f := range stack {
			if f.obj {
				sb.WriteString("." + f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.idx) + "]")
			}
		}
		return sb.String(), true
	}
	afterValue := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].expect = true
			} else {
				stack[n-1].idx++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF included
			return "", false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, frame{obj: true, expect: true})
			case '[':
				stack = append(stack, frame{})
			case '}', ']':
				stack = stack[:len(stack)-1]
				afterValue()
			}
		case string:
			n := len(stack)
			if n > 0 && stack[n-1].obj && stack[n-1].expect {
				stack[n-1].key, stack[n-1].expect = v, false
				if strings.IndexByte(v, 0) >= 0 {
					return at()
				}
				continue
			}
			if strings.IndexByte(v, 0) >= 0 {
				return at()
			}
			afterValue()
		default:
			afterValue()
		}
	}
}
