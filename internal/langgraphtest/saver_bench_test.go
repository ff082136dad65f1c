package langgraphtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkLangGraphSaver is issue 26 item 1: LangGraph's own PostgresSaver
// (@langchain/langgraph-checkpoint-postgres, in an empty database of the same Postgres server)
// against StrataSaver on a real server, put+get pairs per second and their p50 and p99, at
// concurrency 1 and 8 (clients/langgraph-js/scripts/bench.ts, alternating the savers round
// by round). speed is StrataSaver's pairs/s ÷ PostgresSaver's (≥ 1: Strata ahead); pairs/s is
// the mean over the rounds, p50 and p99 are each saver's worst round (cmd/benchreport judges
// the row on all three).
//
//	go test -run '^$' -bench BenchmarkLangGraphSaver -benchtime 1x ./internal/langgraphtest/
//
// BENCH_SECONDS (per saver per round, default 8) and BENCH_ROUNDS (default 2) are passed
// through.
func BenchmarkLangGraphSaver(b *testing.B) {
	dir := testenv.NodeProject(b, "clients/langgraph-js")
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("saver-bench", "agent")
	secs, rounds := envOr("BENCH_SECONDS", "8"), envOr("BENCH_ROUNDS", "2")
	b.ResetTimer()
	for range b.N {
		for _, c := range []int{1, 8} {
			cmd := exec.Command("node", "--import", "tsx", "scripts/bench.ts", "--concurrency", fmt.Sprint(c),
				"--seconds", secs, "--warmup", "2", "--rounds", rounds, "--saver", "both")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "STRATA_URL="+s.URL, "STRATA_API_KEY="+key,
				"DATABASE_URL="+testenv.EmptyDatabaseURL(b))
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			require.NoError(b, err, "%s", out)
			type result struct {
				Saver     string  `json:"saver"`
				PairsPerS float64 `json:"pairs_per_s"`
				P50       float64 `json:"p50_ms"`
				P99       float64 `json:"p99_ms"`
			}
			sum := map[string]*result{}
			n := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var r result
				if json.Unmarshal([]byte(line), &r) != nil || r.Saver == "" {
					continue
				}
				b.Logf("c=%d %s: %.0f pairs/s, p50 %.2f ms, p99 %.2f ms", c, r.Saver, r.PairsPerS, r.P50, r.P99)
				if sum[r.Saver] == nil {
					sum[r.Saver] = &result{}
				}
				sum[r.Saver].PairsPerS += r.PairsPerS
				sum[r.Saver].P50 = max(sum[r.Saver].P50, r.P50)
				sum[r.Saver].P99 = max(sum[r.Saver].P99, r.P99)
				n[r.Saver]++
			}
			pg, st := sum["PostgresSaver"], sum["StrataSaver"]
			require.True(b, pg != nil && st != nil, "bench.ts printed no results:\n%s", out)
			tag := fmt.Sprintf("c%d-", c)
			b.ReportMetric(st.PairsPerS/pg.PairsPerS, tag+"speed")
			b.ReportMetric(st.PairsPerS/float64(n["StrataSaver"]), tag+"strata-pairs/s")
			b.ReportMetric(pg.PairsPerS/float64(n["PostgresSaver"]), tag+"pg-pairs/s")
			b.ReportMetric(st.P50, tag+"strata-p50-ms")
			b.ReportMetric(pg.P50, tag+"pg-p50-ms")
			b.ReportMetric(st.P99, tag+"strata-p99-ms")
			b.ReportMetric(pg.P99, tag+"pg-p99-ms")
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
