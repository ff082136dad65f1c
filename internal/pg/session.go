package pg

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Session is one request's unit of work on Postgres: a single transaction, begun on first
// use, bound to the request's org through the transaction-local app.org_id setting that
// row-level security reads. The HTTP layer commits it only when the request succeeded and
// before the response leaves the server, so an acknowledged write is a committed write and
// a failed request writes nothing. A request that never touches Postgres never begins one.
type Session struct {
	pool    *pgxpool.Pool
	replica *pgxpool.Pool // where Tx begins for a read-only operation (ReadFrom); nil: the primary
	org     string
	mu      sync.Mutex
	tx      *orgTx
	hooks   []func()
	lead    []trailing
	trailer []trailing
	done    bool
	// noFlush: the operation only read, so its commit carries the read's bookkeeping alone
	// and does not wait for the WAL flush (NoFlushCommit).
	noFlush bool
	// oneTrip: each statement is its own transaction, ended in its round trip (ReadInOneTrip).
	oneTrip bool
	// inTrip: CommitInTrip committed the session with its write (committrip.go).
	inTrip bool
}

// NewSession returns a session for org; nothing happens until Tx is called.
func NewSession(pool *pgxpool.Pool, org string) *Session { return &Session{pool: pool, org: org} }

// Org is the org every statement of the session runs for.
func (s *Session) Org() string { return s.org }

// Tx returns the session's transaction. It costs no round trip: BEGIN and the org setting
// travel with its first statement (see orgTx).
func (s *Session) Tx(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, errors.New("pg: session already finished")
	}
	if s.tx != nil {
		return s.tx, nil
	}
	tx, err := s.newTx(cmp.Or(s.replica, s.pool))
	if err != nil {
		return nil, err
	}
	s.tx = tx
	return tx, nil
}

// newTx is the session's transaction on pool, carrying the AtBegin statements.
func (s *Session) newTx(pool *pgxpool.Pool) (*orgTx, error) {
	tx, err := newOrgTx(pool, s.org)
	if err != nil {
		return nil, err
	}
	tx.lead, tx.oneTrip = s.lead, s.oneTrip
	return tx, nil
}

// ReadInOneTrip makes every statement of the session a transaction of its own that begins,
// sets the org and commits in the statement's one round trip, so a read has nothing left to
// roll back after its response (one round trip fewer per request, off its path, and the
// connection back in the pool as soon as the rows are read). For operations that only read
// and need no two statements in one transaction (no snapshot shared between them, no SET
// LOCAL for a later statement); AtCommit statements must not be queued. It must be called
// before the first statement.
func (s *Session) ReadInOneTrip() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tx != nil && s.tx.begun() {
		return
	}
	s.oneTrip = true
	if s.tx != nil {
		s.tx.oneTrip = true
	}
}

// Statement is a statement and its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// AtBegin queues statements that run right after BEGIN and the org setting, in front of the
// transaction's first statement and in its round trip (the Idempotency-Key claim of a write
// that folds it into its own first round trip). If one fails, nothing behind it runs: the
// first statement answers that error and BeginErr reports it. It must be called before any
// statement ran; it reports false otherwise (the statements are then not queued).
func (s *Session) AtBegin(stmts ...Statement) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.replica != nil || (s.tx != nil && s.tx.begun()) {
		return false
	}
	for _, st := range stmts {
		s.lead = append(s.lead, trailing{sql: st.SQL, args: st.Args})
	}
	if s.tx != nil {
		s.tx.lead = s.lead
	}
	return true
}

// BeginErr is the error of the AtBegin statement that failed, or nil.
func (s *Session) BeginErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tx == nil {
		return nil
	}
	return s.tx.leadErr
}

// ReadFrom makes the session's transaction begin on replica, a read replica's pool, and
// reports whether it will: only before the transaction began (an Idempotency-Key claim
// or an earlier statement keeps it on the primary). The caller promises the operation only
// reads through Tx; AtCommit statements still commit on the primary.
func (s *Session) ReadFrom(replica *pgxpool.Pool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if replica == nil || s.tx != nil || s.done || len(s.lead) > 0 {
		return false
	}
	s.replica = replica
	return true
}

// OnReplica reports whether the session's reads go to a read replica.
func (s *Session) OnReplica() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replica != nil
}

// BackToPrimary abandons a replica's transaction (the replica failed mid-request) so that
// the next Tx begins on the primary; the operation is then run again from the start.
func (s *Session) BackToPrimary(ctx context.Context) {
	s.mu.Lock()
	tx := s.tx
	s.tx, s.replica = nil, nil
	s.mu.Unlock()
	if tx != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
}

