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

// The step operations' locks (lockJobStep), built once.
var (
	lockJobSQL  = `SELECT ` + jobCols + ` FROM jobs WHERE org_id = $1 AND job_id = $2 FOR NO KEY UPDATE`
	lockStepSQL = `SELECT ` + stepCols + ` FROM job_steps WHERE org_id = $1 AND job_id = $2 AND step_id = $3 FOR UPDATE`
)

// lockJobStep locks the job, which must be running, then its step, in that order (every
// step operation takes them so), and returns the step read under its lock (ErrNotFound when
// it was never claimed) with the time after both locks were granted, which the operation
// then writes. When db batches (a pgx.Tx), both locks go in one round trip: the step's lock
// runs behind the job's in the same pipeline, so the job's row lock is held for one round
// trip fewer by every step operation (issue 42: they queue on it). A job that is missing
// or not running locks nothing the caller keeps: its error rolls the transaction back.
func (s *Store) lockJobStep(ctx context.Context, db pg.DBTX, org, jobID, stepID string) (Job, Step, time.Time, error) {
	var j Job
	var st Step
	var jobErr, stepErr error
	if b, ok := db.(batcher); ok {
		batch := &pgx.Batch{}
		batch.Queue(lockJobSQL, org, jobID).QueryRow(func(row pgx.Row) error { j, jobErr = scanJob(row); return nil })
		batch.Queue(lockStepSQL, org, jobID, stepID).QueryRow(func(row pgx.Row) error {
			st, stepErr = s.scanStep(row, time.Time{})
			return nil
		})
		if err := b.SendBatch(ctx, batch).Close(); err != nil {
			return Job{}, Step{}, time.Time{}, pg.Interpret(err)
		}
	} else {
		j, jobErr = scanJob(db.QueryRow(ctx, lockJobSQL, org, jobID))
		if jobErr == nil && j.Status == StatusRunning {
			st, stepErr = s.scanStep(db.QueryRow(ctx, lockStepSQL, org, jobID, stepID), time.Time{})
		}
	}
	if jobErr != nil {
		return Job{}, Step{}, time.Time{}, jobErr
	}
	if j.Status != StatusRunning {
		return Job{}, Step{}, time.Time{}, notRunning(j)
	}
	now := s.Now()
	if stepErr != nil {
		return j, Step{}, now, stepErr
	}
	st.normalise(now)
	return j, st, now, nil
}

// touchJob is the CTE of a step write that records the job's progress (jobs.progress_at,
// which the sweeper and lists read) in the write's own statement; now is the parameter
// holding the write's time.
func touchJob(now string) string {
	return `UPDATE jobs SET progress_at = ` + now + ` WHERE org_id = $1 AND job_id = $2 AND progress_at < ` + now
}

// StepWrite is a step operation's write, decided under the operation's locks (lockJobStep)
// and not yet sent: one statement that writes the step, its attempt and the job's progress,
// and returns the step. Send runs it on the operation's transaction; Queue puts it in a batch
// that commits it, so that a caller who also has the operation's audit record can send the
// write, the record and COMMIT in one round trip (pg.Session.CommitInTrip).
type StepWrite struct {
	s    *Store
	now  time.Time
	sql  string
	args []any
	st   Step
	err  error
}

func (s *Store) stepWrite(now time.Time, sql string, args ...any) *StepWrite {
	return &StepWrite{s: s, now: now, sql: sql, args: args}
}

// Send runs the write on db and returns the step it wrote.
func (w *StepWrite) Send(ctx context.Context, db pg.DBTX) (Step, error) {
	return w.s.scanStep(db.QueryRow(ctx, w.sql, w.args...), w.now)
}

// Queue puts the write in b; Result answers once b ran.
func (w *StepWrite) Queue(b *pgx.Batch) {
	w.err = errors.New("jobs: the step write's batch did not run")
	b.Queue(w.sql, w.args...).QueryRow(func(row pgx.Row) error {
		w.st, w.err = w.s.scanStep(row, w.now)
		return w.err
	})
}

