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
	"time"

	"github.com/jackc/pgx/v5"
)

// migrationLockKey is the advisory lock every migrating process takes first.
const migrationLockKey = 0x5374726174614d /* "StrataM" */

// lockPoll is how often a migrator waiting for another one tries the lock again.
const lockPoll = 200 * time.Millisecond

// Phase is what a migration does to the previous release's code (docs/operations.md).
type Phase string

const (
	// PhaseExpand keeps the previous release working: it adds, it does not remove, rename
	// or tighten what that release reads or writes. Files without a phase header (those
	// written before the header existed) count as expand.
	PhaseExpand Phase = "expand"
	// PhaseContract removes what only an older release used. A build older than the
	// contract's Requires refuses to start on a schema it has been applied to.
	PhaseContract Phase = "contract"
)

// Migration is one numbered SQL file. Its leading comment lines may carry directives:
//
//	-- strata:phase expand
//	-- strata:phase contract            (requires a build with this migration)
//	-- strata:phase contract requires 0049
//	-- strata:no-transaction
//
// A no-transaction file runs statement by statement outside a transaction (CREATE INDEX
// CONCURRENTLY, batched backfills that commit per batch); its statements must be safe to
// run again, since a failure leaves the ones before it applied.
type Migration struct {
	File     string
	Version  int
	Name     string
	SQL      string
	Checksum string
	// Phase is the declared phase; empty when the file has no header (it counts as expand).
	Phase Phase
	// Requires is, for a contract, the oldest build (named by its newest migration) that
	// may run on a schema this file was applied to; 0 for an expand.
	Requires int
	// NoTransaction runs the file's statements one by one, each committing on its own.
	NoTransaction bool
}

// EffectivePhase is the phase the migrator records: the declared one, else expand.
func (m Migration) EffectivePhase() Phase {
	if m.Phase == "" {
		return PhaseExpand
	}
	return m.Phase
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
		m := Migration{File: n, Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(b), Checksum: hex.EncodeToString(sum[:])}
		if err := parseDirectives(&m); err != nil {
			return nil, fmt.Errorf("migration %q: %w", n, err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// parseDirectives reads the strata: directives of the file's leading comment lines.
func parseDirectives(m *Migration) error {
	for _, line := range strings.Split(m.SQL, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "--") {
			break
		}
		d, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(line, "--")), "strata:")
		if !ok {
			continue
		}
		f := strings.Fields(d)
		switch {
		case len(f) == 1 && f[0] == "no-transaction":
			m.NoTransaction = true
		case len(f) == 2 && f[0] == "phase" && f[1] == string(PhaseExpand):
			m.Phase = PhaseExpand
		case (len(f) == 2 || len(f) == 4 && f[2] == "requires") && f[0] == "phase" && f[1] == string(PhaseContract):
			m.Phase, m.Requires = PhaseContract, m.Version
			if len(f) == 4 {
				r, err := strconv.Atoi(f[3])
				if err != nil || r < 1 || r > m.Version {
					return fmt.Errorf("strata:phase contract requires %q: want a migration number from 1 to the file's own %d", f[3], m.Version)
				}
				m.Requires = r
			}
		default:
			return fmt.Errorf("unknown directive %q (want strata:phase expand, strata:phase contract [requires NNNN] or strata:no-transaction)", line)
		}
	}
	return nil
}

