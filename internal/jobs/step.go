package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Step statuses.
const (
	StepRunning   = "running"
	StepCompleted = "completed"
	StepFailed    = "failed"
)

// Failure dispositions.
const (
	DispositionRetryable    = "retryable"
	DispositionManualReview = "manual_review"
)

// Claim outcomes of Start.
const (
	ClaimClaimed   = "claimed"
	ClaimCompleted = "completed"
)

// Lease bounds (seconds).
const (
	MinLeaseSeconds     = 1
	MaxLeaseSeconds     = 86400
	DefaultLeaseSeconds = 60
)

// StepInput is what a step runs on, recorded when it is claimed (before it executes), so a
// failure shows the exact input it failed on.
type StepInput struct {
	Tool   string          `json:"tool,omitempty" maxLength:"200" doc:"The tool the step calls."`
	Model  string          `json:"model,omitempty" maxLength:"200" doc:"The model the step uses."`
	Params json.RawMessage `json:"params,omitempty" doc:"The step's parameters (any JSON)."`
}

// Step is one step of a job.
type Step struct {
	JobID          string          `json:"job_id"`
	StepID         string          `json:"step_id"`
	Status         string          `json:"status" enum:"running,completed,failed"`
	Owner          string          `json:"owner" doc:"The agent holding (or last holding) the lease."`
	FencingToken   int64           `json:"fencing_token" doc:"The current claim's token; every claim gets a greater one."`
	Attempts       int             `json:"attempts"`
	LeaseSeconds   int             `json:"lease_seconds"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at"`
	Lease          string          `json:"lease,omitempty" enum:"live,expired" doc:"For a running step: whether its lease is still live."`
	Input          json.RawMessage `json:"input"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	Disposition    string          `json:"disposition,omitempty" enum:"retryable,manual_review"`
	StartedAt      time.Time       `json:"started_at" doc:"When the current attempt claimed the step."`
	FirstStartedAt time.Time       `json:"first_started_at" doc:"When the step was first claimed, kept across retries and takeovers: lists of steps are in this order (run order), then by step id."`
	HeartbeatAt    time.Time       `json:"heartbeat_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	ClearedAt      *time.Time      `json:"cleared_at,omitempty"`
	ClearedBy      string          `json:"cleared_by,omitempty"`
	// History is the step's attempts, oldest first, where an answer includes them (resume:
	// in-flight and failed steps, the newest MaxResumeAttempts).
	History []Attempt `json:"attempt_history,omitempty" doc:"Every attempt of the step, oldest first (resume: in-flight and failed steps, the newest 20). GET .../steps/{step}/attempts lists all."`
}

