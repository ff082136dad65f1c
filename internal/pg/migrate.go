package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationLockKey is the advisory lock every migrating process takes first.
const migrationLockKey = 0x5374726174614d /* "StrataM" */

// Migration is one numbered SQL file.
type Migration struct {
	File     string
	Version  int
	Name     string
	SQL      string
	Checksum string
}

// LoadMigrations reads NNNN_name.sql files from fsys in version order.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	seen := map[int]string{}
	for _, n := range names {
		num, rest, ok := strings.Cut(n, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", n)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", prev, n, v)
		}
		seen[v] = n
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{File: n, Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies the pending migrations as the URL's own user (the schema owner, not the
// request role). It holds a session advisory lock for the whole run, so replicas starting
// at once apply each file exactly once; each file runs in its own transaction together with
// its bookkeeping row, so a failing file leaves the schema as it was before that file.
// An already-applied file whose content changed is an error: migrations are append-only.
//
// Each hook runs afterwards, still under the lock (River's migrations join ours this way).
func Migrate(ctx context.Context, dsn string, fsys fs.FS, log *slog.Logger, hooks ...func(context.Context) error) (applied int, err error) {
	return MigrateWith(ctx, dsn, fsys, log, MigrateOptions{}, hooks...)
}

// MigrateOptions shape a migration run.
type MigrateOptions struct {
	// Settings are custom settings (names with a dot, such as strata.partitions) set with
	// set_config(name, value, true) in every file's transaction, for files to read with
	// current_setting(name, true).
	Settings map[string]string
}

// MigrateWith is Migrate with options.
func MigrateWith(ctx context.Context, dsn string, fsys fs.FS, log *slog.Logger, opts MigrateOptions, hooks ...func(context.Context) error) (applied int, err error) {
	migs, err := LoadMigrations(fsys)
	if err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("connecting to Postgres to migrate (check STRATA_DATABASE_URL): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockKey)); err != nil {
		return 0, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)) //nolint:errcheck

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version int PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("creating schema_migrations: %w", err)
	}
	done := map[int]string{}
	rows, err := conn.Query(ctx, "SELECT version, checksum FROM schema_migrations")
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var v int
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			return 0, err
		}
		done[v] = sum
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	names := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, m := range migs {
		if sum, ok := done[m.Version]; ok {
			if sum != m.Checksum {
				return applied, fmt.Errorf("migration %04d_%s was changed after it was applied: add a new migration instead", m.Version, m.Name)
			}
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, k := range names {
				if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, opts.Settings[k]); err != nil {
					return fmt.Errorf("setting %s: %w", k, err)
				}
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", m.Version, m.Name, m.Checksum)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migration %04d_%s failed (nothing of it was applied): %w", m.Version, m.Name, err)
		}
		applied++
		if log != nil {
			log.Info("migration applied", "version", m.Version, "name", m.Name)
		}
	}
	for _, h := range hooks {
		if err := h(ctx); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// SchemaVersion returns the newest applied migration version (0 when none).
func SchemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}