// Reserve takes the session's connection from the pool now if one is free within wait, and
// reports whether it did. A request that would hold a second connection (a side query
// running beside its own transaction) reserves it this way and otherwise does the work on
// its own transaction: waiting for a second connection while holding one is how a small
// pool deadlocks under load (every connection held by a request waiting for another).
func (s *Session) Reserve(ctx context.Context, wait time.Duration) bool {
	tx, err := s.Tx(ctx)
	if err != nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return tx.(*orgTx).acquire(actx) == nil
}

// Started reports whether a statement ran (and so a transaction was begun).
func (s *Session) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tx != nil && s.tx.begun()
}

// AfterCommit registers f to run once the session has committed (immediately at Commit
// when no transaction was begun). Use it for side effects in other stores that must not
// happen unless Postgres kept the write, such as cache invalidation.
func (s *Session) AfterCommit(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

// AtCommit queues a statement that runs at Commit, after everything else and in the same
// round trip as COMMIT (the audit row, the idempotency record). The client cannot look at
// its result before COMMIT runs, so a statement that must stop the commit has to fail on
// the server (see strata_expect_rows); when it does, nothing commits and Commit returns
// its error.
func (s *Session) AtCommit(sql string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = append(s.trailer, trailing{sql: sql, args: args})
}

// NoFlushCommit marks the session's operation as a read whose commit writes only the read's
// own bookkeeping — its audit row, the log of the memories it served, its access counts, an
// Idempotency-Key record — and so need not wait for the WAL flush: Commit then runs it
// with synchronous_commit off for this transaction alone (a set_config in the COMMIT's
// round trip, no extra one). Atomicity and isolation are unchanged; the bookkeeping is
// durable once the WAL writer flushes (wal_writer_delay, 200 ms by default), or at once
// when any later synchronous commit on the server flushes the WAL past it; only a crash of
// Postgres itself inside that window can lose it. A read that answers the caller's own
// question never needs more, and the caller saves a disk flush (docs/semantic.md, "Reads
// commit without a flush"). Operations that write anything else must not call it.
func (s *Session) NoFlushCommit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noFlush = true
}

// noFlushSQL turns off the WAL-flush wait for the current transaction only.
const noFlushSQL = "SELECT set_config('synchronous_commit', 'off', true)"

// Commit sends the AtCommit statements and COMMIT in one round trip (beginning the
// transaction in the same one if nothing ran yet), then runs the AfterCommit hooks. An
// error means nothing committed, except a CommitUnknownError: the connection failed after
// the COMMIT was sent, and the transaction may have committed (the hooks do not run).
func (s *Session) Commit(ctx context.Context) error {
	s.mu.Lock()
	tx, hooks, trailer, onReplica := s.tx, s.hooks, s.trailer, s.replica != nil
	if s.noFlush && len(trailer) > 0 {
		trailer = append([]trailing{{sql: noFlushSQL}}, trailer...)
	}
	s.done, s.hooks, s.trailer = true, nil, nil
	s.mu.Unlock()
	if onReplica && tx != nil {
		// The replica's transaction only read; the queued statements write on the primary.
		if err := tx.commit(ctx, nil); err != nil {
			return err
		}
		tx = nil
	}
	if len(trailer) > 0 && tx == nil {
		var err error
		if tx, err = s.newTx(s.pool); err != nil {
			return err
		}
		s.mu.Lock()
		s.tx = tx // so that BeginErr sees a failed AtBegin statement
		s.mu.Unlock()
	}
	if tx != nil {
		if err := tx.commit(ctx, trailer); err != nil {
			return err
		}
	}
	for _, h := range hooks {
		h()
	}
	return nil
}

// Rollback abandons the transaction, if any; hooks and queued statements are dropped.
func (s *Session) Rollback(ctx context.Context) {
	s.mu.Lock()
	tx := s.tx
	s.done, s.hooks, s.trailer = true, nil, nil
	s.mu.Unlock()
	if tx != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
}

type sessionKey struct{}

// WithSession attaches s to ctx.
func WithSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// SessionFrom returns the request's session, or nil.
func SessionFrom(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// InOrgTx runs fn in its own transaction for org and commits when fn returns nil. Workers
// and tools use it; requests use their Session. BEGIN and the org setting travel with fn's
// first statement, so a one-statement fn costs two round trips (statement, COMMIT).
func InOrgTx(ctx context.Context, pool *pgxpool.Pool, org string, fn func(pgx.Tx) error) error {
	tx, err := newOrgTx(pool, org)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// DBTX is what store functions take: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
