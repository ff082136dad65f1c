package strata

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Moved from internal/httpapi (nulField): the unit of work answers 422 at "body" + the path.
func TestNULPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json, path string
		ok         bool
	}{
		{`{"a":"b"}`, "", false},
		{`{"a":"\\u0000"}`, "", false}, // an escaped backslash, not a NUL
		{`{"a":"x\u0000"}`, ".a", true},
		{`{"q":1,"s":{"t":["a","b","\u0000"]}}`, ".s.t[2]", true},
		{`[{"op":"a"},{"op":"\u0000"}]`, "[1].op", true},
		{`{"k\u0000":1}`, ".k\x00", true},
		{`"\u0000"`, "", true},
		{`{"a":"\u0000"`, ".a", true}, // found before the text turned out malformed
		{`{"a":`, "", false},
	} {
		path, ok := NULPath([]byte(c.json))
		require.Equal(t, c.ok, ok, c.json)
		require.Equal(t, c.path, path, c.json)
	}
}
