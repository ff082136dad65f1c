package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
)

// BeginReadSnapshot binds the org as a parameter (a quote in it is data, not SQL), reads
// one read-only snapshot with no statement timeout, and gives its connection back when
// it ends.
func TestPgBeginReadSnapshot(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	org := `o'brien'); SELECT 1; --`
	_, err := owner.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ($1, 1), ('other', 1)`, org)
	require.NoError(t, err)

	tx, err := pg.BeginReadSnapshot(ctx, pool, org)
	require.NoError(t, err)
	var bound, iso, ro, timeout string
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('app.org_id'), current_setting('transaction_isolation'),
		current_setting('transaction_read_only'), current_setting('statement_timeout')`).Scan(&bound, &iso, &ro, &timeout))
	require.Equal(t, org, bound)
	require.Equal(t, "repeatable read", iso)
	require.Equal(t, "on", ro)
	require.Equal(t, "0", timeout)
	require.Equal(t, 1, rowsVisible(t, tx))

	// The snapshot: a row committed after the first read stays invisible.
	_, err = owner.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ($1, 2)`, org)
	require.NoError(t, err)
	require.Equal(t, 1, rowsVisible(t, tx))
	_, err = tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ($1, 3)`, org)
	require.Error(t, err, "read only")

	require.Equal(t, int32(1), pool.Stat().AcquiredConns())
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)

	_, err = pg.BeginReadSnapshot(ctx, pool, "")
	require.Error(t, err)
	cctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-cctx.Done()
	_, err = pg.BeginReadSnapshot(cctx, pool, org)
	require.Error(t, err)
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

func rowsVisible(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT count(*) FROM pipe_rows`).Scan(&n))
	return n
}

// SetOrg and QueueSetOrg bind a transaction to an org.
func TestPgSetOrg(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	_, err := owner.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('a', 1), ('b', 1), ('b', 2)`)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		require.NoError(t, pg.SetOrg(ctx, tx, "b"))
		require.Equal(t, 2, rowsVisible(t, tx))
		b := &pgx.Batch{}
		pg.QueueSetOrg(b, "a")
		var n int
		b.Queue(`SELECT count(*) FROM pipe_rows`).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
		require.NoError(t, tx.SendBatch(ctx, b).Close())
		require.Equal(t, 1, n)
		return nil
	}))
}
