package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
)

// OnePool is a pool of one connection to dsn with the server's settings, closed when the
// test ends: one connection is one plan cache, for the tests of the plans a connection
// builds on its first use of a statement (while a table is nearly empty) and keeps.
func OnePool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pg.NewPool(context.Background(), dsn, pg.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatalf("testenv: one-connection pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// RowsRead returns how many rows of the tables named like relLike (a LIKE pattern: every
// partition of a partitioned table with "name%") tx's backend read while fn ran, heap
// fetches through an index and sequential reads: pg_stat_xact_user_tables before and after.
// The view also holds counts of the backend's earlier transactions that Postgres has not
// reported yet, so only the difference is fn's.
func RowsRead(ctx context.Context, tx pgx.Tx, relLike string, fn func() error) (int, error) {
	const q = `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)
		FROM pg_stat_xact_user_tables WHERE relname LIKE $1`
	var before, after int
	if err := tx.QueryRow(ctx, q, relLike).Scan(&before); err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	if err := tx.QueryRow(ctx, q, relLike).Scan(&after); err != nil {
		return 0, err
	}
	return after - before, nil
}
