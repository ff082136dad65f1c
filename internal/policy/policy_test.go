package policy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/policy"
)

// TestDefaultsCompileAndKindsInherit: the defaults compile as they are, and a kind's
// override changes only the fields it sets.
func TestDefaultsCompileAndKindsInherit(t *testing.T) {
	t.Parallel()
	def := policy.DefaultPolicy(30 * 24 * time.Hour)
	e, err := policy.Compile(policy.LifecyclePolicy{}, def)
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, e.Default.VerifyAge)
	require.Equal(t, 365*24*time.Hour, e.Default.MaxInactivity)
	require.Equal(t, 10000, e.Default.MaxItemsPerScope)

	age := "10d"
	e, err = policy.Compile(policy.LifecyclePolicy{Memories: policy.MemoryLifecyclePolicy{
		Kinds: map[string]policy.MemoryRules{"job": {MaxAge: &age}}}}, def)
	require.NoError(t, err)
	require.Equal(t, 10*24*time.Hour, e.ForKind("job").MaxAge)
	require.Equal(t, e.Default.MaxInactivity, e.ForKind("job").MaxInactivity)
	require.Equal(t, time.Duration(0), e.ForKind("fact").MaxAge)
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"0": 0, "": 0, "90d": 90 * 24 * time.Hour, "720h": 720 * time.Hour} {
		d, err := policy.ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
	for _, bad := range []string{"-1d", "x", "-5h"} {
		_, err := policy.ParseDuration(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "90d", policy.DurString(90*24*time.Hour))
	require.Equal(t, "0", policy.DurString(0))
	require.Equal(t, "1h30m0s", policy.DurString(90*time.Minute))
}
