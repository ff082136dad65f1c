package episodic_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// floorDDL is a table of the same shape as episodic_events (columns and indexes) without
// the counter row, the trigger or row-level security: the bare-INSERT floor.
const floorDDL = `CREATE TABLE episodic_floor (LIKE episodic_events INCLUDING DEFAULTS);
ALTER TABLE episodic_floor ADD PRIMARY KEY (org_id, job_id, seq);
CREATE INDEX ON episodic_floor (org_id, job_id, fingerprint);
CREATE UNIQUE INDEX ON episodic_floor (org_id, job_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX ON episodic_floor (org_id, job_id, reverts_seq) WHERE reverts_seq IS NOT NULL;
CREATE INDEX ON episodic_floor (org_id, user_id) WHERE user_id IS NOT NULL;`

var benchRun atomic.Int64

// runConcurrent runs n calls of f over c goroutines and returns ops/s and the latencies.
func runConcurrent(c, n int, f func(g, i int) error) (float64, []time.Duration, error) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := f(g, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, nil, err
	}
	return float64(n) / el.Seconds(), lat, nil
}

func pct(lat []time.Duration, p float64) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[int(float64(len(s)-1)*p)].Microseconds()) / 1000
}

// BenchmarkEventAppend compares appending one event per transaction through the store
// (counter row + fingerprint + RLS, in pg.InOrgTx) with a bare single-row INSERT into a
// table of the same shape, at concurrency 1, 8 and 32, in the same run. Each writer appends
// to its own job (one agent per job); samejob8 has 8 writers on one job, which serialise.
// floortx_ops/s is the bare INSERT inside BEGIN/COMMIT (the request path always has a
// transaction: BEGIN, set_config(app.org_id), the append, COMMIT).
// Run: go test ./internal/episodic/ -run '^$' -bench EventAppend -benchtime 3000x
func BenchmarkEventAppend(b *testing.B) {
	// Both sides get 40 connections, so c=32 is not capped by a pool.
	dsn := testenv.DatabaseURL(b)
	ctx := context.Background()
	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 40})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ocfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	ocfg.MaxConns = 40
	owner, err := pgxpool.NewWithConfig(ctx, ocfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(owner.Close)
	if _, err := owner.Exec(ctx, floorDDL); err != nil {
		b.Fatal(err)
	}
	st := episodic.NewStore(episodic.Options{})
	params := json.RawMessage(`{"x":10,"y":20,"w":1280,"h":720,"label":"crop"}`)
	fp := sha256.Sum256(params)
	for _, c := range []int{1, 8, 32, -8} {
		name := fmt.Sprintf("c=%d", c)
		if c < 0 {
			name, c = "samejob8", -c
		}
		b.Run(name, func(b *testing.B) {
			run := strings.NewReplacer("=", "-", "/", ".").Replace(b.Name()) + fmt.Sprintf(".%d", benchRun.Add(1))
			var seqs [64]atomic.Int64
			floorRate, floorLat, err := runConcurrent(c, b.N, func(g, i int) error {
				seq := seqs[g].Add(1)
				job := fmt.Sprintf("%s-%d", run, g)
				if name == "samejob8" {
					job, seq = run, int64(i+1)
				}
				_, err := owner.Exec(ctx, `INSERT INTO episodic_floor (org_id, job_id, seq, op, params, fingerprint, agent_id)
					VALUES ($1, $2, $3, $4, $5, $6, $7)`, "acme", job, seq, "video.crop", params, fp[:], "agent")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			// The same INSERT inside BEGIN ... COMMIT: what the transaction alone costs.
			txRate, _, err := runConcurrent(c, b.N, func(g, i int) error {
				seq := seqs[g].Add(1)
				job := fmt.Sprintf("%s-tx-%d", run, g)
				if name == "samejob8" {
					job, seq = run+"-tx", int64(i+1)
				}
				return pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO episodic_floor (org_id, job_id, seq, op, params, fingerprint, agent_id)
						VALUES ($1, $2, $3, $4, $5, $6, $7)`, "acme", job, seq, "video.crop", params, fp[:], "agent")
					return err
				})
			})
			if err != nil {
				b.Fatal(err)
			}
			storeRate, storeLat, err := runConcurrent(c, b.N, func(g, i int) error {
				job := fmt.Sprintf("%s-%d", run, g)
				if name == "samejob8" {
					job = run
				}
				return pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
					_, err := st.Append(ctx, tx, "acme", job, []episodic.EventInput{{Op: "video.crop", Params: params, AgentID: "agent"}})
					return err
				})
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(storeRate, "store_ops/s")
			b.ReportMetric(floorRate, "floor_ops/s")
			b.ReportMetric(storeRate/floorRate, "ratio")
			b.ReportMetric(txRate, "floortx_ops/s")
			b.ReportMetric(storeRate/txRate, "ratio_tx")
			b.ReportMetric(pct(storeLat, 0.5), "store_p50_ms")
			b.ReportMetric(pct(storeLat, 0.99), "store_p99_ms")
			b.ReportMetric(pct(floorLat, 0.5), "floor_p50_ms")
			b.ReportMetric(pct(floorLat, 0.99), "floor_p99_ms")
		})
	}
}

// BenchmarkEventScale10M loads 10 million events with COPY (10 orgs × 1,000 jobs × 1,000
// events, written in bursts of 10 per job so a job's events are spread over the heap the
// way interleaved agents spread them), then measures append latency and range reads on
// the full table. It takes minutes and ~4 GB of disk: set STRATA_BENCH_10M=1.
// Run: STRATA_BENCH_10M=1 go test ./internal/episodic/ -run '^$' -bench EventScale10M -benchtime 1x -timeout 60m
func BenchmarkEventScale10M(b *testing.B) {
	if os.Getenv("STRATA_BENCH_10M") != "1" {
		b.Skip("set STRATA_BENCH_10M=1 to load 10M events")
	}
	const orgs, jobsPerOrg, perJob, burst = 10, 1000, 1000, 10
	pool, dsn := testenv.Pool(b)
	ctx := context.Background()
	owner := testenv.OwnerConn(b, dsn)
	if _, err := owner.Exec(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		b.Fatal(err)
	}

	n, load := loadScaleEvents(b, owner, orgs, jobsPerOrg, perJob, burst)
	var size string
	_ = owner.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('episodic_events'))`).Scan(&size)
	b.Logf("loaded %d events in %s (%.0f rows/s); episodic_events with indexes: %s", n, load.Round(time.Second), float64(n)/load.Seconds(), size)

	st := episodic.NewStore(episodic.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() (string, string) {
		return fmt.Sprintf("org-%d", rng.IntN(orgs)), fmt.Sprintf("job-%d", rng.IntN(jobsPerOrg))
	}
	measure := func(name string, n int, f func() error) {
		lat := make([]time.Duration, n)
		for k := range n {
			t := time.Now()
			if err := f(); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			lat[k] = time.Since(t)
		}
		b.ReportMetric(pct(lat, 0.5), name+"_p50_ms")
		b.ReportMetric(pct(lat, 0.99), name+"_p99_ms")
	}
	b.ResetTimer()
	measure("append", 1000, func() error {
		org, job := pick()
		return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			_, err := st.Append(ctx, tx, org, job, []episodic.EventInput{{Op: "video.crop", Params: json.RawMessage(`{"x":1}`)}})
			return err
		})
	})
	for _, r := range scaleReads(ctx, pool, st, rng, pick, perJob) {
		measure(r.name, 1000, r.run)
	}
	b.StopTimer()
	rows, err := owner.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
		SELECT * FROM episodic_events e WHERE e.org_id = 'org-3' AND e.job_id = 'job-77' AND e.seq > 500 AND e.seq <= 9223372036854775807
		ORDER BY e.seq LIMIT 100`)
	if err != nil {
		b.Fatal(err)
	}
	plan, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, l := range plan {
		b.Log(l)
	}
}

// loadScaleEvents fills a database for the scale benchmarks as the owner: the heads of
// orgs × jobsPerOrg jobs, then perJob events each by COPY (round r writes seqs
// r*burst+1 .. (r+1)*burst of every job), then VACUUM ANALYZE. It returns the events
// loaded and the time the heads and the COPY took.
func loadScaleEvents(b *testing.B, owner *pgx.Conn, orgs, jobsPerOrg, perJob, burst int) (int64, time.Duration) {
	ctx := context.Background()
	total := orgs * jobsPerOrg * perJob
	t0 := time.Now()
	if _, err := owner.Exec(ctx, `INSERT INTO episodic_jobs (org_id, job_id, last_seq)
		SELECT 'org-' || o, 'job-' || j, $1 FROM generate_series(0, $2 - 1) o, generate_series(0, $3 - 1) j`,
		perJob, orgs, jobsPerOrg); err != nil {
		b.Fatal(err)
	}
	i := 0
	row := make([]any, 8)
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= total {
			return nil, nil
		}
		round := i / (orgs * jobsPerOrg * burst)
		k := i % (orgs * jobsPerOrg * burst)
		jobIdx, off := k/burst, k%burst
		o, j := jobIdx/jobsPerOrg, jobIdx%jobsPerOrg
		seq := int64(round*burst + off + 1)
		p := fmt.Sprintf(`{"frame":%d,"x":%d,"label":"crop"}`, seq, j)
		fp := sha256.Sum256([]byte(p))
		row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7] =
			fmt.Sprintf("org-%d", o), fmt.Sprintf("job-%d", j), seq, "video.crop", p, fp[:], "agent", `{"ok":true}`
		i++
		return row, nil
	})
	n, err := owner.CopyFrom(ctx, pgx.Identifier{"episodic_events"},
		[]string{"org_id", "job_id", "seq", "op", "params", "fingerprint", "agent_id", "result"}, src)
	if err != nil {
		b.Fatal(err)
	}
	load := time.Since(t0)
	if _, err := owner.Exec(ctx, `VACUUM ANALYZE episodic_events`); err != nil {
		b.Fatal(err)
	}
	return n, load
}

// scaleRead is one of the hot reads the scale benchmarks time.
type scaleRead struct {
	name string
	run  func() error
}

// scaleReads are the hot reads on random jobs (pick) of a database loaded by
// loadScaleEvents: 100 events after a random seq, the last 20, applied? by fingerprint.
func scaleReads(ctx context.Context, pool *pgxpool.Pool, st *episodic.Store, rng *rand.Rand, pick func() (string, string), perJob int) []scaleRead {
	return []scaleRead{
		{"read100", func() error {
			org, job := pick()
			return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				evs, err := st.List(ctx, tx, org, job, episodic.ListQuery{AfterSeq: int64(rng.IntN(perJob - 100)), Limit: 100})
				if err == nil && len(evs) != 100 {
					err = fmt.Errorf("read %d events", len(evs))
				}
				return err
			})
		}},
		{"last20", func() error {
			org, job := pick()
			return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				_, err := st.Last(ctx, tx, org, job, 20)
				return err
			})
		}},
		{"applied", func() error {
			org, job := pick()
			fp := sha256.Sum256([]byte(fmt.Sprintf(`{"frame":%d,"x":%s,"label":"crop"}`, 1+rng.IntN(perJob), job[4:])))
			return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				_, err := st.Applied(ctx, tx, org, job, fp[:])
				return err
			})
		}},
	}
}
