package pg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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
	pool  *pgxpool.Pool
	org   string
	mu    sync.Mutex
	tx    pgx.Tx
	hooks []func()
	done  bool
}

// NewSession returns a session for org; nothing happens until Tx is called.
func NewSession(pool *pgxpool.Pool, org string) *Session { return &Session{pool: pool, org: org} }

// Org is the org every statement of the session runs for.
func (s *Session) Org() string { return s.org }

// Tx returns the session's transaction, beginning it (and setting app.org_id) on first use.
func (s *Session) Tx(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, errors.New("pg: session already finished")
	}
	if s.tx != nil {
		return s.tx, nil
	}
	tx, err := beginOrg(ctx, s.pool, s.org)
	if err != nil {
		return nil, err
	}
	s.tx = tx
	return tx, nil
}

// Started reports whether a transaction was begun.
func (s *Session) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tx != nil
}

// AfterCommit registers f to run once the session has committed (immediately at Commit
// when no transaction was begun). Use it for side effects in other stores that must not
// happen unless Postgres kept the write, such as cache invalidation.
func (s *Session) AfterCommit(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

// Commit commits the transaction, if any, then runs the AfterCommit hooks.
func (s *Session) Commit(ctx context.Context) error {
	s.mu.Lock()
	tx, hooks := s.tx, s.hooks
	s.done, s.hooks = true, nil
	s.mu.Unlock()
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return Interpret(fmt.Errorf("committing: %w", err))
		}
	}
	for _, h := range hooks {
		h()
	}
	return nil
}

// Rollback abandons the transaction, if any; hooks are dropped.
func (s *Session) Rollback(ctx context.Context) {
	s.mu.Lock()
	tx := s.tx
	s.done, s.hooks = true, nil
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

// TxFrom returns the transaction of the session in ctx, beginning it if needed.
func TxFrom(ctx context.Context) (pgx.Tx, error) {
	s := SessionFrom(ctx)
	if s == nil {
		return nil, errors.New("pg: no session in context (route not behind the session middleware)")
	}
	return s.Tx(ctx)
}

func beginOrg(ctx context.Context, pool *pgxpool.Pool, org string) (pgx.Tx, error) {
	if org == "" {
		return nil, errors.New("pg: empty org")
	}
	// BEGIN and the org setting travel in one round trip (a simple-protocol multi-statement;
	// org ids are validated to [A-Za-z0-9._:-], and quoted regardless).
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{
		BeginQuery: "BEGIN; SELECT set_config('app.org_id', '" + strings.ReplaceAll(org, "'", "''") + "', true)",
	})
	if err != nil {
		return nil, Interpret(fmt.Errorf("beginning transaction: %w", err))
	}
	return tx, nil
}

// InOrgTx runs fn in its own transaction for org and commits when fn returns nil. Workers
// and tools use it; requests use their Session.
func InOrgTx(ctx context.Context, pool *pgxpool.Pool, org string, fn func(pgx.Tx) error) error {
	tx, err := beginOrg(ctx, pool, org)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return Interpret(fmt.Errorf("committing: %w", err))
	}
	return nil
}

// DBTX is what store functions take: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
