package benchreport

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sample(t *testing.T) *Output {
	t.Helper()
	f, err := os.Open("testdata/sample.txt")
	require.NoError(t, err)
	defer f.Close()
	out, err := Parse(f)
	require.NoError(t, err)
	return out
}

func TestBenchreportParse(t *testing.T) {
	t.Parallel()
	out := sample(t)
	require.Len(t, out.Results, 6)
	require.Equal(t, "Some CPU @ 2.0GHz", out.Env["cpu"])
	require.Equal(t, "github.com/strata-mem/strata/internal/httpapi, github.com/strata-mem/strata/internal/episodic", out.Env["pkg"])
	runs := out.Runs("BenchmarkHTTPTargets/state-get/c=16")
	require.Len(t, runs, 2)
	require.Equal(t, int64(4000), runs[0].N)
	require.InDelta(t, 0.7333, runs[0].Metrics["speed"], 1e-9)
	require.InDelta(t, 6110, out.Runs("BenchmarkResume/http-resume")[0].Metrics["p99-µs"], 1e-9)
	require.Equal(t, []string{"loaded 10000 jobs × 50 steps in 9.1s"}, out.Logs["BenchmarkResume"])
}

func TestBenchreportEvaluateAndTargets(t *testing.T) {
	t.Parallel()
	rows := Evaluate(Rules, []Input{{Label: "sample.txt", Out: sample(t)}})
	byMeasure := map[string]*Row{}
	for i := range rows {
		byMeasure[rows[i].Rule.Measure] = &rows[i]
	}
	c1 := byMeasure["working-state GET via HTTP, 1 client"]
	require.True(t, c1.Present())
	require.InDelta(t, 0.5, Median(c1.Speed), 1e-9) // rate: strata ÷ floor
	require.False(t, c1.Rule.Target.OK(c1))
	c16 := byMeasure["working-state GET via HTTP, 16 clients"]
	require.InDelta(t, (11000.0/15000+12000.0/15000)/2, Median(c16.Speed), 1e-9)
	require.True(t, c16.Rule.Target.OK(c16))
	res := byMeasure["resume via HTTP, 10k jobs × 50 steps: p99"]
	require.InDelta(t, 683.0/6110, Median(res.Speed), 1e-9) // time: floor ÷ strata
	require.True(t, res.Rule.Target.OK(res))                // 6.1 ms < 10 ms
	ep := byMeasure["event append (store, one transaction each, no group commit), 32 writers (diagnostic)"]
	require.InDelta(t, 0.3, Median(ep.Speed), 1e-9)
	require.Nil(t, ep.Rule.Target, "a diagnostic row has no target")
	require.False(t, byMeasure["whole-org vector search, 100k × 384, ef_search 100"].Present())

	// An older input fills rows the fresh one did not run; the fresh one wins where both did.
	older := &Output{Results: []Result{
		{Name: "BenchmarkSemantic100k/ours/ef=100", Metrics: map[string]float64{"qps": 132, "recall@10": 0.991, "bare_qps_interleaved": 159}},
		{Name: "BenchmarkHTTPTargets/state-get/c=1", Metrics: map[string]float64{"strata-ops/s": 1, "floor-ops/s": 1}},
	}}
	rows = Evaluate(Rules, []Input{{Label: "fresh", Out: sample(t)}, {Label: "old", Out: older}})
	for i := range rows {
		switch rows[i].Rule.Measure {
		case "whole-org vector search, 100k × 384, ef_search 100":
			require.Equal(t, "old", rows[i].Source)
			require.InDelta(t, 132.0/159, Median(rows[i].Speed), 1e-9)
			require.True(t, rows[i].Rule.Target.OK(&rows[i]))
		case "working-state GET via HTTP, 1 client":
			require.Equal(t, "fresh", rows[i].Source)
		}
	}
}

func TestBenchreportRenderAndSplice(t *testing.T) {
	t.Parallel()
	rows := Evaluate(Rules, []Input{{Label: "sample.txt", Out: sample(t)}})
	var buf bytes.Buffer
	Render(&buf, rows, Machine{Date: "2026-12-01", Commit: "abc123", CPU: "Some CPU", Cores: 2, LoadStart: "1 1 1", LoadEnd: "2 2 2"},
		[]string{"go test -bench X ./internal/httpapi/"}, []string{"`sample.txt`"})
	s := buf.String()
	require.Contains(t, s, "| HTTP | working-state GET via HTTP, 16 clients | 11.5k/s [11.0k/s–12.0k/s] (GET /v1/sessions/{s}/state, agent key); p99 4.50 ms [4.00 ms–5.00 ms] |")
	require.Contains(t, s, "| 0.77 [0.73–0.80] | ≥ 0.6× floor | yes | sample.txt |")
	require.Contains(t, s, "| Jobs | resume via HTTP, 10k jobs × 50 steps: p99 | 6.11 ms (GET /v1/jobs/{job}/resume); p50 1.41 ms | 683 µs (pgx SELECT of the job row) | 0.11 | p99 < 10 ms | yes |")
	require.Contains(t, s, "| Semantic | whole-org vector search, 100k × 384, ef_search 100 | not run |")
	require.Contains(t, s, "go test -bench X ./internal/httpapi/")

	doc := "# Benchmarks\n\n## Key-value\n\nkept\n"
	spliced, err := Splice(doc, s)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(spliced, "# Benchmarks\n\n"+BeginMarker))
	require.Contains(t, spliced, "## Key-value\n\nkept\n")
	again, err := Splice(spliced, strings.Replace(s, "abc123", "def456", 1))
	require.NoError(t, err)
	require.Contains(t, again, "def456")
	require.NotContains(t, again, "abc123")
	require.Equal(t, 1, strings.Count(again, BeginMarker))
	require.Contains(t, again, "## Key-value\n\nkept\n")
	_, err = Splice("# x\n"+BeginMarker+"\n", s)
	require.Error(t, err)
}

