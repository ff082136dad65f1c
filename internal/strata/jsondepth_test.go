package strata

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONDepth(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, JSONDepth([]byte(`"x"`)))
	require.Equal(t, 2, JSONDepth([]byte(`{"a":[1,"]]]{{{"]}`)))
	require.Equal(t, 100, JSONDepth([]byte(strings.Repeat("[", 100)+strings.Repeat("]", 100))))
	require.Equal(t, 1, JSONDepth([]byte(`{"a\"{[":"\\","b":"\\\"["}`)))
	require.Equal(t, 3, JSONDepth([]byte(`[[[`))) // malformed: what it saw
}
