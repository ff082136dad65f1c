package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNulField(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", nulField([]byte(`{"a":"b"}`)))
	require.Equal(t, "", nulField([]byte(`{"a":"\\u0000"}`)))
	require.Equal(t, "body.a", nulField([]byte(`{"a":"x\u0000"}`)))
	require.Equal(t, "body.s.t[2]", nulField([]byte(`{"q":1,"s":{"t":["a","b","\u0000"]}}`)))
	require.Equal(t, "body[1].op", nulField([]byte(`[{"op":"a"},{"op":"\u0000"}]`)))
	require.Equal(t, "body.k\x00", nulField([]byte(`{"k\u0000":1}`)))
}
