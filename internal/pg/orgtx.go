package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// orgTx is a transaction bound to one org that costs no round trip of its own: it takes a
// connection and sends BEGIN and the org setting only with its first statement, in the same
// pipeline (one round trip for BEGIN + set_config + the statement), and commits together with
// the statements queued for commit time (one round trip for audit row + idempotency record +
// COMMIT). A request that reads therefore pays one round trip per statement and one for the
// end of the transaction; the old path paid one more for BEGIN and one for each trailer.
//
// It implements pgx.Tx. Methods that cannot carry the BEGIN in their own round trip
// (CopyFrom, Prepare, Begin, LargeObjects, Conn) begin it first. Not safe for concurrent
// use, like any pgx transaction.
type orgTx struct {
	pool *pgxpool.Pool
	org  string
	conn *pgxpool.Conn
	tx   pgx.Tx // the begun transaction; nil before the first statement
	// failed is set when beginning failed: the transaction is unusable.
	failed error
	// lead are statements that travel right after BEGIN and the org setting, in front of
	// the first statement (Session.AtBegin); leadErr is the error of the one that failed.
	lead    []trailing
	leadErr error
	// oneTrip: every statement is a transaction of its own that ends in its round trip
	// (Session.ReadInOneTrip).
	oneTrip bool
}

var _ pgx.Tx = (*orgTx)(nil)

func newOrgTx(pool *pgxpool.Pool, org string) (*orgTx, error) {
	if org == "" {
		return nil, errors.New("pg: empty org")
	}
	return &orgTx{pool: pool, org: org}, nil
}

// begun reports whether BEGIN was sent.
func (t *orgTx) begun() bool { return t.tx != nil }

func (t *orgTx) acquire(ctx context.Context) error {
	if t.failed != nil {
		return t.failed
	}
	if t.conn != nil {
		return nil
	}
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return Interpret(fmt.Errorf("acquiring a connection: %w", err))
	}
	t.conn = c
	return nil
}

// beginBatch returns a batch that begins the transaction, sets the org and carries the lead
// statements; the caller appends its statements and sends it with send, which reads the
// leading results.
func (t *orgTx) beginBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	QueueSetOrg(b, t.org)
	for _, s := range t.lead {
		b.Queue(s.sql, s.args...)
	}
	return b
}

// send sends b (which starts with beginBatch's statements) and consumes their results.
// On error the batch results are closed and the error returned; a lead statement's error is
// kept in leadErr as well. Nothing queued behind a failed statement runs (the transaction
// is aborted).
func (t *orgTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if err := t.acquire(ctx); err != nil {
		return nil, err
	}
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	for i := range 2 + len(t.lead) {
		if _, err := br.Exec(); err != nil {
			if i >= 2 {
				t.leadErr = err
			}
			_ = br.Close()
			if t.oneTrip { // the next statement begins afresh
				t.endTrip(ctx)
				return nil, Interpret(fmt.Errorf("beginning transaction: %w", err))
			}
			return nil, t.beginFailed(ctx, err)
		}
	}
	return br, nil
}

// beginFailed records a failed BEGIN or set_config. If BEGIN itself went through the
// transaction stays open (aborted) and Rollback ends it.
func (t *orgTx) beginFailed(ctx context.Context, err error) error {
	err = Interpret(fmt.Errorf("beginning transaction: %w", err))
	if t.tx == nil || t.conn.Conn().PgConn().TxStatus() == 'I' {
		t.failed = err
		t.tx = nil
		t.releaseConn()
	}
	return err
}

// ensure begins the transaction now (one round trip) if no statement has yet.
func (t *orgTx) ensure(ctx context.Context) error {
	if t.failed != nil {
		return t.failed
	}
	if t.tx != nil {
		return nil
	}
	br, err := t.send(ctx, t.beginBatch())
	if err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return t.beginFailed(ctx, err)
	}
	return nil
}

func (t *orgTx) releaseConn() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}