// Result is the step a queued write wrote, once its batch ran.
func (w *StepWrite) Result() (Step, error) { return w.st, w.err }

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
	c, w, err := s.PrepareStart(ctx, db, org, jobID, stepID, in)
	if err != nil || w == nil {
		return c, err
	}
	st, err := w.Send(ctx, db)
	if err != nil {
		return Claim{}, err
	}
	return ClaimOf(st), nil
}

// ClaimOf is the answer of a Start whose write (PrepareStart's StepWrite) claimed st.
func ClaimOf(st Step) Claim {
	exp := st.LeaseExpiresAt
	return Claim{Status: ClaimClaimed, FencingToken: st.FencingToken, Attempt: st.Attempts, LeaseExpiresAt: &exp, Step: st}
}

// PrepareStart is Start up to its write: it checks the input, takes the locks and decides.
// It returns the final answer and no write when the step has completed (nothing is written),
// else the claim's write, not yet sent, whose step ClaimOf turns into the answer.
func (s *Store) PrepareStart(ctx context.Context, db pg.DBTX, org, jobID, stepID string, in StartInput) (Claim, *StepWrite, error) {
	if err := strata.CheckJSON("input.params", in.Input.Params); err != nil {
		return Claim{}, nil, err
	}
	for _, f := range []struct{ name, v string }{{"input.tool", in.Input.Tool}, {"input.model", in.Input.Model}} {
		if err := strata.CheckText(f.name, f.v); err != nil {
			return Claim{}, nil, err
		}
	}
	secs, err := checkLease("lease_seconds", in.LeaseSeconds)
	if err != nil {
		return Claim{}, nil, err
	}
	input, err := json.Marshal(in.Input)
	if err != nil {
		return Claim{}, nil, strata.Invalid("input", "is not valid JSON")
	}
	j, cur, now, err := s.lockJobStep(ctx, db, org, jobID, stepID)
	exists := err == nil
	if err != nil && (now.IsZero() || !errors.Is(err, strata.ErrNotFound)) { // the job's error, or the step's read failed
		return Claim{}, nil, err
	}
	lease := now.Add(time.Duration(secs) * time.Second)
	if exists && cur.Status == StepCompleted {
		return Claim{Status: ClaimCompleted, FencingToken: cur.FencingToken, Result: cur.Result, Attempt: cur.Attempts, Step: cur}, nil, nil
	}
	if j.Owner != "" && in.Owner != j.Owner {
		return Claim{}, nil, strata.Conflict("job "+jobID+" is owned by "+quoteOr(j.Owner, "")+"; only its owner claims its steps (hand it off first)",
			map[string]any{"owner": j.Owner})
	}
	switch {
	case !exists:
		return Claim{}, s.stepWrite(now, stepReturning(`INSERT INTO job_steps (org_id, job_id, step_id, status, owner,
				fencing_token, attempts, lease_seconds, lease_expires_at, input, started_at, heartbeat_at, first_started_at)
			VALUES ($1, $2, $3, 'running', $4, 1, 1, $5, $6, $7::jsonb, $8, $8, $8) RETURNING *`, openAttempt(ClaimNew), touchJob("$8")),
			org, jobID, stepID, in.Owner, secs, lease, string(input), now), nil
	case cur.Status == StepRunning && cur.Owner == in.Owner:
		// The holder asks again (a retry, or a restart with the same owner id): same claim.
		return Claim{}, s.stepWrite(now, stepReturning(`UPDATE job_steps SET lease_seconds = $4, heartbeat_at = $5,
				lease_expires_at = greatest(lease_expires_at, $6)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
			`UPDATE job_step_attempts SET lease_seconds = $4, lease_expires_at = greatest(lease_expires_at, $6)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7`, touchJob("$5")),
			org, jobID, stepID, secs, now, lease, cur.FencingToken), nil
	case cur.Status == StepRunning && cur.Lease == "live":
		return Claim{}, nil, &strata.ConflictError{
			Msg: "step " + stepID + " is held by " + quoteOr(cur.Owner, "") + " until " + cur.LeaseExpiresAt.Format(time.RFC3339Nano) +
				"; retry after that or ask the holder",
			Details: map[string]any{"holder": cur.Owner, "until": cur.LeaseExpiresAt, "attempts": cur.Attempts},
		}
	case cur.Status == StepFailed && cur.Disposition == DispositionManualReview:
		return Claim{}, nil, strata.Conflict("step "+stepID+" failed and waits for manual review; an operator must clear it (POST .../steps/"+stepID+"/clear) before it can run again",
			map[string]any{"status": cur.Status, "disposition": cur.Disposition, "error": cur.Error, "input": cur.Input})
	default: // expired lease (takeover), or failed retryable / cleared: a new claim
		// A taken-over claim's attempt ends lease_lost at its lease's expiry; a failed one has
		// ended already.
		claim := ClaimRetry
		if cur.Status == StepRunning {
			claim = ClaimTakeover
		}
		return Claim{}, s.stepWrite(now, stepReturning(`UPDATE job_steps SET status = 'running', owner = $4,
				fencing_token = fencing_token + 1, attempts = attempts + 1, lease_seconds = $5, lease_expires_at = $6,
				input = $7::jsonb, result = NULL, error = NULL, disposition = NULL, started_at = $8, heartbeat_at = $8,
				finished_at = NULL
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
			`UPDATE job_step_attempts SET outcome = 'lease_lost', released_at = least(lease_expires_at, $8)
			WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $9 AND outcome IS NULL`,
			openAttempt(claim), touchJob("$8")),
			org, jobID, stepID, in.Owner, secs, lease, string(input), now, cur.FencingToken), nil
	}
}

