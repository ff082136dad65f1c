package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// pipeTable makes a tenant table with forced row-level security, as migrations do.
func pipeTable(t *testing.T) (*pgxpool.Pool, *pgx.Conn) {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	_, err := owner.Exec(context.Background(), `CREATE TABLE pipe_rows (org_id text NOT NULL CHECK (org_id <> ''), id int NOT NULL,
		v text, PRIMARY KEY (org_id, id)); SELECT strata_enable_rls('pipe_rows');`)
	require.NoError(t, err)
	return pool, owner
}

func count(t *testing.T, owner *pgx.Conn, org string) int {
	t.Helper()
	var n int
	require.NoError(t, owner.QueryRow(context.Background(), `SELECT count(*) FROM pipe_rows WHERE org_id = $1`, org).Scan(&n))
	return n
}

// The session's first statement of each kind (Exec, Query, QueryRow, SendBatch) carries
// BEGIN and the org setting: row-level security binds, and everything commits together
// with the statements queued for commit time.
func TestPgPipelinedSessionFirstStatementKinds(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	first := map[string]func(tx pgx.Tx) error{
		"exec": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES (current_setting('app.org_id'), 1)`)
			return err
		},
		"query": func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES (current_setting('app.org_id'), 1) RETURNING id`)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err == nil && len(ids) != 1 {
				err = fmt.Errorf("ids %v", ids)
			}
			return err
		},
		"queryrow": func(tx pgx.Tx) error {
			var org string
			return tx.QueryRow(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES (current_setting('app.org_id'), 1) RETURNING org_id`).Scan(&org)
		},
		"batch": func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			var got int
			b.Queue(`INSERT INTO pipe_rows (org_id, id) VALUES (current_setting('app.org_id'), 1)`)
			b.Queue(`SELECT count(*) FROM pipe_rows`).QueryRow(func(r pgx.Row) error { return r.Scan(&got) })
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			if got != 1 {
				return fmt.Errorf("batch callback saw %d rows", got)
			}
			return nil
		},
	}
	for name, f := range first {
		org := "org-" + name
		s := pg.NewSession(pool, org)
		tx, err := s.Tx(ctx)
		require.NoError(t, err)
		require.False(t, s.Started(), name)
		require.NoError(t, f(tx), name)
		require.True(t, s.Started(), name)
		// RLS: the session sees its own org's row only, and the org setting is its org.
		var seen int
		var setting string
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*), current_setting('app.org_id') FROM pipe_rows`).Scan(&seen, &setting), name)
		require.Equal(t, 1, seen, name)
		require.Equal(t, org, setting, name)
		hooked := false
		s.AfterCommit(func() { hooked = true })
		s.AtCommit(`INSERT INTO pipe_rows (org_id, id, v) VALUES ($1, 2, 'trailer')`, org)
		require.Equal(t, 0, count(t, owner, org), name+": nothing visible before commit")
		require.NoError(t, s.Commit(ctx), name)
		require.True(t, hooked, name)
		require.Equal(t, 2, count(t, owner, org), name)
	}
	// Every connection went back to the pool idle.
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// A failing AtCommit statement (or its check) commits nothing: neither the request's
// writes nor the other queued statements; hooks do not run; the connection is reusable.
func TestPgPipelinedSessionTrailerFailureCommitsNothing(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()

	s := pg.NewSession(pool, "acme")
	tx, err := s.Tx(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 1)`)
	require.NoError(t, err)
	hooked := false
	s.AfterCommit(func() { hooked = true })
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 2)`)
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 1)`) // duplicate key
	err = s.Commit(ctx)
	var dup *strata.ConflictError
	require.ErrorAs(t, err, &dup)
	require.False(t, hooked)
	require.Equal(t, 0, count(t, owner, "acme"))

	// A statement that stops the commit itself (strata_expect_rows) when it affected no row.
	s = pg.NewSession(pool, "acme")
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 3)`)
	s.AtCommit(`WITH u AS (UPDATE pipe_rows SET v = 'x' WHERE org_id = 'acme' AND id = 42 RETURNING 1)
		SELECT strata_expect_rows((SELECT count(*) FROM u), 1, 'test update')`)
	err = s.Commit(ctx)
	var conflict *strata.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, 0, count(t, owner, "acme"))

	// A failing first statement leaves the session rollback-able and the pool healthy.
	s = pg.NewSession(pool, "acme")
	tx, err = s.Tx(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`)
	require.Error(t, err)
	s.Rollback(ctx)
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 9)`)
		return err
	}))
	require.Equal(t, 1, count(t, owner, "acme"))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// Savepoints, a session that only queues statements (BEGIN travels with COMMIT), an empty
