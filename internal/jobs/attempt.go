package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Attempt outcomes. An attempt without an outcome is the step's current claim.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeLeaseLost = "lease_lost" // its lease ran out and the step was claimed again
	OutcomeTakenOver = "taken_over" // a handoff moved its live lease to another owner
)

// How an attempt began.
const (
	ClaimNew      = "new"      // the step's first claim
	ClaimRetry    = "retry"    // after a retryable (or cleared) failure
	ClaimTakeover = "takeover" // of a claim whose lease had run out
	ClaimHandoff  = "handoff"  // an acknowledged handoff moved the lease to the receiver
)

// Attempt is one claim of a step, kept after the step moved on (every attempt is kept until
// the org's policy prunes it: steps.keep_attempts). Its fencing token names it.
type Attempt struct {
	JobID           string          `json:"job_id"`
	StepID          string          `json:"step_id"`
	FencingToken    int64           `json:"fencing_token" doc:"The claim's token (attempts are ordered by it: oldest first)."`
	Attempt         int             `json:"attempt" doc:"The step's claim count at this attempt (a handoff continues the claim under a new token)."`
	Claim           string          `json:"claim" enum:"new,retry,takeover,handoff" doc:"How the attempt began."`
	Owner           string          `json:"owner" doc:"The agent that held the lease."`
	Input           json.RawMessage `json:"input" doc:"The input the caller recorded when it claimed the step."`
	LeaseSeconds    int             `json:"lease_seconds"`
	AcquiredAt      time.Time       `json:"acquired_at"`
	LeaseExpiresAt  time.Time       `json:"lease_expires_at" doc:"The lease's last expiry (heartbeats move it)."`
	ReleasedAt      *time.Time      `json:"released_at,omitempty" doc:"When the attempt ended (for lease_lost: when its lease ran out)."`
	Heartbeats      int             `json:"heartbeats"`
	LastHeartbeatAt *time.Time      `json:"last_heartbeat_at,omitempty"`
	Outcome         string          `json:"outcome,omitempty" enum:"completed,failed,lease_lost,taken_over" doc:"Absent: the step's current claim."`
	Error           string          `json:"error,omitempty" doc:"For failed: what went wrong."`
	Disposition     string          `json:"disposition,omitempty" enum:"retryable,manual_review"`
	Lease           string          `json:"lease,omitempty" enum:"live,expired" doc:"For the current claim: whether its lease is still live."`
	DurationMS      int64           `json:"duration_ms" doc:"From acquired to released (to now for the current claim)."`
}

const attemptCols = `job_id, step_id, fencing_token, attempt, claim, owner, input, lease_seconds, acquired_at,
	lease_expires_at, released_at, heartbeats, last_heartbeat_at, coalesce(outcome, ''), coalesce(error, ''),
	coalesce(disposition, '')`

func scanAttempt(row pgx.Row, now time.Time) (Attempt, error) {
	var a Attempt
	err := row.Scan(&a.JobID, &a.StepID, &a.FencingToken, &a.Attempt, &a.Claim, &a.Owner, &a.Input, &a.LeaseSeconds,
		&a.AcquiredAt, &a.LeaseExpiresAt, &a.ReleasedAt, &a.Heartbeats, &a.LastHeartbeatAt, &a.Outcome, &a.Error, &a.Disposition)
	if err != nil {
		return Attempt{}, pg.Interpret(err)
	}
	a.AcquiredAt, a.LeaseExpiresAt = a.AcquiredAt.UTC(), a.LeaseExpiresAt.UTC()
	for _, p := range []**time.Time{&a.ReleasedAt, &a.LastHeartbeatAt} {
		if *p != nil {
			t := (**p).UTC()
			*p = &t
		}
	}
	end := now
	if a.ReleasedAt != nil {
		end = *a.ReleasedAt
	} else {
		a.Lease = "live"
		if !now.Before(a.LeaseExpiresAt) {
			a.Lease = "expired"
		}
	}
	a.DurationMS = max(0, end.Sub(a.AcquiredAt).Milliseconds())
	return a, nil
}

func collectAttempts(rows pgx.Rows, now time.Time) ([]Attempt, error) {
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := scanAttempt(rows, now)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, pg.Interpret(rows.Err())
}

// The statements below ride along the step writes of step.go and handoff.go as
// data-modifying CTEs: the attempt is written by the same statement (one round trip) in the
// same transaction as the step.

// stepReturning turns a step write (INSERT/UPDATE job_steps ... RETURNING *) and the attempt
// writes that go with it into one statement answering stepCols.
func stepReturning(stepWrite string, attemptWrites ...string) string {
	q := `WITH st AS (` + stepWrite + `)`
	for i, w := range attemptWrites {
		q += `, a` + strconv.Itoa(i) + ` AS (` + w + `)`
	}
	return q + ` SELECT ` + stepCols + ` FROM st`
}

