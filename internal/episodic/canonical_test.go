package episodic

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEventCanonicalize(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{` { "b" : 1 , "a" : [ true , false , null ] } `, `{"a":[true,false,null],"b":1}`},
		{`1`, `1`}, {`1.0`, `1`}, {`1e0`, `1`}, {`10e-1`, `1`}, {`0.1e1`, `1`}, {`1.000E+0`, `1`},
		{`-0`, `0`}, {`-0.0e5`, `0`}, {`100`, `100`}, {`1e2`, `100`}, {`-1.5`, `-1.5`},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e+29`},
		{`1e21`, `1e+21`}, {`1e20`, `100000000000000000000`}, {`0.000001`, `0.000001`}, {`1e-7`, `1e-7`},
		{`12.50`, `12.5`}, {`9007199254740993`, `9007199254740993`},
		{`"\u00e9"`, `"é"`}, {`"é"`, `"é"`}, {`"e\u0301"`, `"é"`}, {`"\/"`, `"/"`},
		{`"\ud83d\ude00"`, `"😀"`}, {`"a\u001fb\n"`, `"a\u001fb\n"`}, {`"\""`, `"\""`},
		// keys sort by UTF-16 code units: U+FF61 (one unit 0xFF61) after U+1F600 (0xD83D...).
		{`{"\uff61":1,"😀":2,"a":3}`, `{"a":3,"😀":2,"｡":1}`},
		{`{"é":1,"z":2}`, `{"z":2,"é":1}`},
		{`[]`, `[]`}, {`{}`, `{}`}, {`[[],{}]`, `[[],{}]`},
	}
	for _, c := range cases {
		got, err := Canonicalize([]byte(c.in), 0)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
	bad := []struct{ in, msg string }{
		{`{"a":1,"a":2}`, "duplicate"},
		{`{"é":1,"e\u0301":2}`, "duplicate"},
		{`"\u0000"`, "NUL"},
		{"\"a\x00\"", "NUL"},
		{`"\ud800"`, "surrogate"},
		{`"\udc00x"`, "surrogate"},
		{"\"\xff\"", "UTF-8"},
		{`1e1001`, "out of range"}, {`1e-1002`, "out of range"}, {`1e99999999999`, "out of range"},
		{`01`, "leading zero"}, {`1.`, "invalid number"}, {`{"a":1,}`, "string key"}, {`[1,]`, "JSON value"},
		{`{"a":1} x`, "after"}, {``, "end of JSON"}, {`tru`, "literal"},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), "nested"},
	}
	for _, c := range bad {
		_, err := Canonicalize([]byte(c.in), 0)
		require.Error(t, err, c.in)
		require.Contains(t, err.Error(), c.msg, c.in)
	}
}

func TestEventFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(op, params string) string {
		f, err := Fingerprint(op, []byte(params))
		require.NoError(t, err)
		return f
	}
	base := fp("video.crop", `{"x":1,"y":2.5,"label":"café"}`)
	require.Len(t, base, 64)
	// Key order, whitespace, number spelling and unicode escapes do not matter.
	require.Equal(t, base, fp("video.crop", `{ "label" : "caf\u00e9", "y": 25e-1, "x": 1.0 }`))
	require.Equal(t, base, fp("video.crop", `{"y":2.50,"x":1e0,"label":"cafe\u0301"}`))
	// The op and every value do.
	require.NotEqual(t, base, fp("video.cropx", `{"x":1,"y":2.5,"label":"café"}`))
	require.NotEqual(t, base, fp("video.crop", `{"x":2,"y":2.5,"label":"café"}`))
	require.NotEqual(t, base, fp("video.crop", `{"x":"1","y":2.5,"label":"café"}`))
	// Absent and null params are {}.
	require.Equal(t, fp("noop", `{}`), fp("noop", ``))
	require.Equal(t, fp("noop", `{}`), fp("noop", `null`))
}
