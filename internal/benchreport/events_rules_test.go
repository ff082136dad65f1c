package benchreport

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The events rows (issue 41, item 5) read their benchmarks' output lines and hold them to
// their targets: p99 < 1 s only at 500/s offered; with ÷ without within 5 % on CPU and p99.
func TestBenchreportEventRows(t *testing.T) {
	t.Parallel()
	parse := func(s string) []Row {
		out, err := Parse(strings.NewReader(s))
		require.NoError(t, err)
		var rows []Row
		for _, r := range Evaluate(Rules, []Input{{Label: "x", Out: out}}) {
			if r.Rule.Area == "Events" {
				rows = append(rows, r)
			}
		}
		require.Len(t, rows, 2)
		return rows
	}
	line := func(offered, p99, cpuWith, p99Ratio, pgRatio string) string {
		return "BenchmarkEventDelivery-2 \t 1 \t 61000000000 ns/op \t 480.0 achieved-events/s \t 100.0 delivered-% \t 120.0 deliver-p50-ms \t " +
			p99 + " deliver-p99-ms \t " + offered + " offered-events/s\n" +
			"BenchmarkEmissionCost-2 \t 1 \t 1 ns/op \t " + cpuWith + " with-cpu-µs/req \t 1000 without-cpu-µs/req \t 30.0 with-p99-ms \t 29.0 without-p99-ms \t " +
			p99Ratio + " p99-with/without \t 150.0 offered-req/s \t 120.0 write-extra-with-µs \t 100.0 write-extra-without-µs \t " + pgRatio + " cpu+pg-with/without\n"
	}
	rows := parse(line("500", "300", "1040", "1.03", "1.04"))
	require.True(t, rows[0].Rule.Target.OK(&rows[0]))
	require.True(t, rows[1].Rule.Target.OK(&rows[1]))
	rows = parse(line("500", "300", "1040", "1.03", "1.07")) // Postgres's share of the cost counts too
	require.False(t, rows[1].Rule.Target.OK(&rows[1]))
	rows = parse(line("200", "300", "1060", "1.03", "1.0")) // the offered rate not the target's; CPU 6 % more
	require.False(t, rows[0].Rule.Target.OK(&rows[0]))
	require.False(t, rows[1].Rule.Target.OK(&rows[1]))
	rows = parse(line("500", "1200", "1000", "1.08", "1.0"))
	require.False(t, rows[0].Rule.Target.OK(&rows[0]))
	require.False(t, rows[1].Rule.Target.OK(&rows[1]))
}