// Heartbeat extends the lease of the claim token names by leaseSeconds (0: the claim's own
// lease length). An expired lease that nobody took over may still be extended: the token is
// what counts.
func (s *Store) Heartbeat(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, leaseSeconds int) (Step, error) {
	return sendPrepared(ctx, db)(s.PrepareHeartbeat(ctx, db, org, jobID, stepID, token, leaseSeconds))
}

// PrepareHeartbeat is Heartbeat up to its write: it checks the input, takes the locks and
// decides. It returns the final answer and no write when the call repeats one that took
// effect (nothing is written), else the write, not yet sent.
func (s *Store) PrepareHeartbeat(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, leaseSeconds int) (Step, *StepWrite, error) {
	if leaseSeconds != 0 {
		if _, err := checkLease("lease_seconds", leaseSeconds); err != nil {
			return Step{}, nil, err
		}
	}
	_, cur, now, err := s.lockJobStep(ctx, db, org, jobID, stepID)
	if err != nil {
		return Step{}, nil, err
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, nil, staleToken(cur, token)
	}
	if leaseSeconds == 0 {
		leaseSeconds = cur.LeaseSeconds
	}
	return Step{}, s.stepWrite(now, stepReturning(`UPDATE job_steps SET heartbeat_at = $4, lease_seconds = $5,
			lease_expires_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET heartbeats = heartbeats + 1, last_heartbeat_at = $4, lease_seconds = $5,
			lease_expires_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7`, touchJob("$4")),
		org, jobID, stepID, now, leaseSeconds, now.Add(time.Duration(leaseSeconds)*time.Second), token), nil
}

// Complete stores the step's result under the current token. Completing again with the same
// token answers the step as stored (a retry after a lost response).
func (s *Store) Complete(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, result json.RawMessage) (Step, error) {
	return sendPrepared(ctx, db)(s.PrepareComplete(ctx, db, org, jobID, stepID, token, result))
}