// session, QueryRow's no-rows error, and rollback after a read.
func TestPgPipelinedSessionSavepointsAndEdges(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()

	s := pg.NewSession(pool, "acme")
	tx, err := s.Tx(ctx)
	require.NoError(t, err)
	var v string
	require.ErrorIs(t, tx.QueryRow(ctx, `SELECT v FROM pipe_rows WHERE id = 1`).Scan(&v), pgx.ErrNoRows)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 1)`)
	require.NoError(t, err)
	require.NoError(t, sp.Rollback(ctx))
	_, err = tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 2)`)
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx))
	require.Equal(t, 1, count(t, owner, "acme"))

	// Only queued statements: one round trip begins, runs them and commits.
	s = pg.NewSession(pool, "acme")
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES (current_setting('app.org_id'), 3)`)
	require.NoError(t, s.Commit(ctx))
	require.Equal(t, 2, count(t, owner, "acme"))

	// Nothing at all: no transaction, hooks still run.
	s = pg.NewSession(pool, "acme")
	ran := false
	s.AfterCommit(func() { ran = true })
	require.NoError(t, s.Commit(ctx))
	require.True(t, ran)

	// A read then rollback; a second commit of a finished session is refused.
	s = pg.NewSession(pool, "acme")
	tx, err = s.Tx(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pipe_rows`).Scan(&n))
	require.Equal(t, 2, n)
	s.Rollback(ctx)
	_, err = s.Tx(ctx)
	require.Error(t, err)

	// InOrgTx with an error rolls back.
	require.Error(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 4)`); err != nil {
			return err
		}
		return errors.New("changed my mind")
	}))
	require.Equal(t, 2, count(t, owner, "acme"))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// NoFlushCommit runs the commit-time statements and COMMIT with synchronous_commit off for
// that transaction only: the next transaction on the same connection is back to on.
func TestPgSessionNoFlushCommit(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	for i, noFlush := range []bool{true, false, true} {
		s := pg.NewSession(pool, "acme")
		if noFlush {
			s.NoFlushCommit()
		}
		s.AtCommit(`INSERT INTO pipe_rows (org_id, id, v) VALUES (current_setting('app.org_id'), $1, current_setting('synchronous_commit'))`, i)
		require.NoError(t, s.Commit(ctx))
		var v string
		require.NoError(t, owner.QueryRow(ctx, `SELECT v FROM pipe_rows WHERE org_id = 'acme' AND id = $1`, i).Scan(&v))
		require.Equal(t, map[bool]string{true: "off", false: "on"}[noFlush], v, "transaction %d", i)
	}
	var v string
	require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v))
	require.Equal(t, "on", v, "the setting was local to each transaction")
}

// AtBegin statements travel right after BEGIN and the org setting, in front of the first
// statement: when one fails nothing behind it runs, the first statement answers its error
// and BeginErr names it; when they succeed they commit with the rest. With no statement
// before COMMIT they travel with it. They cannot be added once a statement ran.
func TestPgSessionAtBegin(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	guard := func(id int) pg.Statement {
		return pg.Statement{SQL: `WITH c AS (INSERT INTO pipe_rows (org_id, id, v) VALUES (current_setting('app.org_id'), $1, 'lead')
			ON CONFLICT DO NOTHING RETURNING 1) SELECT strata_expect_rows((SELECT count(*) FROM c), 1, 'lead')`, Args: []any{id}}
	}

	// Succeeds: the lead row and the statement's commit together; the statement sees the lead's row.
	s := pg.NewSession(pool, "acme")
	require.True(t, s.AtBegin(guard(1)))
	tx, err := s.Tx(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pipe_rows`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, s.BeginErr())
	require.False(t, s.AtBegin(guard(2)), "a statement ran already")
	require.NoError(t, s.Commit(ctx))
	require.Equal(t, 1, count(t, owner, "acme"))

	// Fails (id 1 exists): the first statement, a batch, answers the lead's error and does not run.
	s = pg.NewSession(pool, "acme")
	tx, err = s.Tx(ctx)
	require.NoError(t, err)
	require.True(t, s.AtBegin(guard(1)), "Tx without a statement has not begun")
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 5)`)
	err = tx.SendBatch(ctx, b).Close()
	require.Error(t, err)
	var conflict *strata.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Error(t, s.BeginErr())
	s.Rollback(ctx)
	require.Equal(t, 1, count(t, owner, "acme"))

	// Only queued statements: the lead travels with COMMIT, and a failing one stops it.
	s = pg.NewSession(pool, "acme")
	require.True(t, s.AtBegin(guard(1)))
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 6)`)
	require.Error(t, s.Commit(ctx))
	require.Error(t, s.BeginErr())
	s.Rollback(ctx)
	require.Equal(t, 1, count(t, owner, "acme"))
	s = pg.NewSession(pool, "acme")
	require.True(t, s.AtBegin(guard(7)))
	s.AtCommit(`INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 8)`)
	require.NoError(t, s.Commit(ctx))
	require.NoError(t, s.BeginErr())
	require.Equal(t, 3, count(t, owner, "acme"))
	require.Equal(t, int32(0), pool.Stat().AcquiredConns())
}

