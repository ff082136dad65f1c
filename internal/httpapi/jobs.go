package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/strata"
)

// Durable jobs (docs/jobs.md): the job record, checkpoints, leased steps, resume, handoffs,
// completion. The jobs tier owns its tables and checks what it stores; the episodic tier's
// log is composed in here: a new job gets an (empty) event log, finishing a job or writing a
// checkpoint records the log's last seq, a fork forks the log at the checkpoint's seq,
// resume shows the last events.
//
// Why here and not in the jobs tier: a job and its log live in two tiers that do not know
// each other (STYLE.md: tiers never import each other; composition happens in one place).
// Making jobs own "a job with its log" would make it depend on the episodic tier (or an
// interface shaped exactly like it) for four calls; the composition is small, and it stays
// in one place, these handlers (eventHead, EnsureJob, Fork).

// JobPath is the {job} path parameter.
type JobPath struct {
	Job string `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen job id."`
}

// StepPath is the {job} and {step} path parameters.
type StepPath struct {
	JobPath
	Step string `path:"step" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen step id."`
}

type putJobInput struct {
	JobPath
	IfMatch string `header:"If-Match" doc:"The job record's version (ETag) this write expects; \"0\" means it must not exist yet."`
	Body    struct {
		Goal     string          `json:"goal,omitempty" maxLength:"10000" doc:"What the job is for."`
		Status   string          `json:"status,omitempty" enum:"running,completed,failed,cancelled" doc:"Default running. Moving to a terminal status finishes the job like POST .../complete."`
		Owner    string          `json:"owner,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The owning agent; set on create, afterwards moved only by an acknowledged handoff."`
		Outcome  json.RawMessage `json:"outcome,omitempty" doc:"With a terminal status: what came of it (any JSON)."`
		Metadata json.RawMessage `json:"metadata,omitempty" doc:"Free-form JSON object."`
		ScopeBody
	}
}

type jobOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   jobs.Job
}

type listJobsInput struct {
	Status  string `query:"status" enum:"running,completed,failed,cancelled" doc:"Only jobs with this status."`
	Stalled bool   `query:"stalled" doc:"Only running jobs whose in-flight lease expired or that made no progress for STRATA_STALLED_AFTER, each with the step where it stalled and its input."`
	Page
}

type listJobsOutput struct {
	Body List[jobs.JobListItem]
}

type completeJobInput struct {
	JobPath
	Body struct {
		Status  string          `json:"status,omitempty" enum:"completed,failed,cancelled" doc:"Default completed."`
		Outcome json.RawMessage `json:"outcome,omitempty" doc:"What came of the job (any JSON); consolidation summarises it."`
	}
}

type putCheckpointInput struct {
	JobPath
	IfMatch string `header:"If-Match" doc:"The latest checkpoint version this write builds on (\"0\": none yet). Stale → 409, nothing written. Agents should always send it."`
	Body    struct {
		Goal         string          `json:"goal,omitempty" maxLength:"10000"`
		CurrentStep  string          `json:"current_step,omitempty" maxLength:"200"`
		Done         json.RawMessage `json:"done,omitempty" doc:"Items done (JSON array)."`
		Pending      json.RawMessage `json:"pending,omitempty" doc:"Items pending (JSON array)."`
		NextAction   string          `json:"next_action,omitempty" maxLength:"10000"`
		State        json.RawMessage `json:"state,omitempty" doc:"Free-form task state (JSON object)."`
		WorkingState json.RawMessage `json:"working_state,omitempty" doc:"Snapshot of the session's working state (any JSON); resume returns the latest checkpoint's."`
		AgentID      string          `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent writing it."`
		UserID       string          `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id."`
	}
}

type checkpointOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   jobs.Checkpoint
}

type listCheckpointsInput struct {
	JobPath
	Order string `query:"order" enum:"asc,desc" doc:"asc (default, oldest first) or desc (newest first)."`
	Page
}

type listCheckpointsOutput struct {
	Body List[jobs.CheckpointSummary]
}

// CheckpointPath is the {job} and {version} path parameters.
type CheckpointPath struct {
	JobPath
	Version int64 `path:"version" minimum:"1" doc:"Checkpoint version."`
}