// PrepareComplete is Complete up to its write: it checks the input, takes the locks and
// decides. It returns the final answer and no write when the call repeats one that took
// effect (nothing is written), else the write, not yet sent.
func (s *Store) PrepareComplete(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, result json.RawMessage) (Step, *StepWrite, error) {
	if err := strata.CheckJSON("result", result); err != nil {
		return Step{}, nil, err
	}
	_, cur, now, err := s.lockJobStep(ctx, db, org, jobID, stepID)
	if err != nil {
		return Step{}, nil, err
	}
	if cur.FencingToken == token && cur.Status == StepCompleted {
		return cur, nil, nil
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, nil, staleToken(cur, token)
	}
	return Step{}, s.stepWrite(now, stepReturning(`UPDATE job_steps SET status = 'completed', result = $4::jsonb,
			finished_at = $5, heartbeat_at = $5
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET outcome = 'completed', released_at = $5
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $6 AND outcome IS NULL`, touchJob("$5")),
		org, jobID, stepID, string(orEmpty(result, "null")), now, token), nil
}

// Fail records a failure under the current token with a disposition: retryable (Start
// claims it again) or manual_review (Start refuses until ClearStep). Failing again with the
// same token and disposition answers the step as stored.
func (s *Store) Fail(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, msg, disposition string) (Step, error) {
	return sendPrepared(ctx, db)(s.PrepareFail(ctx, db, org, jobID, stepID, token, msg, disposition))
}

// PrepareFail is Fail up to its write: it checks the input, takes the locks and
// decides. It returns the final answer and no write when the call repeats one that took
// effect (nothing is written), else the write, not yet sent.
func (s *Store) PrepareFail(ctx context.Context, db pg.DBTX, org, jobID, stepID string, token int64, msg, disposition string) (Step, *StepWrite, error) {
	if err := strata.CheckText("error", msg); err != nil {
		return Step{}, nil, err
	}
	if disposition != DispositionRetryable && disposition != DispositionManualReview {
		return Step{}, nil, strata.Invalid("disposition", "must be retryable or manual_review")
	}
	_, cur, now, err := s.lockJobStep(ctx, db, org, jobID, stepID)
	if err != nil {
		return Step{}, nil, err
	}
	if cur.FencingToken == token && cur.Status == StepFailed && cur.Disposition == disposition && cur.ClearedAt == nil {
		return cur, nil, nil
	}
	if cur.Status != StepRunning || cur.FencingToken != token {
		return Step{}, nil, staleToken(cur, token)
	}
	return Step{}, s.stepWrite(now, stepReturning(`UPDATE job_steps SET status = 'failed', error = $4,
			disposition = $5, finished_at = $6, heartbeat_at = $6, cleared_at = NULL, cleared_by = NULL
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 RETURNING *`,
		`UPDATE job_step_attempts SET outcome = 'failed', error = $4, disposition = $5, released_at = $6
		WHERE org_id = $1 AND job_id = $2 AND step_id = $3 AND fencing_token = $7 AND outcome IS NULL`, touchJob("$6")),
		org, jobID, stepID, msg, disposition, now, token), nil
}

// sendPrepared finishes a step operation from its Prepare method's results: the final
// answer, or the write sent on db.
func sendPrepared(ctx context.Context, db pg.DBTX) func(Step, *StepWrite, error) (Step, error) {
	return func(st Step, w *StepWrite, err error) (Step, error) {
		if err != nil || w == nil {
			return st, err
		}
		return w.Send(ctx, db)
	}
}

// ClearStep is the operator's release of a manual_review failure: the step becomes
// failed/retryable (cleared_at, cleared_by set) and Start may claim it again. Clearing a
// step that is already cleared answers it as it is.
func (s *Store) ClearStep(ctx context.Context, db pg.DBTX, org, jobID, stepID, by string) (Step, error) {
	_, cur, now, err := s.lockJobStep(ctx, db, org, jobID, stepID)
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