// openAttempt inserts the attempt of the claim st holds.
func openAttempt(claim string) string {
	return `INSERT INTO job_step_attempts (org_id, job_id, step_id, fencing_token, attempt, claim, owner, input,
			lease_seconds, acquired_at, lease_expires_at)
		SELECT org_id, job_id, step_id, fencing_token, attempts, '` + claim + `', owner, input, lease_seconds, started_at,
			lease_expires_at FROM st`
}

// PageAttempts is a client's page of a step's attempts, oldest first: after is a
// next_cursor of the previous page (a fencing token; another value is a FieldError for
// "cursor"), and a step (or job) that does not exist is ErrNotFound.
func (s *Store) PageAttempts(ctx context.Context, db pg.DBTX, org, jobID, stepID, after string, limit int) ([]Attempt, error) {
	var cursor int64
	if after != "" {
		var err error
		if cursor, err = strconv.ParseInt(after, 10, 64); err != nil || cursor < 0 {
			return nil, strata.Invalid("cursor", "must be a next_cursor this endpoint returned")
		}
	}
	if _, err := s.GetStep(ctx, db, org, jobID, stepID); err != nil {
		return nil, err
	}
	return s.ListAttempts(ctx, db, org, jobID, stepID, cursor, limit)
}

// ListAttempts lists a step's attempts with a fencing token above after, oldest first.
func (s *Store) ListAttempts(ctx context.Context, db pg.DBTX, org, jobID, stepID string, after int64, limit int) ([]Attempt, error) {
	now := s.Now()
	rows, err := db.Query(ctx, `SELECT `+attemptCols+` FROM job_step_attempts
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token > $4 ORDER BY fencing_token LIMIT $5`,
		org, jobID, stepID, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return collectAttempts(rows, now)
}

// MaxResumeAttempts bounds the attempts resume shows per in-flight or failed step (the
// newest ones; GET .../steps/{step}/attempts lists all).
const MaxResumeAttempts = 20

// qResumeAttempts reads the newest MaxResumeAttempts attempts of each step of a job that is
// not completed, oldest first within a step.
const qResumeAttempts = `SELECT ` + attemptCols + ` FROM (
		SELECT a.*, row_number() OVER (PARTITION BY a.step_id ORDER BY a.fencing_token DESC) AS rn
		FROM job_step_attempts a JOIN job_steps s ON s.org_id = a.org_id AND s.job_id = a.job_id AND s.step_id = a.step_id
		WHERE a.org_id = $1 AND a.job_id = $2 AND s.status <> 'completed') x
	WHERE rn <= $3 ORDER BY step_id, fencing_token`

// AttemptRef names one attempt.
type AttemptRef struct {
	JobID, StepID string
	FencingToken  int64
}

// String is the ref as reports list it: job/step#token.
func (r AttemptRef) String() string {
	return r.JobID + "/" + r.StepID + "#" + strconv.FormatInt(r.FencingToken, 10)
}

// SurplusAttempts lists ended attempts beyond the newest keep of each step, oldest first
// (the current claim is always among the newest, so it is never listed), leaving out jobs
// of restricted data subjects (GDPR Art. 18).
func (s *Store) SurplusAttempts(ctx context.Context, q pg.DBTX, org string, keep, limit int) ([]AttemptRef, error) {
	if keep <= 0 {
		return nil, errors.New("jobs: keep must be positive")
	}
	rows, err := q.Query(ctx, `SELECT a.job_id, a.step_id, a.fencing_token FROM (
			SELECT job_id, step_id, fencing_token, outcome,
				row_number() OVER (PARTITION BY job_id, step_id ORDER BY fencing_token DESC) AS rn
			FROM job_step_attempts WHERE org_id = $1) a
		WHERE a.rn > $2 AND a.outcome IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM jobs rj JOIN gdpr_restrictions r ON r.org_id = rj.org_id AND r.user_id = rj.user_id WHERE rj.org_id = $1 AND rj.job_id = a.job_id)
		ORDER BY a.job_id, a.step_id, a.fencing_token LIMIT $3`, org, keep, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AttemptRef, error) {
		var a AttemptRef
		err := r.Scan(&a.JobID, &a.StepID, &a.FencingToken)
		return a, err
	})
	return out, pg.Interpret(err)
}

// DeleteAttempts removes the given ended attempts and returns how many went.
func (s *Store) DeleteAttempts(ctx context.Context, tx pg.DBTX, org string, refs []AttemptRef) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	jobs, steps, tokens := make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		jobs[i], steps[i], tokens[i] = r.JobID, r.StepID, r.FencingToken
	}
	tag, err := tx.Exec(ctx, `DELETE FROM job_step_attempts a USING unnest($2::text[], $3::text[], $4::bigint[]) AS u(job_id, step_id, tok)
		WHERE a.org_id = $1 AND a.job_id = u.job_id AND a.step_id = u.step_id AND a.fencing_token = u.tok
		  AND a.outcome IS NOT NULL`, org, jobs, steps, tokens)
	return tag.RowsAffected(), pg.Interpret(err)
}
