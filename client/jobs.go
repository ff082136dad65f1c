package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Scope is the optional user/agent/session a call acts for (the org is the key's).
type Scope struct {
	UserID    string `json:"user_id,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
}

func (s Scope) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	for k, v := range map[string]string{"user_id": s.UserID, "agent_id": s.AgentID, "session_id": s.SessionID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Job is a durable job.
type Job struct {
	JobID             string          `json:"job_id"`
	Version           int64           `json:"version"`
	Goal              string          `json:"goal"`
	Status            string          `json:"status"`
	Owner             string          `json:"owner,omitempty"`
	UserID            string          `json:"user_id,omitempty"`
	AgentID           string          `json:"agent_id,omitempty"`
	SessionID         string          `json:"session_id,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
	Outcome           json.RawMessage `json:"outcome,omitempty"`
	CheckpointVersion int64           `json:"checkpoint_version"`
	ParentJobID       string          `json:"parent_job_id,omitempty"`
	ParentVersion     int64           `json:"parent_version,omitempty"`
	ParentEventSeq    int64           `json:"parent_event_seq,omitempty"`
	ProgressAt        time.Time       `json:"progress_at"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	FinishedAt        *time.Time      `json:"finished_at,omitempty"`
	// Stalled is set in ListJobs answers for stalled jobs.
	Stalled *StalledStep `json:"stalled,omitempty"`
}

// StalledStep says where a stalled job stalled.
type StalledStep struct {
	Reason         string          `json:"reason"`
	StepID         string          `json:"step_id,omitempty"`
	Status         string          `json:"status,omitempty"`
	Owner          string          `json:"owner,omitempty"`
	FencingToken   int64           `json:"fencing_token,omitempty"`
	Attempts       int             `json:"attempts,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Error          string          `json:"error,omitempty"`
	StalledFor     string          `json:"stalled_for"`
}

// JobSpec creates or updates a job.
type JobSpec struct {
	Goal     string          `json:"goal,omitempty"`
	Status   string          `json:"status,omitempty"`
	Owner    string          `json:"owner,omitempty"`
	Outcome  json.RawMessage `json:"outcome,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Scope
}

func jobPath(job string, rest ...string) string {
	p := "/v1/jobs/" + PathEscape(job)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func ifMatchHeader(v *int64) http.Header {
	if v == nil {
		return nil
	}
	return http.Header{"If-Match": {`"` + strconv.FormatInt(*v, 10) + `"`}}
}

// Version is a helper for optional If-Match arguments: client.Version(3).
func Version(v int64) *int64 { return &v }

// PutJob creates (created=true) or updates a job. ifMatch (optional) is the job record's
// version; Version(0) means it must not exist yet.
func (c *Client) PutJob(ctx context.Context, job string, spec JobSpec, ifMatch *int64) (j Job, created bool, err error) {
	m, err := c.Do(ctx, Call{Method: http.MethodPut, Path: jobPath(job), Body: spec, Header: ifMatchHeader(ifMatch)}, &j)
	return j, m.Status == http.StatusCreated, err
}

// GetJob reads a job.
func (c *Client) GetJob(ctx context.Context, job string) (Job, error) {
	var j Job
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job)}, &j)
	return j, err
}

// JobFilter selects jobs.
type JobFilter struct {
	Status  string
	Stalled bool
}

// ListJobs lists one page of jobs.
func (c *Client) ListJobs(ctx context.Context, f JobFilter, cursor string, limit int) (Page[Job], error) {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Stalled {
		q.Set("stalled", "true")
	}
	setPage(q, cursor, limit)
	var p Page[Job]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/jobs", Query: q}, &p)
	return p, err
}

// CompleteJob finishes a job: status completed (default), failed or cancelled.
func (c *Client) CompleteJob(ctx context.Context, job, status string, outcome any) (Job, error) {
	var j Job
	body := map[string]any{}
	if status != "" {
		body["status"] = status
	}
	if outcome != nil {
		body["outcome"] = outcome
	}
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "complete"), Body: body}, &j)
	return j, err
}

// StepInput is what a step runs on, recorded at claim time.
type StepInput struct {
	Tool   string          `json:"tool,omitempty"`
	Model  string          `json:"model,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Step is a step's record.
type Step struct {
	JobID          string          `json:"job_id"`
	StepID         string          `json:"step_id"`
	Status         string          `json:"status"`
	Owner          string          `json:"owner"`
	FencingToken   int64           `json:"fencing_token"`
	Attempts       int             `json:"attempts"`
	LeaseSeconds   int             `json:"lease_seconds"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at"`
	Lease          string          `json:"lease,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	Disposition    string          `json:"disposition,omitempty"`
	StartedAt      time.Time       `json:"started_at"`
	HeartbeatAt    time.Time       `json:"heartbeat_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	ClearedAt      *time.Time      `json:"cleared_at,omitempty"`
	ClearedBy      string          `json:"cleared_by,omitempty"`
	// History is the step's attempts where an answer includes them (resume: in-flight and
	// failed steps).
	History []Attempt `json:"attempt_history,omitempty"`
}

// Attempt is one claim of a step (every claim is kept): who held it under which token, the
// lease, the input, heartbeats and how it ended (Outcome: completed, failed, lease_lost,
// taken_over; empty for the current claim).
type Attempt struct {
	JobID           string          `json:"job_id"`
	StepID          string          `json:"step_id"`
	FencingToken    int64           `json:"fencing_token"`
	Attempt         int             `json:"attempt"`
	Claim           string          `json:"claim"`
	Owner           string          `json:"owner"`
	Input           json.RawMessage `json:"input,omitempty"`
	LeaseSeconds    int             `json:"lease_seconds"`
	AcquiredAt      time.Time       `json:"acquired_at"`
	LeaseExpiresAt  time.Time       `json:"lease_expires_at"`
	ReleasedAt      *time.Time      `json:"released_at,omitempty"`
	Heartbeats      int             `json:"heartbeats"`
	LastHeartbeatAt *time.Time      `json:"last_heartbeat_at,omitempty"`
	Outcome         string          `json:"outcome,omitempty"`
	Error           string          `json:"error,omitempty"`
	Disposition     string          `json:"disposition,omitempty"`
	Lease           string          `json:"lease,omitempty"`
	DurationMS      int64           `json:"duration_ms"`
}

// Claim is a step start's answer. Status "completed": the step already ran (Result);
// do not run it again. "claimed": run it and complete or fail it with FencingToken.
type Claim struct {
	Status         string          `json:"status"`
	FencingToken   int64           `json:"fencing_token"`
	Result         json.RawMessage `json:"result,omitempty"`
	Attempt        int             `json:"attempt"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Step           Step            `json:"step"`
}

// StartStep claims a step (lease + fencing token) or answers its stored result.
// leaseSeconds 0 means the server's default (60).
func (c *Client) StartStep(ctx context.Context, job, step, owner string, leaseSeconds int, input *StepInput) (Claim, error) {
	body := map[string]any{"owner": owner}
	if leaseSeconds > 0 {
		body["lease_seconds"] = leaseSeconds
	}
	if input != nil {
		body["input"] = input
	}
	var cl Claim
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "start"), Body: body}, &cl)
	return cl, err
}

// Heartbeat extends a step's lease.
func (c *Client) Heartbeat(ctx context.Context, job, step string, token int64, leaseSeconds int) (Step, error) {
	body := map[string]any{"fencing_token": token}
	if leaseSeconds > 0 {
		body["lease_seconds"] = leaseSeconds
	}
	var st Step
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "heartbeat"), Body: body}, &st)
	return st, err
}

// CompleteStep completes a step with its result (any JSON-encodable value).
func (c *Client) CompleteStep(ctx context.Context, job, step string, token int64, result any) (Step, error) {
	body := map[string]any{"fencing_token": token}
	if result != nil {
		body["result"] = result
	}
	var st Step
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "complete"), Body: body}, &st)
	return st, err
}

// FailStep fails a step: disposition "retryable" or "manual_review".
func (c *Client) FailStep(ctx context.Context, job, step string, token int64, errText, disposition string) (Step, error) {
	var st Step
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "fail"),
		Body: map[string]any{"fencing_token": token, "error": errText, "disposition": disposition}}, &st)
	return st, err
}

// ClearStep releases a manual_review failure (admin keys).
func (c *Client) ClearStep(ctx context.Context, job, step string) (Step, error) {
	var st Step
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "clear")}, &st)
	return st, err
}

// GetStep reads one step.
func (c *Client) GetStep(ctx context.Context, job, step string) (Step, error) {
	var st Step
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "steps", PathEscape(step))}, &st)
	return st, err
}

// ListSteps lists one page of a job's steps (by step id).
func (c *Client) ListSteps(ctx context.Context, job, cursor string, limit int) (Page[Step], error) {
	q := url.Values{}
	setPage(q, cursor, limit)
	var p Page[Step]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "steps"), Query: q}, &p)
	return p, err
}

// ListAttempts lists one page of a step's attempts, oldest first.
func (c *Client) ListAttempts(ctx context.Context, job, step, cursor string, limit int) (Page[Attempt], error) {
	q := url.Values{}
	setPage(q, cursor, limit)
	var p Page[Attempt]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "steps", PathEscape(step), "attempts"), Query: q}, &p)
	return p, err
}

// Checkpoint is one checkpoint version.
type Checkpoint struct {
	JobID        string          `json:"job_id"`
	Version      int64           `json:"version"`
	StoredIn     string          `json:"stored_in"`
	Goal         string          `json:"goal"`
	CurrentStep  string          `json:"current_step"`
	Done         json.RawMessage `json:"done,omitempty"`
	Pending      json.RawMessage `json:"pending,omitempty"`
	NextAction   string          `json:"next_action"`
	State        json.RawMessage `json:"state,omitempty"`
	WorkingState json.RawMessage `json:"working_state,omitempty"`
	EventSeq     int64           `json:"event_seq"`
	AgentID      string          `json:"agent_id,omitempty"`
	UserID       string          `json:"user_id,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
}

// CheckpointInput is the next checkpoint.
type CheckpointInput struct {
	Goal         string `json:"goal,omitempty"`
	CurrentStep  string `json:"current_step,omitempty"`
	Done         any    `json:"done,omitempty"`
	Pending      any    `json:"pending,omitempty"`
	NextAction   string `json:"next_action,omitempty"`
	State        any    `json:"state,omitempty"`
	WorkingState any    `json:"working_state,omitempty"`
	AgentID      string `json:"agent_id,omitempty"`
	UserID       string `json:"user_id,omitempty"`
}

// PutCheckpoint writes the next checkpoint version. ifMatch is the version it builds on
// (the resume's checkpoint version; 0 for the first): a stale one → 409 (IsConflict).
func (c *Client) PutCheckpoint(ctx context.Context, job string, in CheckpointInput, ifMatch int64) (Checkpoint, error) {
	var cp Checkpoint
	_, err := c.Do(ctx, Call{Method: http.MethodPut, Path: jobPath(job, "checkpoint"), Body: in, Header: ifMatchHeader(&ifMatch)}, &cp)
	return cp, err
}

// GetCheckpoint reads one checkpoint version.
func (c *Client) GetCheckpoint(ctx context.Context, job string, version int64) (Checkpoint, error) {
	var cp Checkpoint
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "checkpoints", strconv.FormatInt(version, 10))}, &cp)
	return cp, err
}

