// Package queue runs Strata's background work on River, a job queue in the same Postgres:
// any number of replicas may run workers; unique jobs and leader-elected periodic jobs mean
// no work is done twice, and jobs inserted inside a request's transaction (InsertTx) exist
// exactly when the request's writes do. Tier packages define their workers; internal/app
// registers them here.
package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Client is River's client over pgx transactions.
type Client = river.Client[pgx.Tx]

// Config is what the app passes in.
type Config struct {
	Workers      *river.Workers
	PeriodicJobs []*river.PeriodicJob
	MaxWorkers   int           // default 8
	JobTimeout   time.Duration // default 5 minutes
	// RescueAfter is how long a job may stay running before River's rescuer takes it for
	// stuck (its process died, or a cut kept its completion from being written) and
	// retries it; it must exceed JobTimeout, and a worker with a longer timeout of its own
	// is left alone until that has passed. Default: River's (an hour past JobTimeout).
	RescueAfter time.Duration
	// LogLevel is the least severe record of River's own that is logged (default WARN:
	// River reports its producers' job counts at INFO every 5 s while jobs run, which
	// drowns the server's log). The server's logger still filters at its own level.
	LogLevel slog.Leveler
	// Queues are more queues beside the default one, by name, with their worker count
	// (webhooks: many concurrent deliveries that mostly wait on the network).
	Queues map[string]int
	// Middleware wraps inserts and work (tracing: telemetry.RiverMiddleware); nil: none.
	Middleware []rivertype.Middleware
}

// New makes a River client on pool (the server's pool: River's tables carry no tenant
// data and are not row-secured).
func New(pool *pgxpool.Pool, log *slog.Logger, cfg Config) (*Client, error) {
	if cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = 8
	}
	if cfg.JobTimeout == 0 {
		cfg.JobTimeout = 5 * time.Minute
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}}
	for name, n := range cfg.Queues {
		queues[name] = river.QueueConfig{MaxWorkers: n}
	}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: queues,
		// A producer fetches at most once per cooldown, as many jobs as it has free
		// workers: 100 ms (River's default) caps a queue at 10 × its workers jobs/s.
		FetchCooldown: 20 * time.Millisecond,
		Workers:       cfg.Workers,
		PeriodicJobs:  cfg.PeriodicJobs,
		JobTimeout:    cfg.JobTimeout,
		// Zero leaves River's default.
		RescueStuckJobsAfter: cfg.RescueAfter,
		Logger:               Logger(log, cfg.LogLevel).With("component", "river"),
		Middleware:           cfg.Middleware,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the job queue client: %w", err)
	}
	return c, nil
}

// Logger is log that drops records less severe than min (nil: WARN), for River.
func Logger(log *slog.Logger, min slog.Leveler) *slog.Logger {
	if min == nil {
		min = slog.LevelWarn
	}
	return slog.New(minLevel{Handler: log.Handler(), min: min})
}

// minLevel passes on only records at min or above.
type minLevel struct {
	slog.Handler
	min slog.Leveler
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min.Level() && h.Handler.Enabled(ctx, l)
}

func (h minLevel) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.min.Level() {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

// Stop stops c, letting running jobs finish until ctx ends.
func Stop(ctx context.Context, c *Client) error {
	if err := c.Stop(ctx); err != nil {
		return c.StopAndCancel(context.WithoutCancel(ctx))
	}
	return nil
}
