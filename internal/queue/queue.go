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
)

// Client is River's client over pgx transactions.
type Client = river.Client[pgx.Tx]

// Config is what the app passes in.
type Config struct {
	Workers      *river.Workers
	PeriodicJobs []*river.PeriodicJob
	MaxWorkers   int           // default 8
	JobTimeout   time.Duration // default 5 minutes
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
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:      cfg.Workers,
		PeriodicJobs: cfg.PeriodicJobs,
		JobTimeout:   cfg.JobTimeout,
		Logger:       log.With("component", "river"),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the job queue client: %w", err)
	}
	return c, nil
}

// Stop stops c, letting running jobs finish until ctx ends.
func Stop(ctx context.Context, c *Client) error {
	if err := c.Stop(ctx); err != nil {
		return c.StopAndCancel(context.WithoutCancel(ctx))
	}
	return nil
}
