package pg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
)

// AppRole is the role request connections assume; migrations create it.
const AppRole = "strata_app"

// LockTimeout is every pooled connection's lock_timeout: a statement waiting longer for a
// row or table lock fails (55P03) instead of holding its request.
const LockTimeout = 10 * time.Second

// PoolOptions tunes the pool; zero values take defaults.
type PoolOptions struct {
	MaxConns         int32
	StatementTimeout time.Duration // per statement, server side (default 10s)
	// ConnectTimeout bounds opening a connection, startup and SET ROLE included (default
	// 5s; the server passes STRATA_STORE_TIMEOUT). It also sets the TCP user timeout and
	// keepalive of the pool's connections: a connection whose peer stops acknowledging
	// (a black hole) fails within about that long even for work that carries no call
	// bound (WithCallTimeout), while a long statement on a live server is not cut.
	ConnectTimeout  time.Duration
	ApplicationName string // default "strata"
	// Tracer, when set, sees every query the pool's connections run (tests record the
	// statements the stores send with it).
	Tracer pgx.QueryTracer
}

// NewPool opens a pool whose connections SET ROLE strata_app, know pgvector's types and
// send uuid.UUID parameters in binary (EncodeUUIDsInBinary).
// It does not wait for the database: Ping or readiness tells whether it answers.
func NewPool(ctx context.Context, dsn string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("STRATA_DATABASE_URL: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	} else if cfg.MaxConns < 16 {
		cfg.MaxConns = 16
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = 10 * time.Second
	}
	cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	cfg.ConnConfig.DialFunc = dialFunc(o.ConnectTimeout)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(o.StatementTimeout.Milliseconds())
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(LockTimeout.Milliseconds())
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	cfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(o.ApplicationName, "strata")
	// The server's side of the same: a backend whose client vanished (a black hole between
	// them) ends within about ConnectTimeout instead of holding its transaction's locks —
	// an Idempotency-Key claim among them — until idle_in_transaction_session_timeout.
	secs := max(int(o.ConnectTimeout.Seconds()), 1)
	cfg.ConnConfig.RuntimeParams["tcp_user_timeout"] = fmt.Sprint(max(o.ConnectTimeout.Milliseconds(), 1000))
	cfg.ConnConfig.RuntimeParams["tcp_keepalives_idle"] = fmt.Sprint(secs)
	cfg.ConnConfig.RuntimeParams["tcp_keepalives_interval"] = fmt.Sprint(max(secs/3, 1))
	cfg.ConnConfig.RuntimeParams["tcp_keepalives_count"] = "3"
	cfg.HealthCheckPeriod = 5 * time.Second
	// The ping Acquire sends a connection idle for over a second is bounded too: an
	// acquirer whose context has no deadline (a worker, a shutdown) would otherwise wait
	// on a hung Postgres forever, since a black hole that still acknowledges bytes trips
	// neither keepalive nor the TCP user timeout, and Close waits for it.
	cfg.PingTimeout = o.ConnectTimeout
	// Every call of a request (a context marked WithCallTimeout) gets its deadline here;
	// o.Tracer sees the calls behind it.
	cfg.ConnConfig.Tracer = callBound{inner: o.Tracer}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "SET ROLE "+AppRole); err != nil {
			return fmt.Errorf("SET ROLE %s (run migrations first: server migrate): %w", AppRole, err)
		}
		if err := pgxvec.RegisterTypes(ctx, c); err != nil {
			return fmt.Errorf("registering pgvector types (is the vector extension installed?): %w", err)
		}
		EncodeUUIDsInBinary(c.TypeMap())
		return nil
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// EncodeUUIDsInBinary makes m send uuid.UUID parameters, alone or in slices, as the 16
// bytes they are. uuid.UUID is a database/sql driver.Valuer, and pgx encodes a Valuer
// through its Value: every id formatted as text, and an id array element by element that
// way. Under the load test that was 4-5 % of the server's CPU (the retrieval log's, the
// search's and the access flush's id arrays).
func EncodeUUIDsInBinary(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUID}, m.TryWrapEncodePlanFuncs...)
}

func tryWrapUUID(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, [16]byte(u), true
	}
	return nil, nil, false
}

// uuidEncodePlan hands a uuid.UUID to the plan for [16]byte (pgx's uuid codec).
type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode([16]byte(value.(uuid.UUID)), buf)
}

// EnsureDatabase creates the database named in dsn when it does not exist, connecting to
// the server's "postgres" database to do so. It is what lets `make run` start on a fresh
// Postgres with nothing but the URL.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("STRATA_DATABASE_URL: %w", err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return c.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connecting to Postgres (is it running? check STRATA_DATABASE_URL): %w", err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	ac, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connecting to the postgres database to create %q: %w", cfg.Database, err)
	}
	defer ac.Close(ctx)
	if _, err := ac.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()); err != nil {
		// A sibling replica created it concurrently: 42P04 (duplicate_database) when its
		// CREATE committed before ours checked, 23505 on pg_database_datname_index when both
		// passed the check. Either way the database exists once the winner commits: connect
		// to be sure (a real failure of ours still says why).
		var e *pgconn.PgError
		if errors.As(err, &e) && (e.Code == "42P04" || e.Code == "23505") {
			c, cerr := pgx.ConnectConfig(ctx, cfg)
			if cerr != nil {
				return fmt.Errorf("database %q was created concurrently but does not answer: %w", cfg.Database, cerr)
			}
			return c.Close(ctx)
		}
		return fmt.Errorf("creating database %q: %w", cfg.Database, err)
	}
	return nil
}

// RedactURL hides the password in a connection URL for logs.
func RedactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