// ListCheckpoints lists checkpoint versions (summaries: no state documents).
func (c *Client) ListCheckpoints(ctx context.Context, job string, desc bool, cursor string, limit int) (Page[Checkpoint], error) {
	q := url.Values{}
	if desc {
		q.Set("order", "desc")
	}
	setPage(q, cursor, limit)
	var p Page[Checkpoint]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "checkpoints"), Query: q}, &p)
	return p, err
}

// Fork is a fork's answer.
type Fork struct {
	Job        Job        `json:"job"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

// ForkJob creates newJob from job's checkpoint version (owner "" keeps the parent's).
func (c *Client) ForkJob(ctx context.Context, job string, version int64, newJob, owner string) (Fork, error) {
	body := map[string]any{"new_job_id": newJob}
	if owner != "" {
		body["owner"] = owner
	}
	var f Fork
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "checkpoints", strconv.FormatInt(version, 10), "fork"), Body: body}, &f)
	return f, err
}

// CompletedStep is a step done, in a resume.
type CompletedStep struct {
	StepID       string          `json:"step_id"`
	Result       json.RawMessage `json:"result"`
	Attempts     int             `json:"attempts"`
	FencingToken int64           `json:"fencing_token"`
	FinishedAt   time.Time       `json:"finished_at"`
}

// Resume is everything needed to carry on with a job.
type Resume struct {
	Job             Job             `json:"job"`
	Checkpoint      *Checkpoint     `json:"checkpoint"`
	NextAction      string          `json:"next_action"`
	WorkingState    json.RawMessage `json:"working_state,omitempty"`
	CompletedSteps  []CompletedStep `json:"completed_steps"`
	InFlight        []Step          `json:"in_flight"`
	FailedSteps     []Step          `json:"failed_steps"`
	PendingHandoffs []Handoff       `json:"pending_handoffs"`
	StepsTruncated  bool            `json:"steps_truncated,omitempty"`
	Events          []Event         `json:"events"`
	LastEventSeq    int64           `json:"last_event_seq"`
}

// Done reports whether step completed, with its result.
func (r Resume) Done(step string) (json.RawMessage, bool) {
	for _, s := range r.CompletedSteps {
		if s.StepID == step {
			return s.Result, true
		}
	}
	return nil, false
}

// ResumeJob reads a job's resume view with its last events (events < 0: the server's
// default of 20).
func (c *Client) ResumeJob(ctx context.Context, job string, events int) (Resume, error) {
	q := url.Values{}
	if events >= 0 {
		q.Set("events", strconv.Itoa(events))
	}
	var r Resume
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "resume"), Query: q}, &r)
	return r, err
}

// Handoff is an offer of a job to another agent.
type Handoff struct {
	JobID      string          `json:"job_id"`
	ID         string          `json:"id"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	Context    json.RawMessage `json:"context,omitempty"`
	Status     string          `json:"status"`
	SentCount  int             `json:"sent_count"`
	CreatedAt  time.Time       `json:"created_at"`
	LastSentAt time.Time       `json:"last_sent_at"`
	AckedAt    *time.Time      `json:"acked_at,omitempty"`
}

// CreateHandoff offers job to another agent (id "" lets the server choose).
func (c *Client) CreateHandoff(ctx context.Context, job, id, from, to string, hctx any) (Handoff, error) {
	body := map[string]any{"from": from, "to": to}
	if id != "" {
		body["id"] = id
	}
	if hctx != nil {
		body["context"] = hctx
	}
	var h Handoff
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "handoffs"), Body: body}, &h)
	return h, err
}

// ListHandoffs lists a job's handoffs (status "", "pending" or "acknowledged").
func (c *Client) ListHandoffs(ctx context.Context, job, status, cursor string, limit int) (Page[Handoff], error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	setPage(q, cursor, limit)
	var p Page[Handoff]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "handoffs"), Query: q}, &p)
	return p, err
}

// Ack is an acknowledged handoff with the job it moved.
type Ack struct {
	Handoff Handoff `json:"handoff"`
	Job     Job     `json:"job"`
}

// AckHandoff acknowledges a handoff as agent (its `to`).
func (c *Client) AckHandoff(ctx context.Context, job, id, agent string) (Ack, error) {
	var a Ack
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "handoffs", PathEscape(id), "ack"),
		Body: map[string]any{"agent_id": agent}}, &a)
	return a, err
}