type forkInput struct {
	CheckpointPath
	Body struct {
		NewJobID string `json:"new_job_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Id of the new job."`
		Owner    string `json:"owner,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Owner of the fork (default: the parent's)."`
	}
}

type forkOutput struct {
	Status int
	Body   struct {
		Job        jobs.Job        `json:"job"`
		Checkpoint jobs.Checkpoint `json:"checkpoint" doc:"The checkpoint the fork starts from (its latest)."`
	}
}

type startStepInput struct {
	StepPath
	Body struct {
		Owner        string         `json:"owner" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent (or worker) claiming the step."`
		LeaseSeconds int            `json:"lease_seconds,omitempty" minimum:"1" maximum:"86400" doc:"Lease length (default 60). Heartbeat before it runs out."`
		Input        jobs.StepInput `json:"input,omitempty" doc:"What the step runs on, recorded before it executes."`
	}
}

type claimOutput struct {
	Body jobs.Claim
}

type heartbeatInput struct {
	StepPath
	Body struct {
		FencingToken int64 `json:"fencing_token" minimum:"1"`
		LeaseSeconds int   `json:"lease_seconds,omitempty" minimum:"1" maximum:"86400" doc:"New lease length from now (default: the claim's)."`
	}
}

type completeStepInput struct {
	StepPath
	Body struct {
		FencingToken int64           `json:"fencing_token" minimum:"1"`
		Result       json.RawMessage `json:"result,omitempty" doc:"The step's result (any JSON); start answers it from now on."`
	}
}

type failStepInput struct {
	StepPath
	Body struct {
		FencingToken int64  `json:"fencing_token" minimum:"1"`
		Error        string `json:"error" maxLength:"10000" doc:"What went wrong."`
		Disposition  string `json:"disposition" enum:"retryable,manual_review" doc:"retryable: start may claim it again; manual_review: not until an operator clears it."`
	}
}

type stepOutput struct {
	Body jobs.Step
}

type listStepsInput struct {
	JobPath
	Page
}

type listStepsOutput struct {
	Body List[jobs.Step]
}

type resumeInput struct {
	JobPath
	Events int `query:"events" minimum:"0" maximum:"1000" default:"20" doc:"How many of the last events to include (default 20; 0: none)."`
}

type resumeBody struct {
	jobs.Resume
	Events       []episodic.Event `json:"events" doc:"The job's last events (oldest first), from its episodic log."`
	LastEventSeq int64            `json:"last_event_seq" doc:"The log's last seq."`
}

type resumeOutput struct {
	ETag string `header:"ETag" doc:"The latest checkpoint version (send it as If-Match with the next checkpoint)."`
	Body resumeBody
}

type createHandoffInput struct {
	JobPath
	Body struct {
		ID      string          `json:"id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen id (default: assigned). Sending the same id again is a re-send."`
		From    string          `json:"from" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The handing agent (the job's owner, when it has one)."`
		To      string          `json:"to" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The receiving agent."`
		Context json.RawMessage `json:"context,omitempty" doc:"What the receiver needs to know (JSON object)."`
	}
}

type handoffOutput struct {
	Status int
	Body   jobs.Handoff
}

type listHandoffsInput struct {
	JobPath
	Status string `query:"status" enum:"pending,acknowledged"`
	Page
}

type listHandoffsOutput struct {
	Body List[jobs.Handoff]
}

