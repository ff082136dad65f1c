package benchreport

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func byMeasure(rows []Row) map[string]*Row {
	out := map[string]*Row{}
	for i := range rows {
		out[rows[i].Rule.Measure] = &rows[i]
	}
	return out
}

// TestBenchreportPeerRounds is issue 42 item 6: a peer benchmark reports each interleaved
// round as a sub-benchmark <name>/round=n; every round is a run of the row, whose ratios
// (throughput, p50, p99) are shown as median [range], and the row is met only if the
// range's worse end meets the target.
func TestBenchreportPeerRounds(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/rounds.txt")
	require.NoError(t, err)
	defer f.Close()
	out, err := Parse(f)
	require.NoError(t, err)
	require.Len(t, out.Results, 6)
	runs := out.Runs("BenchmarkLangGraphSaver")
	require.Len(t, runs, 3, "the rounds are runs of the benchmark")
	for i, r := range runs {
		require.Equal(t, i+1, r.Round)
	}
	require.Len(t, out.Runs("BenchmarkMem0Peer"), 3)
	require.Equal(t, []string{"c=1 round 1 StrataSaver: 210 pairs/s, p50 4.00 ms, p99 9.00 ms",
		"c=1 round 1 PostgresSaver: 200 pairs/s, p50 4.20 ms, p99 9.50 ms"}, out.Logs["BenchmarkLangGraphSaver"])

	rows := byMeasure(Evaluate(Rules, []Input{{Label: "rounds.txt", Out: out}}))
	c1 := rows["checkpointer put+get pairs, 1 thread"]
	require.Len(t, c1.Speed, 3)
	require.InDelta(t, 204.0/200, Median(c1.Speed), 1e-9)
	// The median meets ≥ 1.0×; round 3 (0.97×) does not: not met.
	require.True(t, c1.Rule.Target.Meets(c1, Mid))
	require.False(t, c1.Rule.Target.OK(c1))
	require.Equal(t, []string{"throughput 0.97× at worst (median 1.02×) < 1.0×"}, c1.Rule.Target.Missed(c1))
	require.Equal(t, "**no** (median only)", Met(c1))

	c8 := rows["checkpointer put+get pairs, 8 threads"]
	require.True(t, c8.Rule.Target.OK(c8), "every round within ≥ 0.9× and ≤ 1.2× latency: met")
	require.Empty(t, c8.Rule.Target.Missed(c8))
	require.Equal(t, "yes", Met(c8))

	// mem0 add: throughput and p50 ahead in every round; p99 ahead at the median, 1.10× the
	// peer's in round 2.
	add := rows["memory add, one at a time, vs mem0"]
	require.True(t, add.Rule.Target.Meets(add, Mid))
	require.False(t, add.Rule.Target.OK(add))
	missed := add.Rule.Target.Missed(add)
	require.Len(t, missed, 1)
	require.Contains(t, missed[0], "p99 1.10× the peer's at worst (median 0.9")
	search := rows["memory search, one at a time, vs mem0"]
	require.True(t, search.Rule.Target.OK(search))

	var buf bytes.Buffer
	Render(&buf, Evaluate(Rules, []Input{{Label: "rounds.txt", Out: out}}), Machine{}, nil, nil)
	s := buf.String()
	require.Contains(t, s, "| LangGraph | checkpointer put+get pairs, 1 thread | 204/s [194/s–210/s] (StrataSaver); p50 4.10 ms [4.00 ms–4.15 ms]; "+
		"p99 9.20 ms [9.00 ms–9.30 ms] | 200/s (PostgresSaver, same Postgres server); p50 4.20 ms; p99 9.50 ms | "+
		"1.02 [0.97–1.05]; p50 1.02 [1.01–1.05]; p99 1.03 [1.02–1.06] | ≥ 1.0× peer, p50 and p99 ≤ peer's | **no** (median only) | rounds.txt |")
	require.Contains(t, s, "| ≥ 0.9× peer, p50 and p99 ≤ 1.2× peer's | yes | rounds.txt |")
	require.Contains(t, s, "p99 1.03 [0.91–1.07] | ≥ 1.0× peer, p50 and p99 ≤ peer's | **no** (median only) |")
}

