package episodic

// Compaction and retention, for the consolidation and eviction workers: the brief form of
// a job's own events (to find runs of superseded edits), compaction ranges that the default
// read view replaces by a summary event, the assets a job produced, and deletion of a
// finished job's whole log.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// OpCompaction is the op of the summary event consolidation appends for compacted runs.
const OpCompaction = "strata.compaction"

// Brief is an event without params and result.
type Brief struct {
	Seq        int64
	Op         string
	RevertsSeq int64
}

// OwnBriefs lists the events job itself holds (not those a fork inherits), in seq order.
func (s *Store) OwnBriefs(ctx context.Context, q pg.DBTX, org, job string) ([]Brief, error) {
	rows, err := q.Query(ctx, `SELECT seq, op, coalesce(reverts_seq, 0) FROM episodic_events
		WHERE org_id = $1 AND job_id = $2 ORDER BY seq`, org, job)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Brief, error) {
		var b Brief
		err := r.Scan(&b.Seq, &b.Op, &b.RevertsSeq)
		return b, err
	})
	return out, pg.Interpret(err)
}

// Compaction is a range of a job's own events hidden from its default read view.
type Compaction struct {
	FromSeq, ToSeq, SummarySeq int64
	Events                     int
}

// AddCompaction records that job's events from..to are replaced by the summary event
// summarySeq in the job's default read view (List with HideCompacted).
func (s *Store) AddCompaction(ctx context.Context, tx pg.DBTX, org, job string, c Compaction, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO episodic_compactions (org_id, job_id, from_seq, to_seq, summary_seq, events, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, org, job, c.FromSeq, c.ToSeq, c.SummarySeq, c.Events, now)
	return pg.Interpret(err)
}

// Compactions lists job's compaction ranges in seq order.
func (s *Store) Compactions(ctx context.Context, q pg.DBTX, org, job string) ([]Compaction, error) {
	rows, err := q.Query(ctx, `SELECT from_seq, to_seq, summary_seq, events FROM episodic_compactions
		WHERE org_id = $1 AND job_id = $2 ORDER BY from_seq`, org, job)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Compaction, error) {
		var c Compaction
		err := r.Scan(&c.FromSeq, &c.ToSeq, &c.SummarySeq, &c.Events)
		return c, err
	})
	return out, pg.Interpret(err)
}

// ProducedAsset is an asset version a job's event produced.
type ProducedAsset struct {
	AssetID   string `json:"asset_id"`
	Version   int64  `json:"version"`
	MediaType string `json:"media_type,omitempty"`
	EventSeq  int64  `json:"event_seq"`
}

// AssetsOfJob lists the asset versions produced by job's events (at most limit).
func (s *Store) AssetsOfJob(ctx context.Context, q pg.DBTX, org, job string, limit int) ([]ProducedAsset, error) {
	rows, err := q.Query(ctx, `SELECT asset_id, version, media_type, event_seq FROM asset_versions
		WHERE org_id = $1 AND job_id = $2 ORDER BY event_seq, asset_id, version LIMIT $3`, org, job, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProducedAsset, error) {
		var a ProducedAsset
		err := r.Scan(&a.AssetID, &a.Version, &a.MediaType, &a.EventSeq)
		return a, err
	})
	return out, pg.Interpret(err)
}

// LogSize returns how many events job itself holds and whether a fork reads its log
// (then retention must keep it).
func (s *Store) LogSize(ctx context.Context, q pg.DBTX, org, job string) (events int64, forked bool, err error) {
	err = q.QueryRow(ctx, `SELECT (SELECT count(*) FROM episodic_events WHERE org_id = $1 AND job_id = $2),
		EXISTS (SELECT 1 FROM episodic_jobs WHERE org_id = $1 AND parent_job_id = $2)`, org, job).Scan(&events, &forked)
	return events, forked, pg.Interpret(err)
}

// DeleteLog removes job's whole log — its events and compaction ranges — as retention
// does for long-finished jobs. The head row stays, so the log reads as empty (not 404) and
// its counter never hands out a seq twice. A log that a fork still reads is kept (forked
// true, nothing deleted). The append-only guard is lifted for these statements only.
func (s *Store) DeleteLog(ctx context.Context, tx pgx.Tx, org, job string) (events int64, forked bool, err error) {
	if err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM episodic_jobs WHERE org_id = $1 AND parent_job_id = $2)`,
		org, job).Scan(&forked); err != nil || forked {
		return 0, forked, pg.Interpret(err)
	}
	if _, err = tx.Exec(ctx, `SELECT set_config('strata.allow_event_delete', 'on', true)`); err != nil {
		return 0, false, pg.Interpret(err)
	}
	defer func() {
		if _, rerr := tx.Exec(ctx, `SELECT set_config('strata.allow_event_delete', 'off', true)`); err == nil && rerr != nil {
			err = pg.Interpret(rerr)
		}
	}()
	tag, err := tx.Exec(ctx, `DELETE FROM episodic_events WHERE org_id = $1 AND job_id = $2`, org, job)
	if err != nil {
		return 0, false, pg.Interpret(err)
	}
	events = tag.RowsAffected()
	_, err = tx.Exec(ctx, `DELETE FROM episodic_compactions WHERE org_id = $1 AND job_id = $2`, org, job)
	return events, false, pg.Interpret(err)
}

// LongLog is a job whose log head is past a threshold (rolling job summaries).
type LongLog struct {
	JobID   string
	LastSeq int64
}

// LongLogs lists up to limit of org's jobs whose log head is above minSeq, by job id after
// after (a fork counts its own seqs, which continue its parent's).
func (s *Store) LongLogs(ctx context.Context, q pg.DBTX, org string, minSeq int64, after string, limit int) ([]LongLog, error) {
	rows, err := q.Query(ctx, `SELECT job_id, last_seq FROM episodic_jobs
		WHERE org_id = $1 AND last_seq > $2 AND job_id > $3 ORDER BY job_id LIMIT $4`, org, minSeq, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LongLog, error) {
		var l LongLog
		return l, r.Scan(&l.JobID, &l.LastSeq)
	})
	return out, pg.Interpret(err)
}
