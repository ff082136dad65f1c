package semantic_test

import (
	"context"
	"fmt"
	mrand "math/rand"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	pgvector "github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkSemantic100k is the benchmark: 100k memories × 384 dims (latent-space
// vectors, see latent), users drawn from a zipf over 1,000 users. It is slow (index build,
// ground truth), so it runs only when asked:
//
//	STRATA_BENCH_100K=1 go test ./internal/semantic/ -run '^$' -bench Semantic100k -benchtime 200x -timeout 30m
//
// Sub-benchmarks:
//   - bare/ef=N: the floor, a bare pgvector query (SET LOCAL hnsw.ef_search = N; WHERE
//     dims = 384, the partial index's predicate; ORDER BY embedding <=> q LIMIT 10) in an
//     org transaction, as the app role (row-level security applies to both);
//   - ours/ef=N: the store's vector leg over the whole org (AnyScope, HNSW, iterative
//     scan, filters on org/space/validity); reports recall@10 vs exact and the ratio of
//     its time per query to the bare one;
//   - scoped/zipf: searches for zipf-drawn users with the auto strategy (exact sort for
//     small scopes, HNSW + iterative scan for big ones) vs the naive filtered HNSW query;
//   - insert/c=N: Store.Create (lock, exact + near dedup check, indexed insert) vs a bare
//     indexed INSERT.
func BenchmarkSemantic100k(b *testing.B) {
	if os.Getenv("STRATA_BENCH_100K") == "" {
		b.Skip("set STRATA_BENCH_100K=1 to run the 100k benchmark")
	}
	const users, nq = 1000, 100
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_ROWS")); err == nil && v > 0 {
		n = v // a quick smoke run of the benchmark itself
	}
	pool, dsn := testenv.Pool(b)
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_PARTITIONS")); err == nil { // the layout [16]
		dsn = testenv.DatabaseURLPartitions(b, v)
		if pool, err = pg.NewPool(context.Background(), dsn, pg.PoolOptions{MaxConns: 10}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	vecs := latent(r, 7, n, 384)
	z := mrand.NewZipf(mrand.New(mrand.NewSource(5)), 1.1, 1, users-1)
	rows := make([]row, n)
	perUser := map[string]int{}
	for i := range rows {
		u := fmt.Sprintf("user%04d", z.Uint64())
		perUser[u]++
		rows[i] = row{"acme", u, vecs[i]}
	}
	build := bulkLoad(b, dsn, rows)
	b.Logf("HNSW build (m=16, ef_construction=64, maintenance_work_mem=1GB) over %d×384: %s", n, build.Round(time.Millisecond))
	sizes := make([]int, 0, len(perUser))
	for _, c := range perUser {
		sizes = append(sizes, c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	b.Logf("zipf users: %d distinct, largest scopes %v", len(perUser), sizes[:5])

	queries := latent(rand.New(rand.NewPCG(21, 22)), 7, nq, 384)
	inTx := func(fn func(tx pgx.Tx) error) {
		if err := pg.InOrgTx(ctx, pool, "acme", fn); err != nil {
			b.Fatal(err)
		}
	}
	exactStore := semantic.NewStore(semantic.Options{}, nil)
	truth := make([][]uuid.UUID, nq)
	for i, q := range queries {
		inTx(func(tx pgx.Tx) error {
			var err error
			truth[i], err = exactStore.ExactNeighbours(ctx, tx, semantic.VectorQuery{Scope: strata.Scope{OrgID: "acme"},
				AnyScope: true, Vector: q, Space: space384, N: 10})
			return err
		})
	}

	bareNs := map[int]float64{}
	for _, ef := range []int{40, 100, 200} {
		b.Run(fmt.Sprintf("bare/ef=%d", ef), func(b *testing.B) {
			var rec float64
			start := time.Now()
			for i := 0; i < b.N; i++ {
				q := i % nq
				inTx(func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL hnsw.ef_search = %d", ef)); err != nil {
						return err
					}
					rs, err := tx.Query(ctx, `SELECT id FROM memories WHERE dims = 384 ORDER BY embedding::vector(384) <=> $1::vector(384) LIMIT 10`,
						pgvector.NewVector(queries[q]))
					if err != nil {
						return err
					}
					ids, err := pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
					rec += recallAt(ids, truth[q])
					return err
				})
			}
			bareNs[ef] = float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(rec/float64(b.N), "recall@10")
			b.ReportMetric(1e9/bareNs[ef], "qps")
		})
		b.Run(fmt.Sprintf("ours/ef=%d", ef), func(b *testing.B) {
			store := semantic.NewStore(semantic.Options{EfSearch: ef}, nil)
			var rec float64
			// Each query is also run bare on the same vector, next to ours, so machine load
			// hits both alike: x_bare_time and bare_qps_interleaved come from these pairs.
			// The second of a pair finds the graph pages the first one read in the buffer
			// cache, so the order alternates.
			var ours, bare time.Duration
			for i := 0; i < b.N; i++ {
				q := i % nq
				runOurs := func() {
					t0 := time.Now()
					inTx(func(tx pgx.Tx) error {
						ids, _, err := store.VectorSearch(ctx, tx, semantic.VectorQuery{Scope: strata.Scope{OrgID: "acme"},
							AnyScope: true, Vector: queries[q], Space: space384, N: 10, Strategy: semantic.StrategyHNSW})
						rec += recallAt(ids, truth[q])
						return err
					})
					ours += time.Since(t0)
				}
				if i%2 == 0 {
					runOurs()
				}
				t1 := time.Now()
				inTx(func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL hnsw.ef_search = %d", ef)); err != nil {
						return err
					}
					rs, err := tx.Query(ctx, `SELECT id FROM memories WHERE dims = 384 ORDER BY embedding::vector(384) <=> $1::vector(384) LIMIT 10`,
						pgvector.NewVector(queries[q]))
					if err != nil {
						return err
					}
					_, err = pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
					return err
				})
				bare += time.Since(t1)
				if i%2 == 1 {
					runOurs()
				}
			}
			b.ReportMetric(rec/float64(b.N), "recall@10")
			b.ReportMetric(float64(b.N)/ours.Seconds(), "qps")
			b.ReportMetric(float64(b.N)/bare.Seconds(), "bare_qps_interleaved")
			b.ReportMetric(ours.Seconds()/bare.Seconds(), "x_bare_time")
		})
	}

	// Scoped search: users drawn by zipf (heavy users asked most, as in production).
	qz := mrand.NewZipf(mrand.New(mrand.NewSource(9)), 1.1, 1, users-1)
	type scoped struct {
		user  string
		q     []float32
		truth []uuid.UUID
	}
	sq := make([]scoped, nq)
	for i := range sq {
		u := fmt.Sprintf("user%04d", qz.Uint64())
		sq[i] = scoped{user: u, q: queries[i]}
		inTx(func(tx pgx.Tx) error {
			var err error
			sq[i].truth, err = exactStore.ExactNeighbours(ctx, tx, semantic.VectorQuery{Scope: strata.Scope{OrgID: "acme", UserID: u},
				Vector: queries[i], Space: space384, N: 10})
			return err
		})
	}
	// The auto store notes the heavy scopes it sends to HNSW; between ours_auto and
	// ours_scope_indexes one maintenance pass builds their indexes (scopeindex.go), timed.
	autoStore := semantic.NewStore(semantic.Options{}, nil)
	var scopedBare float64
	for _, v := range []struct {
		name string
		st   semantic.Strategy
	}{{"naive_filtered_hnsw", semantic.StrategyHNSWPlain}, {"ours_auto", semantic.StrategyAuto}, {"ours_scope_indexes", semantic.StrategyAuto}} {
		st := v.st
		if v.name == "ours_scope_indexes" {
			conn := testenv.OwnerConn(b, dsn)
			if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'"); err != nil {
				b.Fatal(err)
			}
			rep, err := semantic.EnsureScopeIndexes(ctx, conn, semantic.ScopeIndexOptions{BuildAbove: autoStore.Options().ScopeIndexAbove}, autoStore.HotScopes())
			if err != nil {
				b.Fatal(err)
			}
			autoStore.SetIndexed(rep.Indexed)
			b.Logf("scope indexes: %d built in %s", len(rep.Built), rep.Took.Round(time.Millisecond))
		}
		b.Run("scoped/zipf/"+v.name, func(b *testing.B) {
			store := autoStore
			if st == semantic.StrategyHNSWPlain {
				store = semantic.NewStore(semantic.Options{}, nil)
			}
			var lat []time.Duration
			var rec float64
			used := map[semantic.Strategy]int{}
			spent := map[semantic.Strategy]time.Duration{}
			recs := map[semantic.Strategy]float64{}
			start := time.Now()
			for i := 0; i < b.N; i++ {
				x := sq[i%nq]
				t0 := time.Now()
				inTx(func(tx pgx.Tx) error {
					ids, s, err := store.VectorSearch(ctx, tx, semantic.VectorQuery{Scope: strata.Scope{OrgID: "acme", UserID: x.user},
						Vector: x.q, Space: space384, N: 10, Strategy: st})
					used[s]++
					spent[s] += time.Since(t0)
					recs[s] += recallAt(ids, x.truth)
					rec += recallAt(ids, x.truth)
					return err
				})
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95_ms")
			for s, c := range used {
				b.Logf("%s: %d queries, mean %s, recall@10 %.3f", s, c, (spent[s] / time.Duration(c)).Round(time.Microsecond), recs[s]/float64(c))
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(rec/float64(b.N), "recall@10")
			b.ReportMetric(1e9/ns, "qps")
			if st == semantic.StrategyHNSWPlain {
				scopedBare = ns
			} else if scopedBare > 0 {
				b.ReportMetric(ns/scopedBare, "x_naive_time")
				b.ReportMetric(scopedBare/ns, "x_naive_qps")
			}
		})
	}

	// Insert throughput with the index (and, for ours, the dedup checks).
	ins := latent(rand.New(rand.NewPCG(31, 32)), 7, 20000, 384)
	var next int64
	var mu sync.Mutex
	take := func() []float32 {
		mu.Lock()
		defer mu.Unlock()
		v := ins[next%int64(len(ins))]
		next++
		return v
	}
	var bareInsert float64
	var seq atomic.Int64
	for _, mode := range []string{"bare", "ours"} {
		for _, c := range []int{1, 8} {
			b.Run(fmt.Sprintf("insert/%s/c=%d", mode, c), func(b *testing.B) {
				store := semantic.NewStore(semantic.Options{}, nil)
				var wg sync.WaitGroup
				work := make(chan int)
				start := time.Now()
				for w := 0; w < c; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range work {
							v := take()
							u := fmt.Sprintf("user%04d", i%users)
							text := fmt.Sprintf("inserted memory %s %d %d", mode, c, seq.Add(1))
							err := pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
								if mode == "bare" {
									id := uuid.Must(uuid.NewV7())
									_, err := tx.Exec(ctx, `INSERT INTO memories (org_id, id, root_id, user_id, kind, text, text_hash, trust,
										embedding, embedder, model, dims, valid_from, updated_at) VALUES ('acme', $1, $1, $2, 'fact', $3, $4,
										'agent_inferred', $5, $6, $7, 384, now(), now())`, id, u, text, semantic.TextHash(text),
										pgvector.NewVector(v), space384.Embedder, space384.Model)
									return err
								}
								_, _, err := store.Create(ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: "acme", UserID: u},
									Kind: "fact", Text: text, Importance: 0.5, Vector: v, Space: space384})
								return err
							})
							if err != nil {
								b.Error(err) // keep draining work: FailNow here would strand the feeder
							}
						}
					}()
				}
				for i := 0; i < b.N; i++ {
					work <- i
				}
				close(work)
				wg.Wait()
				ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
				b.ReportMetric(1e9/ns, "rows/s")
				if mode == "bare" && c == 1 {
					bareInsert = ns
				}
				if mode == "ours" && c == 1 && bareInsert > 0 {
					b.ReportMetric(ns/bareInsert, "x_bare_time")
				}
			})
		}
	}
}
