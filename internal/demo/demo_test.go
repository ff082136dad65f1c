package demo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two runs started in the same second get different jobs (a job id from the clock alone
// made the second of two quick runs find the first's completed job).
func TestNewJobIDIsUniquePerRun(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 3, 5, 0, 0, time.UTC)
	a, b := NewJobID(now), NewJobID(now)
	require.NotEqual(t, a, b)
	require.Regexp(t, `^media-demo-20261206-030500-[0-9a-f]{8}$`, a)
}
