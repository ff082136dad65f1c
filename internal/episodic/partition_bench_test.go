package episodic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/partition"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkEventScalePartitioned is BenchmarkEventScale10M on both layouts in one run
// (issue 27, item 3): episodic_events unpartitioned (STRATA_PARTITIONS=0) and hash-
// partitioned by org_id into 16, each loaded with the same STRATA_BENCH_EVENTS events
// (default 2,000,000: 10 orgs × N/10,000 jobs × 1,000 events, written in bursts of 10 per
// job) by COPY, then: appends through the store (one event per transaction, 8 writers on
// their own jobs, 10 s) and 1,000 each of the hot reads (100 events after a random seq,
// the last 20, applied? by fingerprint) on random jobs at c=1. Each layout runs in its own
// database, dropped before the next is loaded; the unpartitioned one is then moved to 16
// partitions by the online mover (server partition), timed. The last lines compare.
// Run: STRATA_BENCH_PARTITIONED=1 go test ./internal/episodic/ -run '^$' -bench EventScalePartitioned -benchtime 1x -timeout 60m -v
func BenchmarkEventScalePartitioned(b *testing.B) {
	if os.Getenv("STRATA_BENCH_PARTITIONED") != "1" {
		b.Skip("set STRATA_BENCH_PARTITIONED=1 to load both layouts")
	}
	total := 2_000_000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_EVENTS")); err == nil && v >= 10_000 {
		total = v
	}
	const orgs, perJob, burst = 10, 1000, 10
	jobsPerOrg := total / (orgs * perJob)
	total = orgs * jobsPerOrg * perJob
	type result struct {
		copyRate, appendRate float64
		move, swap           time.Duration
		m                    map[string][2]float64 // p50, p99 ms
	}
	results := map[int]*result{}
	for _, parts := range []int{0, 16} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			res := &result{m: map[string][2]float64{}}
			results[parts] = res
			dsn := testenv.DatabaseURLPartitions(b, parts)
			pool, err := pg.NewPool(context.Background(), dsn, pg.PoolOptions{MaxConns: 16})
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			ctx := context.Background()
			owner := testenv.OwnerConn(b, dsn)
			n, load := loadScaleEvents(b, owner, orgs, jobsPerOrg, perJob, burst)
			res.copyRate = float64(n) / load.Seconds()
			var size string
			_ = owner.QueryRow(ctx, `SELECT pg_size_pretty(coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('episodic_events')),
				pg_total_relation_size('episodic_events')))`).Scan(&size)
			b.Logf("partitions=%d: loaded %d events in %s (%.0f rows/s); table + indexes %s", parts, n, load.Round(time.Second), res.copyRate, size)

			st := episodic.NewStore(episodic.Options{})
			rng := rand.New(rand.NewPCG(1, 2))
			pick := func() (string, string) {
				return fmt.Sprintf("org-%d", rng.IntN(orgs)), fmt.Sprintf("job-%d", rng.IntN(jobsPerOrg))
			}
			b.ResetTimer()

			// Appends: 8 writers, each on jobs of its own (no counter contention), 10 s.
			var appended atomic.Int64
			var mu sync.Mutex
			var alat []time.Duration
			var wg sync.WaitGroup
			stop := time.Now().Add(10 * time.Second)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					org := fmt.Sprintf("org-%d", w%orgs)
					var mine []time.Duration
					for k := 0; time.Now().Before(stop); k++ {
						job := fmt.Sprintf("live-%d-%d", w, k%50)
						t := time.Now()
						err := pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
							_, err := st.Append(ctx, tx, org, job, []episodic.EventInput{{Op: "video.crop", Params: json.RawMessage(`{"x":1}`)}})
							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t))
						appended.Add(1)
					}
					mu.Lock()
					alat = append(alat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			res.appendRate = float64(appended.Load()) / 10
			res.m["append_c8"] = [2]float64{pct(alat, 0.5), pct(alat, 0.99)}

			measure := func(name string, f func() error) {
				lat := make([]time.Duration, 1000)
				for k := range lat {
					t := time.Now()
					if err := f(); err != nil {
						b.Fatalf("%s: %v", name, err)
					}
					lat[k] = time.Since(t)
				}
				res.m[name] = [2]float64{pct(lat, 0.5), pct(lat, 0.99)}
			}
			for _, r := range scaleReads(ctx, pool, st, rng, pick, perJob) {
				measure(r.name, r.run)
			}
			b.StopTimer()
			if parts == 0 {
				// Then move this database online to 16 partitions (server partition).
				t0 := time.Now()
				reps, err := partition.Move(ctx, dsn, partition.Options{Partitions: 16, Tables: []string{"episodic_events"}})
				if err != nil {
					b.Fatal(err)
				}
				res.move, res.swap = time.Since(t0), reps[0].SwapWait
				b.Logf("server partition moved %d events in %s (%.0f rows/s); the swap held the table %s",
					reps[0].Copied, res.move.Round(time.Second), float64(reps[0].Copied)/res.move.Seconds(), res.swap.Round(time.Millisecond))
			}
			b.ReportMetric(res.copyRate, "copy_rows/s")
			b.ReportMetric(res.appendRate, "append_c8_rows/s")
			for name, v := range res.m {
				b.ReportMetric(v[0], name+"_p50_ms")
				b.ReportMetric(v[1], name+"_p99_ms")
			}
		})
	}
	u, p := results[0], results[16]
	if u == nil || p == nil {
		return
	}
	b.Logf("%d events | unpartitioned | 16 partitions | partitioned/unpartitioned", total)
	b.Logf("COPY rows/s | %.0f | %.0f | %.2f", u.copyRate, p.copyRate, p.copyRate/u.copyRate)
	b.Logf("append rows/s (store, c=8) | %.0f | %.0f | %.2f", u.appendRate, p.appendRate, p.appendRate/u.appendRate)
	for _, name := range []string{"append_c8", "read100", "last20", "applied"} {
		a, c := u.m[name], p.m[name]
		b.Logf("%s p50 / p99 ms | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f", name, a[0], a[1], c[0], c[1], c[0]/a[0], c[1]/a[1])
	}
}