// TestBenchreportPeerRows is issue 42's rule: a row against a peer product is met only when
// throughput, p50 and p99 all are, and the table shows the three ratios.
func TestBenchreportPeerRows(t *testing.T) {
	t.Parallel()
	const bench = "BenchmarkLangGraphSaver"
	lg := func(c string, metrics map[string]float64) Result {
		m := map[string]float64{}
		for k, v := range metrics {
			m[c+"-"+k] = v
		}
		return Result{Name: bench, Metrics: m}
	}
	rows := func(rs ...Result) map[string]*Row {
		out := map[string]*Row{}
		evaluated := Evaluate(Rules, []Input{{Label: "x", Out: &Output{Results: rs}}})
		for i := range evaluated {
			out[evaluated[i].Rule.Measure] = &evaluated[i]
		}
		return out
	}
	const c1, c8 = "checkpointer put+get pairs, 1 thread", "checkpointer put+get pairs, 8 threads"
	full := func(c string, st, pg, st50, pg50, st99, pg99 float64) Result {
		return lg(c, map[string]float64{"strata-pairs/s": st, "pg-pairs/s": pg, "strata-p50-ms": st50, "pg-p50-ms": pg50,
			"strata-p99-ms": st99, "pg-p99-ms": pg99})
	}

	for _, tc := range []struct {
		name   string
		row    string
		result Result
		met    bool
		missed []string
	}{
		{"all three met", c1, full("c1", 220, 200, 4, 5, 9, 10), true, nil},
		{"equal counts as met", c1, full("c1", 200, 200, 5, 5, 10, 10), true, nil},
		// The mem0 search row of 2026-12-04: ahead on throughput, behind on both latencies.
		{"throughput alone is not enough", c1, full("c1", 256, 254, 3.64, 3.41, 11.36, 10.37), false,
			[]string{"p50 1.07× the peer's > 1.0×", "p99 1.10× the peer's > 1.0×"}},
		{"slower throughput, faster latency", c1, full("c1", 174, 210, 4, 5, 9, 10), false, []string{"throughput 0.83× < 1.0×"}},
		{"p50 not reported (an older run)", c1, lg("c1", map[string]float64{"strata-pairs/s": 220, "pg-pairs/s": 200,
			"strata-p99-ms": 9, "pg-p99-ms": 10}), false, []string{"p50 not measured"}},
		// 8 threads: ≥ 0.9× throughput, latencies up to 1.2× the peer's.
		{"8 threads within the allowance", c8, full("c8", 460, 500, 11.5, 10, 23.9, 20), true, nil},
		{"8 threads, p99 over 1.2×", c8, full("c8", 460, 500, 11.5, 10, 25, 20), false, []string{"p99 1.25× the peer's > 1.2×"}},
		{"8 threads, throughput under 0.9×", c8, full("c8", 440, 500, 10, 10, 20, 20), false, []string{"throughput 0.88× < 0.9×"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rows(tc.result)[tc.row]
			require.True(t, r.Present())
			require.Equal(t, tc.met, r.Rule.Target.OK(r))
			require.Equal(t, tc.missed, r.Rule.Target.Missed(r))
		})
	}

	t.Run("render shows the three ratios and both sides' latencies", func(t *testing.T) {
		t.Parallel()
		all := Evaluate(Rules, []Input{{Label: "x", Out: &Output{Results: []Result{
			full("c1", 220, 200, 4, 5, 9, 10),
			{Name: "BenchmarkMem0Peer", Metrics: map[string]float64{"search-strata-ops/s": 256, "search-mem0-ops/s": 254,
				"search-strata-p99-ms": 11.36, "search-mem0-p99-ms": 10.37}},
		}}}})
		var buf bytes.Buffer
		Render(&buf, all, Machine{}, nil, nil)
		s := buf.String()
		require.Contains(t, s, "| LangGraph | checkpointer put+get pairs, 1 thread | 220/s (StrataSaver); p50 4.00 ms; p99 9.00 ms | "+
			"200/s (PostgresSaver, same Postgres server); p50 5.00 ms; p99 10.00 ms | 1.10; p50 1.25; p99 1.11 | "+
			"≥ 1.0× peer, p50 and p99 ≤ peer's | yes | x |")
		// mem0 search before issue 42 was "met" on throughput alone; without its p50 it is not.
		require.Contains(t, s, "| Semantic | memory search, one at a time, vs mem0 | 256/s (POST /v1/memories/search); p50 —; p99 11.36 ms | "+
			"254/s (mem0ai/oss Memory.search (pgvector)); p50 —; p99 10.37 ms | 1.01; p50 —; p99 0.91 | ≥ 1.0× peer, p50 and p99 ≤ peer's | **no** |")
		require.Contains(t, s, "| LangGraph | checkpointer put+get pairs, 8 threads | not run | | | ≥ 0.9× peer, p50 and p99 ≤ 1.2× peer's | | |")
	})
}
