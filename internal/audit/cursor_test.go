package audit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/strata"
)

// TestParseCursor: List's cursor is read by the tier, a bad one named bare ("cursor").
func TestParseCursor(t *testing.T) {
	t.Parallel()
	for c, want := range map[string]int64{"": 0, "0": 0, "17": 17} {
		got, err := audit.ParseCursor(c)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, c := range []string{"-1", "x", "1.5"} {
		_, err := audit.ParseCursor(c)
		var fe *strata.FieldError
		require.ErrorAs(t, err, &fe, c)
		require.Equal(t, "cursor", fe.Field)
	}
}
