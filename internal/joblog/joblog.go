// Package joblog composes a durable job (internal/jobs) with its episodic log
// (internal/episodic): a new job gets an (empty) event log, finishing a job or writing a
// checkpoint records the log's last seq, a fork forks the log at the checkpoint's seq, and
// resume shows the last events.
//
// Why a package of its own: a job and its log live in two tiers that do not know each other
// (STYLE.md: tiers never import each other). Making jobs own "a job with its log" would make
// it depend on the episodic tier for a few calls; the transport composed them in its
// handlers until the wire types moved out (issue 20). It is the small service layer of
// STYLE.md, on the services floor: every method takes the request's pg.DBTX and adds no
// round trip beyond the two stores' own.
package joblog

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Log is a job store and an event store composed.
type Log struct {
	Jobs   *jobs.Store
	Events *episodic.Store
}

// New composes the two stores.
func New(j *jobs.Store, e *episodic.Store) *Log { return &Log{Jobs: j, Events: e} }

// head is the job's episodic last seq (0 when it has no log yet), for a write that records
// it. check is the write's own input check (JobSpec.Check, ...): bad input is refused before
// the head is read, so it costs no round trip.
func (l *Log) head(ctx context.Context, db pg.DBTX, org, job string, check error) (int64, error) {
	if check != nil {
		return 0, check
	}
	h, err := l.Events.Head(ctx, db, org, job)
	if errors.Is(err, strata.ErrNotFound) {
		return 0, nil
	}
	return h.LastSeq, err
}

// PutJob creates or updates a job recording its log's head; a new job gets its (empty) log.
func (l *Log) PutJob(ctx context.Context, db pg.DBTX, org, job string, spec jobs.JobSpec, ifMatch *int64) (jobs.Job, bool, error) {
	var err error
	if spec.EventSeq, err = l.head(ctx, db, org, job, spec.Check()); err != nil {
		return jobs.Job{}, false, err
	}
	j, created, err := l.Jobs.PutJob(ctx, db, org, job, spec, ifMatch)
	if err != nil {
		return jobs.Job{}, false, err
	}
	if created {
		if err := l.Events.EnsureJob(ctx, db, org, job); err != nil {
			return jobs.Job{}, false, err
		}
	}
	return j, created, nil
}

// CompleteJob finishes a job, recording its log's head.
func (l *Log) CompleteJob(ctx context.Context, db pg.DBTX, org, job, status string, outcome json.RawMessage) (jobs.Job, error) {
	seq, err := l.head(ctx, db, org, job, jobs.CheckCompletion(status, outcome))
	if err != nil {
		return jobs.Job{}, err
	}
	return l.Jobs.CompleteJob(ctx, db, org, job, status, outcome, seq)
}

// PutCheckpoint writes the job's next checkpoint version, recording its log's head.
func (l *Log) PutCheckpoint(ctx context.Context, db pg.DBTX, org, job string, cp jobs.CheckpointInput, ifMatch *int64) (jobs.Checkpoint, error) {
	var err error
	if cp.EventSeq, err = l.head(ctx, db, org, job, cp.Check()); err != nil {
		return jobs.Checkpoint{}, err
	}
	return l.Jobs.PutCheckpoint(ctx, db, org, job, cp, ifMatch)
}

// Fork forks a job at a checkpoint version and its log at that checkpoint's seq.
func (l *Log) Fork(ctx context.Context, db pg.DBTX, org, job string, version int64, in jobs.ForkInput) (jobs.Job, jobs.Checkpoint, error) {
	j, cp, err := l.Jobs.Fork(ctx, db, org, job, version, in)
	if err != nil {
		return jobs.Job{}, jobs.Checkpoint{}, err
	}
	if err := l.Events.EnsureJob(ctx, db, org, job); err != nil {
		return jobs.Job{}, jobs.Checkpoint{}, err
	}
	if _, err := l.Events.Fork(ctx, db, org, job, j.JobID, j.ParentEventSeq); err != nil {
		return jobs.Job{}, jobs.Checkpoint{}, err
	}
	return j, cp, nil
}

// Resume is a job's resume with the last events of its log.
type Resume struct {
	jobs.Resume
	Events       []episodic.Event // the last events, oldest first (never nil)
	LastEventSeq int64            // the log's last seq
}

// Resume reads everything needed to carry on with a job and its last n events (0: none).
// The last events and the log head ride in the resume's own batch: with the transaction's
// BEGIN, the whole resume is one round trip to Postgres.
func (l *Log) Resume(ctx context.Context, db pg.DBTX, org, job string, n int) (Resume, error) {
	var last episodic.LastResult
	res, err := l.Jobs.Resume(ctx, db, org, job, func(b *pgx.Batch) { l.Events.QueueLast(b, org, job, max(n, 1), &last) })
	if err != nil {
		return Resume{}, err
	}
	if last.Err != nil {
		return Resume{}, last.Err
	}
	out := Resume{Resume: res, Events: []episodic.Event{}}
	if n > 0 && len(last.Events) > 0 {
		// The view's seqs are gap-free, so the last event's seq is the log's head.
		out.Events = last.Events
		out.LastEventSeq = last.Events[len(last.Events)-1].Seq
		return out, nil
	}
	if last.HasLog {
		out.LastEventSeq = last.Head.LastSeq
	}
	return out, nil
}

// LangGraphPut stores a LangGraph checkpoint recording the log's head; a thread that
// creates its job gets the job's (empty) log, in the put's own statement.
func (l *Log) LangGraphPut(ctx context.Context, db pg.DBTX, org, job string, put jobs.LangGraphPut) (jobs.LangGraphPutResult, error) {
	return l.Jobs.LangGraphPut(ctx, db, org, job, langGraphPut(put))
}

// LangGraphPutStatement is LangGraphPut as one statement sent without reading its result
// (jobs.Store.LangGraphPutStatement).
func (l *Log) LangGraphPutStatement(org, job string, put jobs.LangGraphPut) (pg.Statement, error) {
	return l.Jobs.LangGraphPutStatement(org, job, langGraphPut(put))
}

// langGraphPut reads the log's head and creates the job's log in the put's own statement.
func langGraphPut(put jobs.LangGraphPut) jobs.LangGraphPut {
	put.EventSeqSQL = headSeqSQL
	put.OnJobCreatedSQL = ensureLogSQL
	return put
}

var (
	// headSeqSQL reads the log's head (of $1, org, and $2, job) in the put's own statement.
	headSeqSQL = episodic.HeadSeqSQL("$1", "$2")
	// ensureLogSQL creates the job's log when the statement's CTE "created" made the job.
	ensureLogSQL = episodic.EnsureJobSQL("$1", "$2", "created")
)

// LangGraphPutWrites stores a task's pending writes; a thread that creates its job gets the
// job's (empty) log, in the same statement.
func (l *Log) LangGraphPutWrites(ctx context.Context, db pg.DBTX, org, job string, w jobs.LangGraphWrites) (int, bool, error) {
	w.OnJobCreatedSQL = ensureLogSQL
	return l.Jobs.LangGraphPutWrites(ctx, db, org, job, w)
}

// LangGraphPutWritesStatement is LangGraphPutWrites as one statement sent without reading
// its result (jobs.Store.LangGraphPutWritesStatement).
func (l *Log) LangGraphPutWritesStatement(org, job string, w jobs.LangGraphWrites) (pg.Statement, error) {
	w.OnJobCreatedSQL = ensureLogSQL
	return l.Jobs.LangGraphPutWritesStatement(org, job, w)
}
