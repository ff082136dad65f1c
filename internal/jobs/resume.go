package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// MaxResumeSteps bounds the steps one resume answers (in-flight and failed steps first,
// then the most recently completed); Resume.StepsTruncated says when more exist.
const MaxResumeSteps = 1000

// Resume is everything an agent needs to carry on with a job, read in one round trip.
type Resume struct {
	Job             Job             `json:"job"`
	Checkpoint      *Checkpoint     `json:"checkpoint" doc:"The latest checkpoint (null: none yet)."`
	NextAction      string          `json:"next_action" doc:"The latest checkpoint's next action."`
	WorkingState    json.RawMessage `json:"working_state,omitempty" doc:"The working-state snapshot of the latest checkpoint."`
	CompletedSteps  []CompletedStep `json:"completed_steps" doc:"Steps done, with their results, in completion order. Never run these again (GET .../steps/{step} has the full record)."`
	InFlight        []Step          `json:"in_flight" doc:"Claimed steps with their lease state (live or expired: an expired one may be taken over), each with its attempt_history."`
	FailedSteps     []Step          `json:"failed_steps" doc:"Failed steps with error, disposition and the input they failed on, each with its attempt_history (owner, token, lease, input, outcome and error of every attempt)."`
	PendingHandoffs []Handoff       `json:"pending_handoffs"`
	StepsTruncated  bool            `json:"steps_truncated,omitempty" doc:"More than 1000 steps: the oldest completed ones were left out (GET .../steps lists all)."`
}

// CompletedStep is a completed step as resume shows it: its result and little else.
type CompletedStep struct {
	StepID       string          `json:"step_id"`
	Result       json.RawMessage `json:"result"`
	Attempts     int             `json:"attempts"`
	FencingToken int64           `json:"fencing_token"`
	FinishedAt   time.Time       `json:"finished_at"`
}

type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Resume's statements, built once (not on every call).
var (
	resumeJobSQL        = `SELECT ` + jobCols + ` FROM jobs WHERE org_id = $1 AND job_id = $2`
	resumeCheckpointSQL = lineageCTE + `SELECT ` + checkpointCols + ` ` + inLineage +
		` WHERE c.version = (SELECT checkpoint_version FROM jobs WHERE org_id = $1 AND job_id = $2)`
	resumeStepsSQL = `SELECT ` + stepCols + ` FROM job_steps WHERE org_id = $1 AND job_id = $2
		ORDER BY (status = 'completed'), finished_at DESC NULLS FIRST, step_id LIMIT $3`
	resumeHandoffsSQL = `SELECT ` + handoffCols + ` FROM job_handoffs WHERE org_id = $1 AND job_id = $2 AND status = 'pending'`
)

