package strata

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "job-1", "org:acme.v2_x", strings.Repeat("x", 200)} {
		require.True(t, ValidID(ok), ok)
	}
	for _, bad := range []string{"", "a b", "é", "a/b", strings.Repeat("x", 201), "x\x00"} {
		require.False(t, ValidID(bad), bad)
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckJSON("body.x", json.RawMessage(`{"a":"\\u0000"}`)))
	require.Error(t, CheckJSON("body.x", json.RawMessage(`{"a":"\u0000"}`)))
	require.Error(t, CheckJSON("body.x", json.RawMessage(`{"a":"\\\u0000"}`)))
	require.NoError(t, CheckJSON("body.x", nil))
	require.Error(t, CheckText("body.t", "a\x00b"))
}
