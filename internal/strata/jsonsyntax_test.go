package strata

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMalformedJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{"a": 1,}`, "malformed JSON at line 1, column 9 (byte 9): invalid character '}'"},
		{"{\n  \"a\": 1,\n  }", "malformed JSON at line 3, column 3 (byte 15): invalid character '}'"},
		{`{"a": `, "malformed JSON at line 1, column 6 (byte 6): unexpected end of JSON input"},
	} {
		var v any
		err := json.Unmarshal([]byte(c.in), &v)
		require.Error(t, err)
		require.Contains(t, MalformedJSON([]byte(c.in), err), c.want, c.in)
	}
	require.Equal(t, "malformed JSON: boom", MalformedJSON(nil, errors.New("boom")))
}