// ReadInOneTrip: each statement is a transaction of its own (BEGIN, the org, the statement,
// COMMIT in one round trip) whatever its kind; row-level security binds each; a failing
// statement leaves the connection idle and the next statement works; nothing is left to roll
// back and every connection is back in the pool once the rows are read.
func TestPgSessionReadInOneTrip(t *testing.T) {
	t.Parallel()
	pool, owner := pipeTable(t)
	ctx := context.Background()
	_, err := owner.Exec(ctx, `INSERT INTO pipe_rows (org_id, id) VALUES ('acme', 1), ('acme', 2), ('globex', 1)`)
	require.NoError(t, err)

	s := pg.NewSession(pool, "acme")
	s.ReadInOneTrip()
	tx, err := s.Tx(ctx)
	require.NoError(t, err)
	idle := func(what string) {
		t.Helper()
		require.False(t, s.Started(), what+": the transaction ended with its statement")
		require.Equal(t, int32(0), pool.Stat().AcquiredConns(), what+": the connection is back")
	}
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pipe_rows`).Scan(&n))
	require.Equal(t, 2, n, "RLS: acme's rows only")
	idle("queryrow")

	rows, err := tx.Query(ctx, `SELECT id FROM pipe_rows ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, ids)
	idle("query")

	// Each statement its own transaction: a SET LOCAL does not outlive its statement.
	_, err = tx.Exec(ctx, `SET LOCAL statement_timeout = 1234`)
	require.NoError(t, err)
	idle("exec")
	var timeout string
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&timeout))
	require.NotEqual(t, "1234ms", timeout)

	b := &pgx.Batch{}
	var seen string
	b.Queue(`SELECT current_setting('app.org_id')`).QueryRow(func(r pgx.Row) error { return r.Scan(&seen) })
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.Equal(t, "acme", seen)
	idle("batch")

	// A failing statement: its error, then the connection is idle again and usable.
	_, err = tx.Exec(ctx, `SELECT * FROM no_such_table`)
	require.Error(t, err)
	idle("failed exec")
	require.Error(t, tx.QueryRow(ctx, `SELECT 1/0`).Scan(&n))
	idle("failed queryrow")
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pipe_rows`).Scan(&n))
	require.Equal(t, 2, n)
	s.Rollback(ctx)
	idle("rollback")
}
