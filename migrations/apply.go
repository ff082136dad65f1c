package migrations

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/strata-mem/strata/internal/pg"
)

// RiverVersion names the River release whose migrations Apply runs (test templates are
// keyed on it).
const RiverVersion = "river-v0.51.2"

// Apply brings the database at dsn up to date: Strata's files, then River's job-queue
// tables, all under one advisory lock. It is what `server migrate` and server start run.
func Apply(ctx context.Context, dsn string, log *slog.Logger) (int, error) {
	return ApplyWith(ctx, dsn, log, Options{Partitions: DefaultPartitions})
}

// DefaultPartitions is the hash-partition count of the big tables when nothing else is
// asked for (STRATA_PARTITIONS's default).
const DefaultPartitions = 16

// Options shape a migration run.
type Options struct {
	// Partitions is the hash-partition count migration 0033 gives episodic_events,
	// memories and audit_log when it runs (0..1024; 0 leaves them unpartitioned). It is
	// read only by that file, once: later runs do not change the layout.
	Partitions int
}

// ApplyWith is Apply with options.
func ApplyWith(ctx context.Context, dsn string, log *slog.Logger, o Options) (int, error) {
	if o.Partitions < 0 || o.Partitions > 1024 {
		return 0, fmt.Errorf("partition count %d is outside 0..1024", o.Partitions)
	}
	opts := pg.MigrateOptions{Settings: map[string]string{"strata.partitions": strconv.Itoa(o.Partitions)}}
	return pg.MigrateWith(ctx, dsn, FS, log, opts, func(ctx context.Context) error { return migrateRiver(ctx, dsn) })
}

// migrateRiver runs River's own migrations (each in its own transaction: some add enum
// values that later ones use) as the owner, not the request role.
func migrateRiver(ctx context.Context, dsn string) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting for River migrations: %w", err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("preparing River migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("applying River migrations: %w", err)
	}
	return nil
}
