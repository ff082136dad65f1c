package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// nulField returns the location (body.a.b[2]) of the first string or key that holds a NUL
// character, which Postgres cannot store; "" when there is none or the JSON is malformed
// (huma reports malformed JSON itself).
func nulField(b []byte) string {
	if bytes.IndexByte(b, 0) < 0 && !bytes.Contains(b, []byte(`\u0000`)) {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj    bool
		key    string
		idx    int
		expect bool // object: expecting a key next
	}
	var stack []frame
	path := func() string {
		var sb strings.Builder
		sb.WriteString("body")
		for _, f := range stack {
			if f.obj {
				sb.WriteString("." + f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.idx) + "]")
			}
		}
		return sb.String()
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
		if err == io.EOF || err != nil {
			return ""
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
					return path()
				}
				continue
			}
			if strings.IndexByte(v, 0) >= 0 {
				return path()
			}
			afterValue()
		default:
			afterValue()
		}
	}
}

func depthMessage(max int) string {
	return fmt.Sprintf("JSON is nested deeper than %d levels", max)
}