// Migrate applies the pending migrations as the URL's own user (the schema owner, not the
// request role). It holds a session advisory lock for the whole run, so replicas starting
// at once apply each file exactly once; each file runs in its own transaction together with
// its bookkeeping row, so a failing file leaves the schema as it was before that file
// (a no-transaction file runs statement by statement instead). An already-applied file whose
// content changed is an error: migrations are append-only.
//
// Before applying anything it checks that this build may run on the schema: a contract
// migration this build does not know, requiring a newer build, stops it with a
// *ContractedError; a schema ahead by expand migrations only is logged and accepted.
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

	if err := migrationLock(ctx, conn, log); err != nil {
		return 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)) //nolint:errcheck

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version int PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("creating schema_migrations: %w", err)
	}
	st, done, err := readStatus(ctx, conn, migs)
	if err != nil {
		return 0, err
	}
	if err := st.Check(); err != nil {
		return 0, err
	}
	st.logAhead(log)
	if err := st.checkSkip(); err != nil {
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
		if m.NoTransaction {
			err = applyOutsideTransaction(ctx, conn, m, names, opts.Settings)
		} else {
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				for _, k := range names {
					if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, opts.Settings[k]); err != nil {
						return fmt.Errorf("setting %s: %w", k, err)
					}
				}
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return err
				}
				return recordMigration(ctx, tx, m)
			})
			if err != nil {
				err = fmt.Errorf("migration %04d_%s failed (nothing of it was applied): %w", m.Version, m.Name, err)
			}
		}
		if err != nil {
			return applied, err
		}
		applied++
		if log != nil {
			log.Info("migration applied", "version", m.Version, "name", m.Name, "phase", string(m.EffectivePhase()))
		}
	}
	for _, h := range hooks {
		if err := h(ctx); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// migrationLock takes the session advisory lock by polling pg_try_advisory_lock. A waiter
// blocked inside pg_advisory_lock would hold a snapshot the whole time, and CREATE INDEX
// CONCURRENTLY in the holder's no-transaction file waits for every older snapshot: the two
// would deadlock. Between tries a waiter holds nothing.
func migrationLock(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	logged := false
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(migrationLockKey)).Scan(&got); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		if got {
			return nil
		}
		if !logged && log != nil {
			log.Info("another process is migrating this database; waiting for it")
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the migration lock another process holds: %w", ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// applyOutsideTransaction runs a no-transaction file statement by statement (each commits
// on its own; a DO block may COMMIT between batches), then records it.
func applyOutsideTransaction(ctx context.Context, conn *pgx.Conn, m Migration, names []string, settings map[string]string) error {
	for _, k := range names {
		if _, err := conn.Exec(ctx, "SELECT set_config($1, $2, false)", k, settings[k]); err != nil {
			return fmt.Errorf("migration %04d_%s: setting %s: %w", m.Version, m.Name, k, err)
		}
	}
	defer func() {
		for _, k := range names {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT set_config($1, '', false)", k)
		}
	}()
	for i, s := range SplitStatements(m.SQL) {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("migration %04d_%s failed at statement %d (it runs outside a transaction: the statements before it stay applied, and the next run starts it again from the top): %w",
				m.Version, m.Name, i+1, err)
		}
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return recordMigration(ctx, tx, m) })
}

// recordMigration writes the bookkeeping row; once migration 0048 has added the columns,
// with the phase and the build the file requires, which an older build reads at start.
func recordMigration(ctx context.Context, tx pgx.Tx, m Migration) error {
	compat, err := hasCompatColumns(ctx, tx)
	if err != nil {
		return err
	}
	if !compat {
		_, err = tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", m.Version, m.Name, m.Checksum)
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum, phase, requires_build) VALUES ($1, $2, $3, $4, $5)",
		m.Version, m.Name, m.Checksum, string(m.EffectivePhase()), m.Requires)
	return err
}

type queryer interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