type ackHandoffInput struct {
	JobPath
	ID   string `path:"id" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	Body struct {
		AgentID string `json:"agent_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The acknowledging agent: must be the handoff's to."`
	}
}

type ackOutput struct {
	Body struct {
		Handoff jobs.Handoff `json:"handoff"`
		Job     jobs.Job     `json:"job"`
	}
}

// ifMatchPtr parses an optional If-Match.
func ifMatchPtr(h string) (*int64, error) {
	v, ok, err := ifMatch(h)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// eventHead is the job's episodic last seq (0 when it has no log yet), for a write that
// records it. check is the write's own input check (JobSpec.Check, ...): bad input is
// refused before the head is read, so it costs no round trip.
func (s *Server) eventHead(ctx context.Context, r *Request, job string, check error) (int64, error) {
	if check != nil {
		return 0, check
	}
	h, err := s.events.Head(ctx, r.Tx, r.Org, job)
	if errors.Is(err, strata.ErrNotFound) {
		return 0, nil
	}
	return h.LastSeq, err
}

var opPutJob = huma.Operation{
	OperationID: "put-job", Method: http.MethodPut, Path: "/v1/jobs/{job}", Tags: []string{"jobs"},
	Summary:     "Create or update a job",
	Description: "201 on create, 200 on update. The job's version is its ETag; send If-Match to update safely.",
}

func (s *Server) putJob(ctx context.Context, r *Request, in *putJobInput) (*jobOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	b := in.Body
	spec := jobs.JobSpec{Goal: b.Goal, Status: b.Status, Owner: b.Owner, UserID: b.UserID, AgentID: b.AgentID,
		SessionID: b.SessionID, Metadata: b.Metadata, Outcome: b.Outcome}
	if spec.EventSeq, err = s.eventHead(ctx, r, in.Job, spec.Check()); err != nil {
		return nil, err
	}
	j, created, err := s.jobs.PutJob(ctx, r.Tx, r.Org, in.Job, spec, im)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if err := s.events.EnsureJob(ctx, r.Tx, r.Org, in.Job); err != nil {
			return nil, err
		}
	}
	return &jobOutput{Status: status, ETag: etag(j.Version), Body: j}, nil
}

var opGetJob = huma.Operation{
	OperationID: "get-job", Method: http.MethodGet, Path: "/v1/jobs/{job}", Tags: []string{"jobs"}, Summary: "Read a job",
}

func (s *Server) getJob(ctx context.Context, r *Request, in *JobPath) (*jobOutput, error) {
	j, err := s.jobs.GetJob(ctx, r.Tx, r.Org, in.Job)
	if err != nil {
		return nil, err
	}
	return &jobOutput{Status: http.StatusOK, ETag: etag(j.Version), Body: j}, nil
}

var opListJobs = huma.Operation{
	OperationID: "list-jobs", Method: http.MethodGet, Path: "/v1/jobs", Tags: []string{"jobs"},
	Summary:     "List jobs (by status; stalled ones with where they stalled)",
	Description: "`?status=running&stalled=true` is what an operator checks after a deployment or an outage: running jobs whose in-flight lease expired, or that made no progress for STRATA_STALLED_AFTER, each with the step where it stalled and that step's input.",
}

func (s *Server) listJobs(ctx context.Context, r *Request, in *listJobsInput) (*listJobsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	items, err := s.jobs.ListJobs(ctx, r.Tx, r.Org, jobs.ListFilter{Status: in.Status, Stalled: in.Stalled, After: in.Cursor, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	out := &listJobsOutput{Body: page(items, limit, func(j jobs.JobListItem) string { return j.JobID })}
	return out, nil
}

var opCompleteJob = huma.Operation{
	OperationID: "complete-job", Method: http.MethodPost, Path: "/v1/jobs/{job}/complete", Tags: []string{"jobs"},
	Summary: "Finish a job (completed, failed or cancelled)",
	Description: "Marks the job done and, in the same transaction, enqueues its consolidation into a semantic \"job\" memory " +
		"(a job_outbox row of kind consolidate_job). Finishing again with the same status answers the job as it is.",
}

func (s *Server) completeJob(ctx context.Context, r *Request, in *completeJobInput) (*jobOutput, error) {
	seq, err := s.eventHead(ctx, r, in.Job, jobs.CheckCompletion(in.Body.Status, in.Body.Outcome))
	if err != nil {
		return nil, err
	}
	j, err := s.jobs.CompleteJob(ctx, r.Tx, r.Org, in.Job, in.Body.Status, in.Body.Outcome, seq)
	if err != nil {
		return nil, err
	}
	return &jobOutput{Status: http.StatusOK, ETag: etag(j.Version), Body: j}, nil
}

var opPutCheckpoint = huma.Operation{
	OperationID: "put-checkpoint", Method: http.MethodPut, Path: "/v1/jobs/{job}/checkpoint", Tags: []string{"jobs"},
	Summary:       "Write the job's next checkpoint version",
	Description:   "Every write is a new version (201). If-Match names the version it builds on; a stale one → 409 and nothing is written.",
	DefaultStatus: http.StatusCreated,
}

func (s *Server) putCheckpoint(ctx context.Context, r *Request, in *putCheckpointInput) (*checkpointOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	b := in.Body
	cp := jobs.CheckpointInput{Goal: b.Goal, CurrentStep: b.CurrentStep, Done: b.Done, Pending: b.Pending,
		NextAction: b.NextAction, State: b.State, WorkingState: b.WorkingState, AgentID: b.AgentID, UserID: b.UserID}
	if cp.EventSeq, err = s.eventHead(ctx, r, in.Job, cp.Check()); err != nil {
		return nil, err
	}
	c, err := s.jobs.PutCheckpoint(ctx, r.Tx, r.Org, in.Job, cp, im)
	if err != nil {
		return nil, err
	}
	return &checkpointOutput{Status: http.StatusCreated, ETag: etag(c.Version), Body: c}, nil
}

var opListCheckpoints = huma.Operation{
	OperationID: "list-checkpoints", Method: http.MethodGet, Path: "/v1/jobs/{job}/checkpoints", Tags: []string{"jobs"},
	Summary:     "List a job's checkpoint versions",
	Description: "Summaries without the state documents; read one version for those. A fork lists its parent's versions up to the fork point, then its own.",
}

func (s *Server) listCheckpoints(ctx context.Context, r *Request, in *listCheckpointsInput) (*listCheckpointsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	items, err := s.jobs.ListCheckpoints(ctx, r.Tx, r.Org, in.Job, in.Cursor, in.Order == "desc", limit+1)
	if err != nil {
		return nil, err
	}
	return &listCheckpointsOutput{Body: page(items, limit, func(c jobs.CheckpointSummary) string {
		return strconv.FormatInt(c.Version, 10)
	})}, nil
}

var opGetCheckpoint = huma.Operation{
	OperationID: "get-checkpoint", Method: http.MethodGet, Path: "/v1/jobs/{job}/checkpoints/{version}", Tags: []string{"jobs"},
	Summary: "Read one checkpoint version (time travel)",
}

func (s *Server) getCheckpoint(ctx context.Context, r *Request, in *CheckpointPath) (*checkpointOutput, error) {
	c, err := s.jobs.GetCheckpoint(ctx, r.Tx, r.Org, in.Job, in.Version)
	if err != nil {
		return nil, err
	}
	return &checkpointOutput{Status: http.StatusOK, ETag: etag(c.Version), Body: c}, nil
}

var opForkCheckpoint = huma.Operation{
	OperationID: "fork-checkpoint", Method: http.MethodPost, Path: "/v1/jobs/{job}/checkpoints/{version}/fork", Tags: []string{"jobs"},
	Summary: "Fork a job from a checkpoint version",
	Description: "Creates new_job_id, a running job whose history starts at this version: it shares the parent's checkpoints " +
		"up to the version and the parent's events up to that checkpoint's event seq (nothing is copied), plus the " +
		"steps completed by then. Writes to the fork never show in the parent.",
	DefaultStatus: http.StatusCreated,
}

func (s *Server) forkCheckpoint(ctx context.Context, r *Request, in *forkInput) (*forkOutput, error) {
	j, cp, err := s.jobs.Fork(ctx, r.Tx, r.Org, in.Job, in.Version, jobs.ForkInput{NewJobID: in.Body.NewJobID, Owner: in.Body.Owner})
	if err != nil {
		return nil, err
	}
	if err := s.events.EnsureJob(ctx, r.Tx, r.Org, in.Job); err != nil {
		return nil, err
	}
	if _, err := s.events.Fork(ctx, r.Tx, r.Org, in.Job, j.JobID, j.ParentEventSeq); err != nil {
		return nil, err
	}
	out := &forkOutput{Status: http.StatusCreated}
	out.Body.Job, out.Body.Checkpoint = j, cp
	return out, nil
}

var opStartStep = huma.Operation{
	OperationID: "start-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/start", Tags: []string{"jobs"},
	Summary: "Claim a step (lease + fencing token), or get its stored result",
	Description: "status claimed: you hold a lease; run the step and complete or fail it with the fencing_token. " +
		"status completed: it already ran; here is its result; do not run it again. A live lease of another owner → 409 " +
		"naming holder and until; an expired one is taken over with a greater token. The holder asking again gets the " +
		"same claim. A manual_review failure → 409 until an operator clears it.",
}

func (s *Server) startStep(ctx context.Context, r *Request, in *startStepInput) (*claimOutput, error) {
	b := in.Body
	c, err := s.jobs.Start(ctx, r.Tx, r.Org, in.Job, in.Step, jobs.StartInput{Owner: b.Owner, LeaseSeconds: b.LeaseSeconds, Input: b.Input})
	if err != nil {
		return nil, err
	}
	return &claimOutput{Body: c}, nil
}

var opHeartbeatStep = huma.Operation{
	OperationID: "heartbeat-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/heartbeat", Tags: []string{"jobs"},
	Summary: "Extend a step's lease (current fencing token only)",
}

func (s *Server) heartbeatStep(ctx context.Context, r *Request, in *heartbeatInput) (*stepOutput, error) {
	st, err := s.jobs.Heartbeat(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.LeaseSeconds)
	if err != nil {
		return nil, err
	}
	return &stepOutput{Body: st}, nil
}

var opCompleteStep = huma.Operation{
	OperationID: "complete-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/complete", Tags: []string{"jobs"},
	Summary:     "Complete a step with its result (current fencing token only)",
	Description: "A stale token → 409 and nothing is written. Completing again with the same token answers the stored step.",
}

func (s *Server) completeStep(ctx context.Context, r *Request, in *completeStepInput) (*stepOutput, error) {
	st, err := s.jobs.Complete(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.Result)
	if err != nil {
		return nil, err
	}
	return &stepOutput{Body: st}, nil
}

var opFailStep = huma.Operation{
	OperationID: "fail-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/fail", Tags: []string{"jobs"},
	Summary: "Fail a step: retryable, or manual_review (current fencing token only)",
}

func (s *Server) failStep(ctx context.Context, r *Request, in *failStepInput) (*stepOutput, error) {
	st, err := s.jobs.Fail(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.Error, in.Body.Disposition)
	if err != nil {
		return nil, err
	}
	return &stepOutput{Body: st}, nil
}

var opClearStep = huma.Operation{
	OperationID: "clear-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/clear", Tags: []string{"jobs"},
	Summary:     "Clear a manual_review failure (operators: admin keys)",
	Description: "The step becomes failed/retryable (cleared_at, cleared_by record who released it), so start may claim it again.",
}

func (s *Server) clearStep(ctx context.Context, r *Request, in *StepPath) (*stepOutput, error) {
	p := r.Caller
	st, err := s.jobs.ClearStep(ctx, r.Tx, r.Org, in.Job, in.Step, p.KeyID)
	if err != nil {
		return nil, err
	}
	return &stepOutput{Body: st}, nil
}

var opGetStep = huma.Operation{
	OperationID: "get-step", Method: http.MethodGet, Path: "/v1/jobs/{job}/steps/{step}", Tags: []string{"jobs"}, Summary: "Read a step",
}

func (s *Server) getStep(ctx context.Context, r *Request, in *StepPath) (*stepOutput, error) {
	st, err := s.jobs.GetStep(ctx, r.Tx, r.Org, in.Job, in.Step)
	if err != nil {
		return nil, err
	}
	return &stepOutput{Body: st}, nil
}

var opListSteps = huma.Operation{
	OperationID: "list-steps", Method: http.MethodGet, Path: "/v1/jobs/{job}/steps", Tags: []string{"jobs"}, Summary: "List a job's steps (by step id)",
}

func (s *Server) listSteps(ctx context.Context, r *Request, in *listStepsInput) (*listStepsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	items, err := s.jobs.PageSteps(ctx, r.Tx, r.Org, in.Job, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &listStepsOutput{Body: page(items, limit, func(st jobs.Step) string { return st.StepID })}, nil
}

var opResumeJob = huma.Operation{
	OperationID: "resume-job", Method: http.MethodGet, Path: "/v1/jobs/{job}/resume", Tags: []string{"jobs"},
	Summary: "Everything needed to carry on with a job, in one call",
	Description: "The job, its latest checkpoint (next action, working-state snapshot), completed steps with results, " +
		"in-flight steps with lease state (live/expired), failed steps with dispositions and inputs, pending handoffs, " +
		"and the last events. Start every turn here.",
}

func (s *Server) resumeJob(ctx context.Context, r *Request, in *resumeInput) (*resumeOutput, error) {
	n := in.Events
	// The last events and the log head ride in the resume's own batch: with the
	// transaction's BEGIN, the whole resume is one round trip to Postgres.
	var last episodic.LastResult
	res, err := s.jobs.Resume(ctx, r.Tx, r.Org, in.Job, func(b *pgx.Batch) { s.events.QueueLast(b, r.Org, in.Job, max(n, 1), &last) })
	if err != nil {
		return nil, err
	}
	if last.Err != nil {
		return nil, last.Err
	}
	out := &resumeOutput{ETag: etag(res.Job.CheckpointVersion)}
	out.Body.Resume = res
	out.Body.Events = []episodic.Event{}
	if n > 0 && len(last.Events) > 0 {
		// The view's seqs are gap-free, so the last event's seq is the log's head.
		out.Body.Events = last.Events
		out.Body.LastEventSeq = last.Events[len(last.Events)-1].Seq
		return out, nil
	}
	if last.HasLog {
		out.Body.LastEventSeq = last.Head.LastSeq
	}
	return out, nil
}

var opCreateHandoff = huma.Operation{
	OperationID: "create-handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs", Tags: []string{"jobs"},
	Summary: "Hand a job to another agent (pending until acknowledged)",
	Description: "201 for a new handoff; 200 for a re-send (the same id, or the same from/to while it is pending). " +
		"Another handoff while one is pending → 409. The job stays with from until to acknowledges.",
}

func (s *Server) createHandoff(ctx context.Context, r *Request, in *createHandoffInput) (*handoffOutput, error) {
	h, created, err := s.jobs.CreateHandoff(ctx, r.Tx, r.Org, in.Job, jobs.HandoffInput{ID: in.Body.ID, From: in.Body.From,
		To: in.Body.To, Context: in.Body.Context})
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &handoffOutput{Status: status, Body: h}, nil
}

var opListHandoffs = huma.Operation{
	OperationID: "list-handoffs", Method: http.MethodGet, Path: "/v1/jobs/{job}/handoffs", Tags: []string{"jobs"}, Summary: "List a job's handoffs",
}

func (s *Server) listHandoffs(ctx context.Context, r *Request, in *listHandoffsInput) (*listHandoffsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	items, err := s.jobs.ListHandoffs(ctx, r.Tx, r.Org, in.Job, in.Status, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &listHandoffsOutput{Body: page(items, limit, func(h jobs.Handoff) string { return h.ID })}, nil
}

var opAckHandoff = huma.Operation{
	OperationID: "ack-handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs/{id}/ack", Tags: []string{"jobs"},
	Summary: "Acknowledge a handoff (the receiver): ownership moves atomically",
	Description: "The job's owner becomes to, and in-flight step leases move to to under new fencing tokens (the previous " +
		"holder is fenced off). Acknowledging again answers the same result.",
}

func (s *Server) ackHandoff(ctx context.Context, r *Request, in *ackHandoffInput) (*ackOutput, error) {
	h, j, err := s.jobs.AckHandoff(ctx, r.Tx, r.Org, in.Job, in.ID, in.Body.AgentID)
	if err != nil {
		return nil, err
	}
	out := &ackOutput{}
	out.Body.Handoff, out.Body.Job = h, j
	return out, nil
}

// Data subjects the answers name (GDPR Art. 18, enforced by the wrapper: subjects.go).

func (o *jobOutput) subjectUsers() []string        { return []string{o.Body.UserID} }
func (o *checkpointOutput) subjectUsers() []string { return []string{o.Body.UserID} }
func (o *resumeOutput) subjectUsers() []string     { return []string{o.Body.Job.UserID} }

func (o *listJobsOutput) itemSubjects() (users, jobs []string) {
	for _, j := range o.Body.Items {
		users = append(users, j.UserID)
	}
	return users, nil
}
func (o *listJobsOutput) dropItems(drop func(int) bool) { o.Body.dropItems(drop) }