// TestBenchreportWorseEnd is the same rule on the other targeted rows with several runs
// (-count runs): the median meeting the target is not enough.
func TestBenchreportWorseEnd(t *testing.T) {
	t.Parallel()
	res := func(name string, m map[string]float64) Result { return Result{Name: name, Metrics: m} }
	eval := func(rs ...Result) map[string]*Row {
		return byMeasure(Evaluate(Rules, []Input{{Label: "x", Out: &Output{Results: rs}}}))
	}
	const ep = "BenchmarkHTTPTargets/event-append/c=32"
	appendRow := func(speeds ...float64) *Row {
		var rs []Result
		for _, s := range speeds {
			rs = append(rs, res(ep, map[string]float64{"strata-ops/s": s * 10000, "floor-ops/s": 10000}))
		}
		return eval(rs...)["event append via HTTP, 32 clients"]
	}
	for _, tc := range []struct {
		name   string
		row    *Row
		met    string
		median bool
	}{
		{"speed: every run ≥ 0.5×", appendRow(0.52, 0.51, 0.50), "yes", true},
		{"speed: median 0.51×, worst 0.49×", appendRow(0.52, 0.51, 0.49), "**no** (median only)", true},
		{"speed: median under", appendRow(0.52, 0.48, 0.49), "**no**", false},
		{"speed: one run", appendRow(0.5), "yes", true},
		{"latency: p99 median 9 ms, worst 11 ms", eval(
			res(rsT+"http-resume", map[string]float64{"p99-µs": 8000}),
			res(rsT+"http-resume", map[string]float64{"p99-µs": 9000}),
			res(rsT+"http-resume", map[string]float64{"p99-µs": 11000}),
		)["resume via HTTP, 10k jobs × 50 steps: p99"], "**no** (median only)", true},
		{"recall: median 0.96, worst 0.94", eval(
			res(smT+"scoped/zipf/ours_auto", map[string]float64{"qps": 100, "recall@10": 0.96}),
			res(smT+"scoped/zipf/ours_auto", map[string]float64{"qps": 100, "recall@10": 0.97}),
			res(smT+"scoped/zipf/ours_auto", map[string]float64{"qps": 100, "recall@10": 0.94}),
		)["scoped search, 1,000 users (zipf), auto strategy"], "**no** (median only)", true},
		{"batch ingest rounds: median 0.82×, worst 0.78×", eval(
			Result{Name: ingT, Round: 1, Metrics: map[string]float64{"strata-rows/s": 820, "floor-rows/s": 1000}},
			Result{Name: ingT, Round: 2, Metrics: map[string]float64{"strata-rows/s": 780, "floor-rows/s": 1000}},
			Result{Name: ingT, Round: 3, Metrics: map[string]float64{"strata-rows/s": 850, "floor-rows/s": 1000}},
		)["memory batch ingest vs a bare batched INSERT of the same rows, same HNSW-indexed partition"], "**no** (median only)", true},
		{"delivery: p99 median 900 ms, worst 1.2 s", eval(
			res(evT, map[string]float64{"deliver-p99-ms": 900, "offered-events/s": 500}),
			res(evT, map[string]float64{"deliver-p99-ms": 800, "offered-events/s": 500}),
			res(evT, map[string]float64{"deliver-p99-ms": 1200, "offered-events/s": 500}),
		)["event to delivery, open loop, 500 writes/s offered for 60 s, one event each: p99"], "**no** (median only)", true},
		{"delivery: one run offered under 500/s", eval(
			res(evT, map[string]float64{"deliver-p99-ms": 300, "offered-events/s": 500}),
			res(evT, map[string]float64{"deliver-p99-ms": 300, "offered-events/s": 500}),
			res(evT, map[string]float64{"deliver-p99-ms": 300, "offered-events/s": 200}),
		)["event to delivery, open loop, 500 writes/s offered for 60 s, one event each: p99"], "**no** (median only)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.True(t, tc.row.Present())
			require.Equal(t, tc.met, Met(tc.row))
			require.Equal(t, tc.met == "yes", tc.row.Rule.Target.OK(tc.row))
			require.Equal(t, tc.median, tc.row.Rule.Target.Meets(tc.row, Mid))
		})
	}
}

// The 100k import (heavy mode) is a row of its own: rows/s and the time it took.
func TestBenchreportImportRow(t *testing.T) {
	t.Parallel()
	out, err := Parse(strings.NewReader("BenchmarkImport100k-2   \t       1\t397000000000 ns/op\t       397.0 import-s\t       252.0 import-rows/s\t         4.610 single-p50-ms\n"))
	require.NoError(t, err)
	var buf bytes.Buffer
	Render(&buf, Evaluate(Rules, []Input{{Label: "import100k.txt", Out: out}}), Machine{}, nil, nil)
	require.Contains(t, buf.String(), "| Semantic | `strata memories import` of 100k memories (1,000 users), end to end | "+
		"252/s (batches of 1,000 under their Idempotency-Keys into an empty org); took 397 s | — | — | — |  | import100k.txt |")
}
