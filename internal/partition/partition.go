package partition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/progress"
)

// Tables are the tables the layout partitions, in the order they are moved.
var Tables = []string{"episodic_events", "memories", "audit_log"}

// lockKey is the session advisory lock one mover holds for its whole run.
const lockKey = 0x5374726174615050 /* "StrataPP" */

// ErrBusy is returned when another mover holds the lock.
var ErrBusy = errors.New("partition: another mover is running on this database")

// Options shape a move. The zero value moves every table to 16 partitions in batches of
// 5,000 rows, drops the old tables and draws no progress.
type Options struct {
	Partitions  int           // partition count of the new layout (1..1024; default 16)
	Batch       int           // rows copied per transaction (default 5000)
	KeepOld     bool          // keep each old table as <t>_unpartitioned_old
	LockTimeout time.Duration // the swap's lock_timeout (default 2 s)
	SwapTries   int           // swap attempts before giving up (default 30)
	Tables      []string      // default Tables
	Progress    io.Writer     // where the progress bar or lines go (nil: none)
	Log         *slog.Logger
	// OnBatch, when set, is called after each committed batch with the table and the
	// rows it has copied so far (tests interrupt a move from it).
	OnBatch func(table string, copied int64)
}

// TableReport says what happened to one table.
type TableReport struct {
	Table      string
	Partitions int
	Copied     int64 // rows copied by the batches (of all runs)
	Already    bool  // the table was partitioned before this run
	SwapWait   time.Duration
}

// Move brings every table of o.Tables to the partitioned layout on the database at dsn.
// It is safe to rerun after any interruption; a table already partitioned is skipped.
func Move(ctx context.Context, dsn string, o Options) ([]TableReport, error) {
	if o.Partitions == 0 {
		o.Partitions = 16
	}
	if o.Partitions < 1 || o.Partitions > 1024 {
		return nil, fmt.Errorf("partition: the partition count must be 1..1024, got %d", o.Partitions)
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 2 * time.Second
	}
	if o.SwapTries <= 0 {
		o.SwapTries = 30
	}
	if o.Tables == nil {
		o.Tables = Tables
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("partition: connecting (use the migration URL, the schema owner's): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var sees bool
	if err := conn.QueryRow(ctx, `SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&sees); err != nil {
		return nil, err
	}
	if !sees {
		return nil, errors.New("partition: the mover must see every org's rows: run it as a superuser or a role with BYPASSRLS (the schema owner, ALTER ROLE … BYPASSRLS)")
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(lockKey)).Scan(&got); err != nil {
		return nil, err
	}
	if !got {
		return nil, ErrBusy
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey)) //nolint:errcheck

	var out []TableReport
	for _, t := range o.Tables {
		r, err := moveTable(ctx, conn, t, o)
		out = append(out, r)
		if err != nil {
			return out, fmt.Errorf("partition: moving %s (rerun `server partition` to resume): %w", t, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO strata_settings (name, value) VALUES ('partitions', $1)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, fmt.Sprint(o.Partitions)); err != nil {
		return out, err
	}
	return out, nil
}

func moveTable(ctx context.Context, conn *pgx.Conn, t string, o Options) (TableReport, error) {
	rep := TableReport{Table: t, Partitions: o.Partitions}
	var kind string
	if err := conn.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, t).Scan(&kind); err != nil {
		return rep, fmt.Errorf("looking up %s: %w", t, err)
	}
	if kind == "p" {
		rep.Already = true
		var n int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, t).Scan(&n)
		rep.Partitions = n
		o.Log.Info("already partitioned", "table", t, "partitions", n)
		return rep, nil
	}

	// The shadow, the progress row and the mirror appear together, or not at all.
	var parts int
	var state string
	err := conn.QueryRow(ctx, `SELECT partitions, state, rows_copied FROM strata_partition_moves WHERE table_name = $1`, t).Scan(&parts, &state, &rep.Copied)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = retryLocked(ctx, o, t, func() error {
			return withLockTimeout(ctx, conn, o, func(tx pgx.Tx) error {
				return createShadow(ctx, tx, t, o.Partitions)
			})
		})
		if err != nil {
			return rep, fmt.Errorf("creating the shadow table: %w", err)
		}
		o.Log.Info("shadow table created, mirroring writes", "table", t, "partitions", o.Partitions)
	case err != nil:
		return rep, err
	default:
		if parts != o.Partitions {
			o.Log.Warn("resuming a move begun with another partition count: keeping it", "table", t, "partitions", parts)
		}
		rep.Partitions = parts
		o.Log.Info("resuming", "table", t, "state", state, "copied", rep.Copied)
	}

	// Copy in keyed batches; each commits its rows and its last key together.
	var est int64
	_ = conn.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = $1::regclass`, t).Scan(&est)
	total := max(est, rep.Copied)
	if total <= 0 {
		total = -1 // never analysed: unknown
	}
	bar := progress.New(nonNil(o.Progress), total, "copying "+t, progress.Options{Hidden: o.Progress == nil, ShowCount: true, PredictTime: true})
	bar.Set(rep.Copied)
	for {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT strata_partition_copy_batch($1::regclass, $2::text, $3::int)`, t, t, o.Batch).Scan(&n); err != nil {
			bar.Finish()
			return rep, fmt.Errorf("copying a batch after %d rows: %w", rep.Copied, err)
		}
		if n == 0 {
			break
		}
		rep.Copied += n
		bar.Set(rep.Copied)
		if o.OnBatch != nil {
			o.OnBatch(t, rep.Copied)
		}
	}
	bar.Finish()

	// The swap: short, under lock_timeout, retried while requests hold the table.
	start := time.Now()
	err = retryLocked(ctx, o, t, func() error {
		return withLockTimeout(ctx, conn, o, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{t}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT strata_partition_swap($1::regclass, $2::text, $3::boolean)`, t, t, o.KeepOld)
			return err
		})
	})
	rep.SwapWait = time.Since(start)
	if err != nil {
		return rep, fmt.Errorf("swapping in the partitioned table: %w", err)
	}
	o.Log.Info("partitioned", "table", t, "partitions", rep.Partitions, "copied", rep.Copied, "swap", rep.SwapWait.Round(time.Millisecond))
	if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{t}.Sanitize()); err != nil {
		o.Log.Warn("analyze after the swap failed", "table", t, "err", err)
	}
	return rep, nil
}

// createShadow creates the shadow table, its progress row and the mirror triggers in one
// transaction: all three exist, or none does.
func createShadow(ctx context.Context, tx pgx.Tx, t string, n int) error {
	if _, err := tx.Exec(ctx, `SELECT strata_partition_shadow($1::regclass, $2::text, $3::int)`, t, t, n); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO strata_partition_moves (table_name, partitions) VALUES ($1, $2)`, t, n); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `SELECT strata_partition_mirror_on($1::regclass, $2::text)`, t, t)
	return err
}

// retryLocked runs fn again, after a growing pause, while it fails for want of a lock
// (lock_timeout: requests held the table), up to o.SwapTries times.
func retryLocked(ctx context.Context, o Options, t string, fn func() error) error {
	for try := 1; ; try++ {
		err := fn()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55P03" || try >= o.SwapTries { // lock_not_available
			return err
		}
		o.Log.Info("waited too long for the table lock; retrying", "table", t, "try", try)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
}

// withLockTimeout runs fn in a transaction whose lock waits end after o.LockTimeout, so a
// DDL step queued behind a long request does not stall every request queued behind it.
func withLockTimeout(ctx context.Context, conn *pgx.Conn, o Options, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", o.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		return fn(tx)
	})
}

func nonNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