// plain reports whether args can ride in a batch (pgx batches take no exec-mode options).
func plain(args []any) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// Exec runs sql; the first statement carries BEGIN and the org setting.
func (t *orgTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil || t.failed != nil || !plain(args) {
		if err := t.ensure(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	b := t.beginBatch()
	b.Queue(sql, args...)
	t.queueEnd(b)
	br, err := t.send(ctx, b)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	t.endTrip(ctx)
	return tag, err
}

// Query runs sql; the first statement carries BEGIN and the org setting.
func (t *orgTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx != nil || t.failed != nil || !plain(args) {
		if err := t.ensure(ctx); err != nil {
			return errRows(err), err
		}
		return t.tx.Query(ctx, sql, args...)
	}
	b := t.beginBatch()
	b.Queue(sql, args...)
	t.queueEnd(b)
	br, err := t.send(ctx, b)
	if err != nil {
		return errRows(err), err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		t.endTrip(ctx)
		return errRows(err), err
	}
	r := &batchRows{Rows: rows, br: br}
	if t.oneTrip {
		r.closed1 = func() { t.endTrip(ctx) }
	}
	return r, nil
}

// QueryRow is Query for one row.
func (t *orgTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &oneRow{rows: rows, err: err}
}

// SendBatch sends b; a first batch carries BEGIN and the org setting in front of b's
// statements, and b's callbacks run as usual.
func (t *orgTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.tx != nil || t.failed != nil {
		if err := t.ensure(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		return t.tx.SendBatch(ctx, b)
	}
	nb := t.beginBatch()
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	t.queueEnd(nb)
	br, err := t.send(ctx, nb)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if t.oneTrip {
		return &tripBatch{BatchResults: br, end: func() { t.endTrip(ctx) }}
	}
	return br
}

// queueEnd ends a one-trip statement's transaction in its own batch.
func (t *orgTx) queueEnd(b *pgx.Batch) {
	if t.oneTrip {
		b.Queue("COMMIT")
	}
}

// endTrip, after a one-trip batch was read to its end, hands the connection back: the
// transaction committed with it, or, when a statement failed (the pipeline skipped the
// COMMIT behind it), is rolled back now. The next statement begins a new transaction.
func (t *orgTx) endTrip(ctx context.Context) {
	if !t.oneTrip || t.conn == nil {
		return
	}
	if t.conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = t.conn.Conn().Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	t.tx = nil
	t.releaseConn()
}

// tripBatch ends a one-trip batch's transaction when its results are closed.
type tripBatch struct {
	pgx.BatchResults
	end    func()
	closed bool
}

func (b *tripBatch) Close() error {
	err := b.BatchResults.Close()
	if !b.closed {
		b.closed = true
		b.end()
	}
	return err
}

// Begin starts a savepoint (a pseudo nested transaction).
func (t *orgTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

func (t *orgTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, cols, src)
}

func (t *orgTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// LargeObjects begins the transaction first (with a background context: the interface
// has none).
func (t *orgTx) LargeObjects() pgx.LargeObjects {
	_ = t.ensure(context.Background())
	if t.tx == nil {
		return pgx.LargeObjects{}
	}
	return t.tx.LargeObjects()
}

// Conn begins the transaction first (with a background context) and returns its connection.
func (t *orgTx) Conn() *pgx.Conn {
	_ = t.ensure(context.Background())
	if t.conn == nil {
		return nil
	}
	return t.conn.Conn()
}

// Commit commits with no trailer.
func (t *orgTx) Commit(ctx context.Context) error { return t.commit(ctx, nil) }

// Rollback ends the transaction, if one was begun, and releases the connection.
func (t *orgTx) Rollback(ctx context.Context) error {
	defer t.releaseConn()
	if t.tx == nil {
		return nil
	}
	tx := t.tx
	t.tx, t.failed = nil, pgx.ErrTxClosed
	err := tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// trailing is a statement queued to run just before COMMIT, in the same round trip.
type trailing struct {
	sql  string
	args []any
}

// commit sends the queued statements and COMMIT in one pipeline. When no statement ran
// yet, BEGIN and the org setting lead the same pipeline. With nothing queued and nothing
// begun there is nothing to commit.
func (t *orgTx) commit(ctx context.Context, trailer []trailing) error {
	if t.failed != nil && t.tx == nil {
		if errors.Is(t.failed, pgx.ErrTxClosed) {
			return pgx.ErrTxClosed
		}
		return t.failed
	}
	if t.tx == nil && len(trailer) == 0 {
		t.failed = pgx.ErrTxClosed
		t.releaseConn()
		return nil
	}
	var b *pgx.Batch
	lead := 0
	if t.tx == nil {
		b, lead = t.beginBatch(), 2
	} else {
		b = &pgx.Batch{}
	}
	for _, s := range trailer {
		b.Queue(s.sql, s.args...)
	}
	b.Queue("COMMIT")
	return t.sendCommit(ctx, b, lead > 0, func(br pgx.BatchResults) error {
		for range trailer {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	})
}

// sendCommit sends b, which ends in COMMIT (with BEGIN and the org setting in front when
// begin), reads the results of the statements before COMMIT with read, requires COMMIT's
// own, and ends the transaction either way: committed, or rolled back if the server still
// has it open; the connection goes back to the pool.
func (t *orgTx) sendCommit(ctx context.Context, b *pgx.Batch, begin bool, read func(pgx.BatchResults) error) error {
	var br pgx.BatchResults
	if begin {
		// A connection first: failing to get one sent nothing.
		if err := t.acquire(ctx); err != nil {
			_ = t.Rollback(context.WithoutCancel(ctx))
			return err
		}
		var err error
		if br, err = t.send(ctx, b); err != nil {
			_ = t.Rollback(context.WithoutCancel(ctx))
			if lostInFlight(err) { // the COMMIT at the batch's end may have run
				return &CommitUnknownError{Err: err}
			}
			return err
		}
	} else {
		// The transaction is open: send on its connection directly (the pgx.Tx would refuse
		// a batch that ends it, and would spend a round trip of its own on COMMIT).
		br = t.conn.Conn().SendBatch(ctx, b)
	}
	err := read(br)
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The connection failed with the COMMIT sent: whether it committed is unknown.
		if lostInFlight(err) {
			_ = t.Rollback(context.WithoutCancel(ctx)) // ends nothing on a closed connection
			return &CommitUnknownError{Err: Interpret(fmt.Errorf("committing: %w", err))}
		}
		// Otherwise the server refused: the transaction did not commit. End it (if the
		// server still has it open) and hand the connection back.
		if t.conn != nil && t.conn.Conn().PgConn().TxStatus() != 'I' {
			_ = t.Rollback(context.WithoutCancel(ctx))
		} else {
			t.tx, t.failed = nil, pgx.ErrTxClosed
			t.releaseConn()
		}
		return Interpret(fmt.Errorf("committing: %w", err))
	}
	// Committed on the server. The pgx transaction object never saw its COMMIT, so it is
	// dropped rather than ended; the connection is idle again and goes back to the pool.
	t.tx, t.failed = nil, pgx.ErrTxClosed
	t.releaseConn()
	return nil
}

// batchRows closes the batch when its rows are closed.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
	// closed1, when set, runs once the batch is closed (a one-trip statement's end).
	closed1 func()
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
	if r.closed1 != nil {
		r.closed1()
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// oneRow is pgx's QueryRow semantics over any Rows.
type oneRow struct {
	rows pgx.Rows
	err  error
}

func (r *oneRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRows is a closed Rows holding err (pgx's own, so it has every method of the interface).
func errRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}