// Claim is the answer of Start.
type Claim struct {
	Status         string          `json:"status" enum:"claimed,completed" doc:"claimed: you hold the lease, run the step; completed: it already ran, here is its result."`
	FencingToken   int64           `json:"fencing_token" doc:"Send it with heartbeat, complete and fail."`
	Result         json.RawMessage `json:"result,omitempty"`
	Attempt        int             `json:"attempt"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Step           Step            `json:"step"`
}

const stepCols = `job_id, step_id, status, owner, fencing_token, attempts, lease_seconds, lease_expires_at, input,
	result, coalesce(error, ''), coalesce(disposition, ''), started_at, heartbeat_at, finished_at, cleared_at,
	coalesce(cleared_by, ''), first_started_at`

func (s *Store) scanStep(row pgx.Row, now time.Time) (Step, error) {
	var st Step
	err := row.Scan(&st.JobID, &st.StepID, &st.Status, &st.Owner, &st.FencingToken, &st.Attempts, &st.LeaseSeconds,
		&st.LeaseExpiresAt, &st.Input, &st.Result, &st.Error, &st.Disposition, &st.StartedAt, &st.HeartbeatAt,
		&st.FinishedAt, &st.ClearedAt, &st.ClearedBy, &st.FirstStartedAt)
	if err != nil {
		return Step{}, pg.Interpret(err)
	}
	st.normalise(now)
	return st, nil
}

func (st *Step) normalise(now time.Time) {
	st.LeaseExpiresAt, st.StartedAt, st.HeartbeatAt = st.LeaseExpiresAt.UTC(), st.StartedAt.UTC(), st.HeartbeatAt.UTC()
	st.FirstStartedAt = st.FirstStartedAt.UTC()
	for _, p := range []*time.Time{st.FinishedAt, st.ClearedAt} {
		if p != nil { // the scan's own time: converted in place, no copy allocated
			*p = p.UTC()
		}
	}
	st.Lease = ""
	if st.Status == StepRunning {
		st.Lease = "live"
		if !now.Before(st.LeaseExpiresAt) {
			st.Lease = "expired"
		}
	}
}

// ErrStaleToken is the conflict of a heartbeat, complete or fail whose fencing token is not
// the step's current one.
var ErrStaleToken = errors.New("stale fencing token")

func staleToken(st Step, token int64) error {
	return &strata.ConflictError{
		Msg: "fencing token " + itoa(token) + " is stale: step " + st.StepID + " is " + st.Status +
			" under token " + itoa(st.FencingToken) + " held by " + quoteOr(st.Owner, "nobody") + "; nothing was written",
		Details: map[string]any{"status": st.Status, "holder": st.Owner, "fencing_token": st.FencingToken,
			"lease_expires_at": st.LeaseExpiresAt},
	}
}

// StartInput is what Start needs.
type StartInput struct {
	Owner        string
	LeaseSeconds int // 0: DefaultLeaseSeconds
	Input        StepInput
}

func checkLease(field string, secs int) (int, error) {
	if secs == 0 {
		return DefaultLeaseSeconds, nil
	}
	if secs < MinLeaseSeconds || secs > MaxLeaseSeconds {
		return 0, strata.Invalid(field, "must be between %d and %d", MinLeaseSeconds, MaxLeaseSeconds)
	}
	return secs, nil
}

// lockRunningJob locks the job and requires it to be running.
func (s *Store) lockRunningJob(ctx context.Context, db pg.DBTX, org, jobID string) (Job, error) {
	j, err := s.lockJob(ctx, db, org, jobID)
	if err != nil {
		return Job{}, err
	}
	if j.Status != StatusRunning {
		return Job{}, notRunning(j)
	}
	return j, nil
}

func (s *Store) lockStep(ctx context.Context, db pg.DBTX, org, jobID, stepID string, now time.Time) (Step, error) {
	return s.scanStep(db.QueryRow(ctx, `SELECT `+stepCols+` FROM job_steps
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 FOR UPDATE`, org, jobID, stepID), now)
}

func (s *Store) touch(ctx context.Context, db pg.DBTX, org, jobID string, now time.Time) error {
	_, err := db.Exec(ctx, `UPDATE jobs SET progress_at = $3 WHERE org_id = $1 AND job_id = $2 AND progress_at < $3`, org, jobID, now)
	return pg.Interpret(err)
}

// Start claims a step for in.Owner (see docs/jobs.md for the state machine):
//   - never started, failed retryable, or cleared → claimed, token +1, attempt +1;
//   - completed → ClaimCompleted with the stored result, nothing claimed or written;
//   - running under in.Owner → the current claim again (same token), lease extended;
//   - running under another owner with a live lease → conflict naming holder and until;
//   - running with an expired lease → taken over: token +1, attempt +1;
//   - failed manual_review → conflict until an operator clears it.
//
// When the job has an owner, only that owner may claim its steps.
func (s *Store) Start(ctx context.Context, db pg.DBTX, org, jobID, stepID string, in StartInput) (Claim, error) {
	if err := strata.CheckJSON("input.params", in.Input.Params); err != nil {
		return Claim{}, err
	}
	for _, f := range []struct{ name, v string }{{"input.tool", in.Input.Tool}, {"input.model", in.Input.Model}} {
		if err := strata.CheckText(f.name, f.v); err != nil {
			return Claim{}, err
		}
	}
	secs, err := checkLease("lease_seconds", in.LeaseSeconds)
	if err != nil {
		return Claim{}, err
	}
	input, err := json.Marshal(in.Input)
	if err != nil {
		return Claim{}, strata.Invalid("input", "is not valid JSON")
	}
	j, err := s.lockRunningJob(ctx, db, org, jobID)
	if err != nil {
		return Claim{}, err
	}
	now := s.Now()
	lease := now.Add(time.Duration(secs) * time.Second)
	cur, err := s.lockStep(ctx, db, org, jobID, stepID, now)
	exists := err == nil
	if err != nil && !errors.Is(err, strata.ErrNotFound) {
		return Claim{}, err
	}
	if exists && cur.Status == StepCompleted {
		return Claim{Status: ClaimCompleted, FencingToken: cur.FencingToken, Result: cur.Result, Attempt: cur.Attempts, Step: cur}, nil
	}
	if j.Owner != "" && in.Owner != j.Owner {
		return Claim{}, strata.Conflict("job "+jobID+" is owned by "+quoteOr(j.Owner, "")+"; only its owner claims its steps (hand it off first)",
			map[string]any{"owner": j.Owner})
	}
	var st Step
	switch {
	case !exists:
		st, err = s.scanStep(db.QueryRow(ctx, stepReturning(`INSERT INTO job_steps (org_id, job_id, step_id, status, owner,
				fencing_token, attempts, lease_seconds, lease_expires_at, input, started_at, heartbeat_at, first_started_at)
			VALUES ($1, $2, $3, 'running', $4, 1, 1, $5, $6, $7::jsonb, $8, $8, $8) RETURNING *`, openAttempt(ClaimNew)),
			org, jobID, stepID, in.Owner, secs, lease, string(input), now), now)
	case cur.Status == StepRunning && cur.Owner == in.Owner:
		// The holder asks again (a retry, or a restart with the same owner id): same claim.
		st, err = s.scanStep(db.QueryRow(ctx, stepReturning(`UPDATE job_steps SET lease_seconds = $4, heartbeat_at = $5,
				lease_expires_at = greatest(lease_expires_at, $6)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
			`UPDATE job_step_attempts SET lease_seconds = $4, lease_expires_at = greatest(lease_expires_at, $6)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7`),
			org, jobID, stepID, secs, now, lease, cur.FencingToken), now)
	case cur.Status == StepRunning && cur.Lease == "live":
		return Claim{}, &strata.ConflictError{
			Msg: "step " + stepID + " is held by " + quoteOr(cur.Owner, "") + " until " + cur.LeaseExpiresAt.Format(time.RFC3339Nano) +
				"; retry after that or ask the holder",
			Details: map[string]any{"holder": cur.Owner, "until": cur.LeaseExpiresAt, "attempts": cur.Attempts},
		}
	case cur.Status == StepFailed && cur.Disposition == DispositionManualReview:
		return Claim{}, strata.Conflict("step "+stepID+" failed and waits for manual review; an operator must clear it (POST .../steps/"+stepID+"/clear) before it can run again",
			map[string]any{"status": cur.Status, "disposition": cur.Disposition, "error": cur.Error, "input": cur.Input})
	default: // expired lease (takeover), or failed retryable / cleared: a new claim
		// A taken-over claim's attempt ends lease_lost at its lease's expiry; a failed one has
		// ended already.
		claim := ClaimRetry
		if cur.Status == StepRunning {
			claim = ClaimTakeover
		}
		st, err = s.scanStep(db.QueryRow(ctx, stepReturning(`UPDATE job_steps SET status = 'running', owner = $4,
				fencing_token = fencing_token + 1, attempts = attempts + 1, lease_seconds = $5, lease_expires_at = $6,
				input = $7::jsonb, result = NULL, error = NULL, disposition = NULL, started_at = $8, heartbeat_at = $8,
				finished_at = NULL
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
			`UPDATE job_step_attempts SET outcome = 'lease_lost', released_at = least(lease_expires_at, $8)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $9 AND outcome IS NULL`,
			openAttempt(claim)),
			org, jobID, stepID, in.Owner, secs, lease, string(input), now, cur.FencingToken), now)
	}
	if err != nil {
		return Claim{}, err
	}
	if err := s.touch(ctx, db, org, jobID, now); err != nil {
		return Claim{}, err
	}
	exp := st.LeaseExpiresAt
	return Claim{Status: ClaimClaimed, FencingToken: st.FencingToken, Attempt: st.Attempts, LeaseExpiresAt: &exp, Step: st}, nil
}

// Heartbeat extends the lease of the claim token names by leaseSeconds (0: the claim's own
// lease length). An expired lease that nobody took over may still be extended: the token is
// what counts.
func (s *Store) Heartbeat(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, leaseSeconds int) (Step, error) {
	if leaseSeconds != 0 {
		if _, err := checkLease("lease_seconds", leaseSeconds); err != nil {
			return Step{}, err
		}
	}
	if _, err := s.lockRunningJob(ctx, db, org, jobID); err != nil {
		return Step{}, err
	}
	now := s.Now()
	cur, err := s.lockStep(ctx, db, org, jobID, stepID, now)
	if err != nil {
		return Step{}, err
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, staleToken(cur, token)
	}
	if leaseSeconds == 0 {
		leaseSeconds = cur.LeaseSeconds
	}
	st, err := s.scanStep(db.QueryRow(ctx, stepReturning(`UPDATE job_steps SET heartbeat_at = $4, lease_seconds = $5,
			lease_expires_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET heartbeats = heartbeats + 1, last_heartbeat_at = $4, lease_seconds = $5,
			lease_expires_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7`),
		org, jobID, stepID, now, leaseSeconds, now.Add(time.Duration(leaseSeconds)*time.Second), token), now)
	if err != nil {
		return Step{}, err
	}
	return st, s.touch(ctx, db, org, jobID, now)
}

// Complete stores the step's result under the current token. Completing again with the same
// token answers the step as stored (a retry after a lost response).
func (s *Store) Complete(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, result json.RawMessage) (Step, error) {
	if err := strata.CheckJSON("result", result); err != nil {
		return Step{}, err
	}
	if _, err := s.lockRunningJob(ctx, db, org, jobID); err != nil {
		return Step{}, err
	}
	now := s.Now()
	cur, err := s.lockStep(ctx, db, org, jobID, stepID, now)
	if err != nil {
		return Step{}, err
	}
	if cur.FencingToken == token && cur.Status == StepCompleted {
		return cur, nil
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, staleToken(cur, token)
	}
	st, err := s.scanStep(db.QueryRow(ctx, stepReturning(`UPDATE job_steps SET status = 'completed', result = $4::jsonb,
			finished_at = $5, heartbeat_at = $5
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET outcome = 'completed', released_at = $5
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $6 AND outcome IS NULL`),
		org, jobID, stepID, string(orEmpty(result, "null")), now, token), now)
	if err != nil {
		return Step{}, err
	}
	return st, s.touch(ctx, db, org, jobID, now)
}

// Fail records a failure under the current token with a disposition: retryable (Start
// claims it again) or manual_review (Start refuses until ClearStep). Failing again with the
// same token and disposition answers the step as stored.
func (s *Store) Fail(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, msg, disposition string) (Step, error) {
	if err := strata.CheckText("error", msg); err != nil {
		return Step{}, err
	}
	if disposition != DispositionRetryable && disposition != DispositionManualReview {
		return Step{}, strata.Invalid("disposition", "must be retryable or manual_review")
	}
	if _, err := s.lockRunningJob(ctx, db, org, jobID); err != nil {
		return Step{}, err
	}
	now := s.Now()
	cur, err := s.lockStep(ctx, db, org, jobID, stepID, now)
	if err != nil {
		return Step{}, err
	}
	if cur.FencingToken == token && cur.Status == StepFailed && cur.Disposition == disposition && cur.ClearedAt == nil {
		return cur, nil
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, staleToken(cur, token)
	}
	st, err := s.scanStep(db.QueryRow(ctx, stepReturning(`UPDATE job_steps SET status = 'failed', error = $4,
			disposition = $5, finished_at = $6, heartbeat_at = $6, cleared_at = NULL, cleared_by = NULL
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET outcome = 'failed', error = $4, disposition = $5, released_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7 AND outcome IS NULL`),
		org, jobID, stepID, msg, disposition, now, token), now)
	if err != nil {
		return Step{}, err
	}
	return st, s.touch(ctx, db, org, jobID, now)
}

// ClearStep is the operator's release of a manual_review failure: the step becomes
// failed/retryable (cleared_at, cleared_by set) and Start may claim it again. Clearing a
// step that is already cleared answers it as it is.
func (s *Store) ClearStep(ctx context.Context, db pg.DBTX, org, jobID, stepID, by string) (Step, error) {
	if _, err := s.lockRunningJob(ctx, db, org, jobID); err != nil {
		return Step{}, err
	}
	now := s.Now()
	cur, err := s.lockStep(ctx, db, org, jobID, stepID, now)
	if err != nil {
		return Step{}, err
	}
	if cur.Status == StepFailed && cur.Disposition == DispositionRetryable && cur.ClearedAt != nil {
		return cur, nil
	}
	if cur.Status != StepFailed || cur.Disposition != DispositionManualReview {
		return Step{}, strata.Conflict("step "+stepID+" is not waiting for manual review (it is "+cur.Status+")",
			map[string]any{"status": cur.Status, "disposition": cur.Disposition})
	}
	return s.scanStep(db.QueryRow(ctx, `UPDATE job_steps SET disposition = 'retryable', cleared_at = $4, cleared_by = $5
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING `+stepCols,
		org, jobID, stepID, now, by), now)
}

// GetStep reads one step.
func (s *Store) GetStep(ctx context.Context, db pg.DBTX, org, jobID, stepID string) (Step, error) {
	now := s.Now()
	return s.scanStep(db.QueryRow(ctx, `SELECT `+stepCols+` FROM job_steps
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3`, org, jobID, stepID), now)
}

// StepCursor is the list cursor after st: its run order position (first claim, in
// microseconds since the epoch, then step id).
func StepCursor(st Step) string {
	return strconv.FormatInt(st.FirstStartedAt.UnixMicro(), 10) + ":" + st.StepID
}

// parseStepCursor reads a StepCursor ("" is the start).
func parseStepCursor(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	us, id, ok := strings.Cut(c, ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || !strata.ValidID(id) {
		return time.Time{}, "", strata.Invalid("cursor", "is not a cursor this list gave out (next_cursor)")
	}
	return time.UnixMicro(n).UTC(), id, nil
}

// PageSteps is a client's page of a job's steps in run order: after is a next_cursor of the
// previous page (StepCursor; another value is a FieldError for "cursor"), and a job that
// does not exist is ErrNotFound (ListSteps answers it an empty list).
func (s *Store) PageSteps(ctx context.Context, db pg.DBTX, org, jobID, after string, limit int) ([]Step, error) {
	if _, _, err := parseStepCursor(after); err != nil {
		return nil, err
	}
	if _, err := s.GetJob(ctx, db, org, jobID); err != nil {
		return nil, err
	}
	return s.ListSteps(ctx, db, org, jobID, after, limit)
}

// ListSteps lists a job's steps in run order (first claim, then step id) after the cursor
// (StepCursor of the previous page's last step; "" from the first).
func (s *Store) ListSteps(ctx context.Context, db pg.DBTX, org, jobID, after string, limit int) ([]Step, error) {
	now := s.Now()
	at, id, err := parseStepCursor(after)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+stepCols+` FROM job_steps
		WHERE org_id = $1 AND job_id = $2 AND ($3 = '' OR (first_started_at, step_id) > ($4, $3))
		ORDER BY first_started_at, step_id LIMIT $5`, org, jobID, id, at, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []Step
	for rows.Next() {
		st, err := s.scanStep(rows, now)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, pg.Interpret(rows.Err())
}
