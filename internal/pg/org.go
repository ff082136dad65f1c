package pg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SetOrgSQL binds the current transaction to the org in $1: row-level security admits only
// that org's rows until the transaction ends (set_config's is_local). Every transaction on
// tenant tables starts with it; use QueueSetOrg or SetOrg rather than writing it out.
const SetOrgSQL = "SELECT set_config('app.org_id', $1, true)"

// QueueSetOrg queues SetOrgSQL for org on b, so the binding rides in b's round trip.
func QueueSetOrg(b *pgx.Batch, org string) *pgx.QueuedQuery { return b.Queue(SetOrgSQL, org) }

// SetOrg binds db's current transaction to org (one round trip).
func SetOrg(ctx context.Context, db DBTX, org string) error {
	_, err := db.Exec(ctx, SetOrgSQL, org)
	return err
}

// BeginReadSnapshot begins a read-only REPEATABLE READ transaction bound to org with no
// statement timeout, in one round trip: a long read (a GDPR export streamed for as long as
// its client reads) sees one snapshot and is not cut off by the pool's statement_timeout.
// Commit or Rollback returns the connection to the pool.
func BeginReadSnapshot(ctx context.Context, pool *pgxpool.Pool, org string) (pgx.Tx, error) {
	if org == "" {
		return nil, errors.New("pg: empty org")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, Interpret(err)
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	b.Queue("SET LOCAL statement_timeout = 0")
	QueueSetOrg(b, org)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // when BEGIN went through
		conn.Release()                              // a connection left in a transaction is closed, not reused
		return nil, Interpret(err)
	}
	return &pooledTx{Tx: tx, conn: conn}, nil
}

// pooledTx is a transaction on an acquired connection, released when it ends.
type pooledTx struct {
	pgx.Tx
	conn *pgxpool.Conn
}

func (t *pooledTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.Tx.Commit(ctx)
}

func (t *pooledTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.Tx.Rollback(ctx)
}

func (t *pooledTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}
