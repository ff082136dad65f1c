package semantic_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestScopeIndexes, on both layouts: a user scope searched past ScopeIndexAbove is noted
// (while the exact sort still answers it); the server's pass builds its partial HNSW index (on the org's partition when memories is
// partitioned); the store's own HNSW search of that user then scans that index (counted in
// the search's transaction) and finds the exact top 10, while another user's search and
// another org's do not touch it; a second pass changes nothing; an index left without its
// comment (a build killed before it) is dropped and built again; the user's erasure
// (DropScopeIndexes) and a scope that shrank (the next pass) remove it.
func TestScopeIndexes(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{0, 16} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := testenv.DatabaseURLPartitions(t, parts)
			pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 4})
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			owner := testenv.OwnerConn(t, dsn)
			sp := semantic.Space{Embedder: "lexical", Model: embed.LexicalModel, Dims: 16}
			r := rand.New(rand.NewPCG(3, uint64(parts)))
			vec := func() []float32 {
				v := make([]float32, sp.Dims)
				for i := range v {
					v[i] = float32(r.NormFloat64())
				}
				return v
			}
			// Scopes past 40 memories are candidates; the exact sort serves up to 200 until
			// a scope has its index.
			const indexAbove = 40
			store := semantic.NewStore(semantic.Options{ExactBelow: 200, ScopeIndexAbove: indexAbove, DedupThreshold: 0.999}, nil)
			write := func(org, user string, n int) []uuid.UUID {
				var ids []uuid.UUID
				require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
					for i := range n {
						m, d, err := store.Create(ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: org, UserID: user}, Kind: "fact", Importance: 0.5,
							Text: fmt.Sprintf("%s note %d", user, i), Vector: vec(), Space: sp})
						if err != nil {
							return err
						}
						require.Nil(t, d)
						ids = append(ids, m.ID)
					}
					return nil
				}))
				return ids
			}
			write("acme", "heavy", 90)
			write("acme", "", 5) // org-level: every user's searches see them
			write("acme", "light", 10)
			write("globex", "heavy", 60)

			heavy := semantic.HotScope{OrgID: "acme", UserID: "heavy", Dims: 16}
			// search runs the store's vector leg for user of org and returns the ids, the
			// strategy and how many scans the transaction made of the heavy scope's index.
			search := func(org, user string, q []float32, strategy semantic.Strategy) ([]uuid.UUID, semantic.Strategy, int) {
				var ids []uuid.UUID
				var used semantic.Strategy
				var scans int
				// The backend's pending counters include earlier transactions' scans until
				// they are flushed (at most once a second, never inside a transaction): the
				// difference across the search is its own.
				scansNow := func(tx pgx.Tx) (n int, err error) {
					err = tx.QueryRow(ctx, `SELECT coalesce(pg_stat_get_xact_numscans(to_regclass($1)), 0)`, heavy.IndexName()).Scan(&n)
					return n, err
				}
				require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
					before, err := scansNow(tx)
					if err != nil {
						return err
					}
					ids, used, err = store.VectorSearch(ctx, tx, semantic.VectorQuery{Scope: strata.Scope{OrgID: org, UserID: user},
						Vector: q, Space: sp, N: 10, Strategy: strategy})
					if err != nil {
						return err
					}
					after, err := scansNow(tx)
					scans = after - before
					return err
				}))
				return ids, used, scans
			}
			opts := semantic.ScopeIndexOptions{BuildAbove: indexAbove}

			// Before any pass: the heavy user's search (95 visible rows) is exact and noted;
			// the light user's (15) is exact and is not noted.
			q := vec()
			_, used, _ := search("acme", "heavy", q, semantic.StrategyAuto)
			require.Equal(t, semantic.StrategyExact, used)
			_, used, _ = search("acme", "light", q, semantic.StrategyAuto)
			require.Equal(t, semantic.StrategyExact, used)
			noted := store.HotScopes()
			require.Equal(t, []semantic.HotScope{heavy}, noted)
			require.Empty(t, store.HotScopes(), "taken once")
			search("acme", "heavy", q, semantic.StrategyAuto) // noted again

			// The server's pass (its own connection, as the login role) builds it.
			ix := &semantic.ScopeIndexer{Store: store, DSN: dsn}
			rep, err := ix.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, []semantic.HotScope{heavy}, rep.Built)
			require.Equal(t, []semantic.HotScope{heavy}, rep.Indexed)
			require.Empty(t, rep.Dropped)
			var table string
			var valid bool
			require.NoError(t, owner.QueryRow(ctx, `SELECT i.indrelid::regclass::text, i.indisvalid FROM pg_index i
				WHERE i.indexrelid = $1::regclass`, heavy.IndexName()).Scan(&table, &valid))
			require.True(t, valid)
			if parts == 0 {
				require.Equal(t, "memories", table)
			} else {
				require.Regexp(t, `^memories_p\d+$`, table, "built on the org's partition")
			}

			// The heavy user's search now goes to HNSW, uncounted, scans its own index and
			// finds the exact top 10 (the index holds the user's rows and the org-level ones,
			// nothing else).
			for range 5 {
				q := vec()
				got, used, scans := search("acme", "heavy", q, semantic.StrategyAuto)
				require.Equal(t, semantic.StrategyHNSW, used)
				require.Equal(t, 1, scans, "the search scanned the scope's index")
				want, _, _ := search("acme", "heavy", q, semantic.StrategyExact)
				require.Equal(t, want, got)
				_, _, scans = search("acme", "light", q, semantic.StrategyHNSW)
				require.Zero(t, scans, "another user's search does not use it")
				_, _, scans = search("globex", "heavy", q, semantic.StrategyHNSW)
				require.Zero(t, scans, "nor another org's user of the same id")
			}
			require.Empty(t, store.HotScopes(), "an indexed scope is not noted again")

			// A rerun changes nothing; a candidate that is not heavy (light) is skipped.
			rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, []semantic.HotScope{heavy, {OrgID: "acme", UserID: "light", Dims: 16}})
			require.NoError(t, err)
			require.Empty(t, rep.Built)
			require.Empty(t, rep.Dropped)
			require.Equal(t, []semantic.HotScope{heavy}, rep.Indexed)

			// A build killed before its comment: the index is dropped and built again.
			_, err = owner.Exec(ctx, `COMMENT ON INDEX `+heavy.IndexName()+` IS NULL`)
			require.NoError(t, err)
			rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, []semantic.HotScope{heavy})
			require.NoError(t, err)
			require.Equal(t, []string{heavy.IndexName()}, rep.Dropped)
			require.Equal(t, []semantic.HotScope{heavy}, rep.Built)

			// Erasure drops the user's index at once.
			dropped, err := semantic.DropScopeIndexes(ctx, owner, "acme", "heavy")
			require.NoError(t, err)
			require.Equal(t, []string{heavy.IndexName()}, dropped)
			var n int
			require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`, heavy.IndexName()).Scan(&n))
			require.Zero(t, n)

			// A scope that shrank below half of BuildAbove loses its index on the next pass.
			globex := semantic.HotScope{OrgID: "globex", UserID: "heavy", Dims: 16}
			rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, []semantic.HotScope{globex})
			require.NoError(t, err)
			require.Equal(t, []semantic.HotScope{globex}, rep.Built)
			require.NoError(t, pg.InOrgTx(ctx, pool, "globex", func(tx pgx.Tx) error {
				_, err := semantic.EraseUserMemoriesBatch(ctx, tx, "globex", "heavy", 50)
				return err
			}))
			rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, nil)
			require.NoError(t, err)
			require.Equal(t, []string{globex.IndexName()}, rep.Dropped)
			require.Empty(t, rep.Indexed)

			if parts > 0 {
				// `server partition` copies an unpartitioned table's indexes onto the
				// partitioned one, a scope index too, without its comment: the pass drops
				// that copy (not concurrently: Postgres refuses it for a partitioned index).
				copied := semantic.HotScope{OrgID: "acme", UserID: "copied", Dims: 16}.IndexName()
				_, err = owner.Exec(ctx, `CREATE INDEX `+copied+` ON memories (org_id) WHERE org_id = 'acme'`)
				require.NoError(t, err)
				rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, nil)
				require.NoError(t, err)
				require.Equal(t, []string{copied}, rep.Dropped)
			}
			// Only names of the scope-index shape are its business: the scope b-tree
			// (memories_scope) and any other index that merely starts alike stay.
			_, err = owner.Exec(ctx, `CREATE INDEX memories_scope_other ON memories (org_id)`)
			require.NoError(t, err)
			rep, err = semantic.EnsureScopeIndexes(ctx, owner, opts, nil)
			require.NoError(t, err)
			require.Empty(t, rep.Dropped)
			for _, name := range []string{"memories_scope", "memories_scope_other"} {
				require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`, name).Scan(&n))
				require.Equal(t, 1, n, name)
			}
		})
	}
}
