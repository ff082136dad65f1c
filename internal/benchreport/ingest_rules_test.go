package benchreport

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The batch ingest row (issue 42, item 4) reads BenchmarkMemoryBatch's rounds (one result
// line each) and holds their speed to ≥ 0.8× the bare batched INSERT.
func TestBenchreportIngestRow(t *testing.T) {
	t.Parallel()
	row := func(s string) Row {
		out, err := Parse(strings.NewReader(s))
		require.NoError(t, err)
		for _, r := range Evaluate(Rules, []Input{{Label: "x", Out: out}}) {
			if strings.HasPrefix(r.Rule.Measure, "memory batch ingest") {
				return r
			}
		}
		t.Fatal("no batch ingest row")
		return Row{}
	}
	line := func(strata, floor string) string {
		return "BenchmarkMemoryBatch-2 \t 3 \t 1200000000 ns/op \t " + floor + " floor-rows/s \t 0 speed \t " + strata + " strata-rows/s\n"
	}
	r := row(line("850", "1000") + line("810", "1000") + line("820", "1000"))
	require.Equal(t, []float64{850, 810, 820}, r.Strata)
	require.InDelta(t, 0.82, Median(r.Speed), 1e-9)
	require.True(t, r.Rule.Target.OK(&r))
	r = row(line("700", "1000") + line("790", "1000") + line("750", "1000"))
	require.False(t, r.Rule.Target.OK(&r))
}