// Resume reads a job's resume view: job, latest checkpoint (through a fork's lineage),
// steps by state and pending handoffs — one batch, one round trip to Postgres when db can
// batch (a pgx.Tx, Conn or Pool). also queues more queries into that batch (the caller's
// own reads, so they cost no round trip); it needs a db that batches.
func (s *Store) Resume(ctx context.Context, db pg.DBTX, org, jobID string, also ...func(*pgx.Batch)) (Resume, error) {
	now := s.Now()
	qJob, qCP, qSteps, qHand := resumeJobSQL, resumeCheckpointSQL, resumeStepsSQL, resumeHandoffsSQL

	var r Resume
	var jobErr, cpErr error
	var cp Checkpoint
	var steps []Step
	var hands []Handoff
	var atts []Attempt
	readAttempts := func(rows pgx.Rows) error {
		var err error
		atts, err = collectAttempts(rows, now)
		return err
	}
	readSteps := func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			st, err := s.scanStep(rows, now)
			if err != nil {
				return err
			}
			steps = append(steps, st)
		}
		return pg.Interpret(rows.Err())
	}
	readHands := func(rows pgx.Rows) error {
		var err error
		hands, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Handoff, error) { return scanHandoff(r) })
		return pg.Interpret(err)
	}
	if b, ok := db.(batcher); ok {
		batch := &pgx.Batch{}
		// Key reads, the caller's too (the newest events): generic plans (pg.GenericPlansSQL).
		batch.Queue(pg.GenericPlansSQL)
		batch.Queue(qJob, org, jobID).QueryRow(func(row pgx.Row) error { r.Job, jobErr = scanJob(row); return nil })
		batch.Queue(qCP, org, jobID).QueryRow(func(row pgx.Row) error { cp, cpErr = scanCheckpoint(row, jobID); return nil })
		batch.Queue(qSteps, org, jobID, MaxResumeSteps+1).Query(readSteps)
		batch.Queue(qHand, org, jobID).Query(readHands)
		batch.Queue(qResumeAttempts, org, jobID, MaxResumeAttempts).Query(readAttempts)
		for _, f := range also {
			f(batch)
		}
		batch.Queue(pg.DefaultPlansSQL)
		if err := b.SendBatch(ctx, batch).Close(); err != nil {
			return Resume{}, pg.Interpret(err)
		}
	} else {
		if len(also) > 0 {
			return Resume{}, errors.New("jobs: Resume with extra queries needs a db that batches")
		}
		r.Job, jobErr = scanJob(db.QueryRow(ctx, qJob, org, jobID))
		if jobErr == nil {
			cp, cpErr = scanCheckpoint(db.QueryRow(ctx, qCP, org, jobID), jobID)
			rows, err := db.Query(ctx, qSteps, org, jobID, MaxResumeSteps+1)
			if err != nil {
				return Resume{}, pg.Interpret(err)
			}
			if err := readSteps(rows); err != nil {
				return Resume{}, err
			}
			rows, err = db.Query(ctx, qHand, org, jobID)
			if err != nil {
				return Resume{}, pg.Interpret(err)
			}
			if err := readHands(rows); err != nil {
				return Resume{}, err
			}
			rows, err = db.Query(ctx, qResumeAttempts, org, jobID, MaxResumeAttempts)
			if err != nil {
				return Resume{}, pg.Interpret(err)
			}
			if err := readAttempts(rows); err != nil {
				return Resume{}, err
			}
		}
	}
	if jobErr != nil {
		return Resume{}, jobErr
	}
	switch {
	case cpErr == nil:
		r.Checkpoint = &cp
		r.NextAction = cp.NextAction
		r.WorkingState = cp.WorkingState
	case !errors.Is(cpErr, strata.ErrNotFound):
		return Resume{}, cpErr
	}
	if len(steps) > MaxResumeSteps {
		steps, r.StepsTruncated = steps[:MaxResumeSteps], true
	}
	r.CompletedSteps, r.InFlight, r.FailedSteps = make([]CompletedStep, 0, len(steps)), []Step{}, []Step{}
	history := map[string][]Attempt{}
	for _, a := range atts {
		history[a.StepID] = append(history[a.StepID], a)
	}
	for _, st := range steps {
		st.History = history[st.StepID]
		switch st.Status {
		case StepCompleted:
			r.CompletedSteps = append(r.CompletedSteps, CompletedStep{StepID: st.StepID, Result: st.Result,
				Attempts: st.Attempts, FencingToken: st.FencingToken, FinishedAt: *st.FinishedAt})
		case StepRunning:
			r.InFlight = append(r.InFlight, st)
		case StepFailed:
			r.FailedSteps = append(r.FailedSteps, st)
		}
	}
	sort.SliceStable(r.CompletedSteps, func(a, b int) bool {
		return r.CompletedSteps[a].FinishedAt.Before(r.CompletedSteps[b].FinishedAt)
	})
	r.PendingHandoffs = hands
	if r.PendingHandoffs == nil {
		r.PendingHandoffs = []Handoff{}
	}
	return r, nil
}