func hasCompatColumns(ctx context.Context, q queryer) (bool, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM pg_attribute
		WHERE attrelid = to_regclass('schema_migrations') AND attname IN ('phase', 'requires_build') AND NOT attisdropped`).Scan(&n)
	return n == 2, err
}

// AppliedMigration is one row of schema_migrations.
type AppliedMigration struct {
	Version   int
	Name      string
	Phase     Phase
	Requires  int
	AppliedAt time.Time
}

// SchemaStatus compares a build's migrations with a database's.
type SchemaStatus struct {
	// Build is the newest migration this build embeds; Schema the newest applied one.
	Build, Schema int
	// Pending are this build's migrations not applied yet.
	Pending []Migration
	// Ahead are applied migrations this build does not have (a newer release's).
	Ahead []AppliedMigration
}

// ContractedError is the refusal of a build older than a contract migration applied to
// its database.
type ContractedError struct {
	// Version is the contract migration, Requires the oldest build it lets run, Build the
	// newest migration of the refused build.
	Version, Requires, Build int
}

func (e *ContractedError) Error() string {
	return fmt.Sprintf("this database was contracted by migration %04d (requires Strata built with migration >= %04d); "+
		"deploy that release or newer (this build's newest migration is %04d)", e.Version, e.Requires, e.Build)
}

// Check returns a *ContractedError when a migration this build does not have requires a
// newer build; nil when the schema is behind, level, or ahead by expand migrations only.
func (s SchemaStatus) Check() error {
	var worst *AppliedMigration
	for i, a := range s.Ahead {
		if a.Requires > s.Build && (worst == nil || a.Requires > worst.Requires || a.Requires == worst.Requires && a.Version > worst.Version) {
			worst = &s.Ahead[i]
		}
	}
	if worst == nil {
		return nil
	}
	return &ContractedError{Version: worst.Version, Requires: worst.Requires, Build: s.Build}
}

// checkSkip refuses a run that would apply a contract naming an older build (requires
// NNNN below its own number) to a database that build never migrated: the servers still
// running are then older than NNNN and use what the contract removes (a release was
// skipped). A fresh database (nothing applied) has no such servers.
func (s SchemaStatus) checkSkip() error {
	for _, m := range s.Pending {
		if m.Phase == PhaseContract && m.Requires < m.Version && s.Schema > 0 && s.Schema < m.Requires {
			return fmt.Errorf("migration %04d_%s contracts what builds before %04d still use, and this database is at %04d: "+
				"deploy the release with migration %04d first and replace every older server with it, then this one (nothing was applied)",
				m.Version, m.Name, m.Requires, s.Schema, m.Requires)
		}
	}
	return nil
}

func (s SchemaStatus) logAhead(log *slog.Logger) {
	if log == nil || len(s.Ahead) == 0 {
		return
	}
	log.Info("schema is ahead of this build by compatible migrations only",
		"compatible", len(s.Ahead), "build", s.Build, "schema", s.Schema)
}

// CheckSchema is the start-up gate of a server that does not migrate (STRATA_NO_MIGRATE):
// it reads the database's migrations and returns Check's verdict, logging at INFO when the
// schema is ahead by expand migrations only. It takes no lock and changes nothing.
func CheckSchema(ctx context.Context, dsn string, fsys fs.FS, log *slog.Logger) (SchemaStatus, error) {
	st, err := ReadSchemaStatus(ctx, dsn, fsys)
	if err != nil {
		return st, err
	}
	if err := st.Check(); err != nil {
		return st, err
	}
	st.logAhead(log)
	return st, nil
}

// ReadSchemaStatus compares fsys's migrations with those applied to the database at dsn
// (`server migrate --status`).
func ReadSchemaStatus(ctx context.Context, dsn string, fsys fs.FS) (SchemaStatus, error) {
	migs, err := LoadMigrations(fsys)
	if err != nil {
		return SchemaStatus{}, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return SchemaStatus{}, fmt.Errorf("connecting to Postgres to read the schema's migrations (check STRATA_DATABASE_URL): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, _, err := readStatus(ctx, conn, migs)
	return st, err
}

// readStatus reads schema_migrations (absent: nothing applied) and compares it with migs.
// done maps each applied version to its checksum.
func readStatus(ctx context.Context, conn *pgx.Conn, migs []Migration) (SchemaStatus, map[int]string, error) {
	var st SchemaStatus
	if len(migs) > 0 {
		st.Build = migs[len(migs)-1].Version
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return st, nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	done := map[int]string{}
	applied := map[int]AppliedMigration{}
	if exists {
		compat, err := hasCompatColumns(ctx, conn)
		if err != nil {
			return st, nil, fmt.Errorf("reading schema_migrations: %w", err)
		}
		q := "SELECT version, name, checksum, 'expand', 0, applied_at FROM schema_migrations ORDER BY version"
		if compat {
			q = "SELECT version, name, checksum, phase, requires_build, applied_at FROM schema_migrations ORDER BY version"
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return st, nil, fmt.Errorf("reading schema_migrations: %w", err)
		}
		for rows.Next() {
			var a AppliedMigration
			var sum, phase string
			if err := rows.Scan(&a.Version, &a.Name, &sum, &phase, &a.Requires, &a.AppliedAt); err != nil {
				return st, nil, err
			}
			a.Phase = Phase(phase)
			done[a.Version] = sum
			applied[a.Version] = a
			st.Schema = max(st.Schema, a.Version)
		}
		if err := rows.Err(); err != nil {
			return st, nil, fmt.Errorf("reading schema_migrations: %w", err)
		}
	}
	known := map[int]bool{}
	for _, m := range migs {
		known[m.Version] = true
		if _, ok := done[m.Version]; !ok {
			st.Pending = append(st.Pending, m)
		}
	}
	for v, a := range applied {
		if !known[v] {
			st.Ahead = append(st.Ahead, a)
		}
	}
	sort.Slice(st.Ahead, func(i, j int) bool { return st.Ahead[i].Version < st.Ahead[j].Version })
	return st, done, nil
}

// SchemaVersion returns the newest applied migration version (0 when none).
func SchemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}
