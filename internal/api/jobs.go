package api

import (
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
)

// Durable jobs (docs/jobs.md): the job record, checkpoints, leased steps, resume, handoffs,
// completion. The handlers (and the job+log composition) are in internal/httpapi/jobs.go.

// JobPath is the {job} path parameter.
type JobPath struct {
	Job string `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen job id."`
}

// StepPath is the {job} and {step} path parameters.
type StepPath struct {
	JobPath
	Step string `path:"step" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen step id."`
}

type PutJobInput struct {
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

type JobOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   jobs.Job
}

type ListJobsInput struct {
	Status  string `query:"status" enum:"running,completed,failed,cancelled" doc:"Only jobs with this status."`
	Stalled bool   `query:"stalled" doc:"Only running jobs whose in-flight lease expired or that made no progress for STRATA_STALLED_AFTER, each with the step where it stalled and its input."`
	Parent  string `query:"parent_job_id" maxLength:"200" doc:"Only the jobs forked from this job (its direct forks)."`
	Page
}

type ListJobsOutput struct {
	Body List[jobs.JobListItem]
}

type CompleteJobInput struct {
	JobPath
	Body struct {
		Status  string          `json:"status,omitempty" enum:"completed,failed,cancelled" doc:"Default completed."`
		Outcome json.RawMessage `json:"outcome,omitempty" doc:"What came of the job (any JSON); consolidation summarises it."`
	}
}

type PutCheckpointInput struct {
	JobPath
	IfMatch string `header:"If-Match" doc:"The latest checkpoint version this write builds on (\"0\": none yet). Stale → 409, nothing written. Absent on a job that has a checkpoint → 428, nothing written. \"*\" overwrites whatever the latest version is (an explicit opt-out of the check)."`
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

type CheckpointOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   jobs.Checkpoint
}

type ListCheckpointsInput struct {
	JobPath
	Order string `query:"order" enum:"asc,desc" doc:"asc (default, oldest first) or desc (newest first)."`
	Page
}

type ListCheckpointsOutput struct {
	Body List[jobs.CheckpointSummary]
}

// CheckpointPath is the {job} and {version} path parameters.
type CheckpointPath struct {
	JobPath
	Version int64 `path:"version" minimum:"1" doc:"Checkpoint version."`
}

type ForkInput struct {
	CheckpointPath
	Body struct {
		NewJobID string `json:"new_job_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Id of the new job."`
		Owner    string `json:"owner,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Owner of the fork (default: the parent's)."`
	}
}

type ForkOutput struct {
	Status int
	Body   struct {
		Job        jobs.Job        `json:"job"`
		Checkpoint jobs.Checkpoint `json:"checkpoint" doc:"The checkpoint the fork starts from (its latest)."`
	}
}

type StartStepInput struct {
	StepPath
	Body struct {
		Owner        string         `json:"owner" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent (or worker) claiming the step."`
		LeaseSeconds int            `json:"lease_seconds,omitempty" minimum:"1" maximum:"86400" doc:"Lease length (default 60). Heartbeat before it runs out."`
		Input        jobs.StepInput `json:"input,omitempty" doc:"What the step runs on, recorded before it executes."`
	}
}

type ClaimOutput struct {
	Body jobs.Claim
}

type HeartbeatInput struct {
	StepPath
	Body struct {
		FencingToken int64 `json:"fencing_token" minimum:"1"`
		LeaseSeconds int   `json:"lease_seconds,omitempty" minimum:"1" maximum:"86400" doc:"New lease length from now (default: the claim's)."`
	}
}

type CompleteStepInput struct {
	StepPath
	Body struct {
		FencingToken int64           `json:"fencing_token" minimum:"1"`
		Result       json.RawMessage `json:"result,omitempty" doc:"The step's result (any JSON); start answers it from now on."`
	}
}

type FailStepInput struct {
	StepPath
	Body struct {
		FencingToken int64  `json:"fencing_token" minimum:"1"`
		Error        string `json:"error" maxLength:"10000" doc:"What went wrong."`
		Disposition  string `json:"disposition" enum:"retryable,manual_review" doc:"retryable: start may claim it again; manual_review: not until an operator clears it."`
	}
}

type StepOutput struct {
	Body jobs.Step
}

type ListStepsInput struct {
	JobPath
	Page
}

type ListStepsOutput struct {
	Body List[jobs.Step]
}

type ListAttemptsInput struct {
	StepPath
	Page
}

type ListAttemptsOutput struct {
	Body List[jobs.Attempt]
}

type ResumeInput struct {
	JobPath
	Events int `query:"events" minimum:"0" maximum:"1000" default:"20" doc:"How many of the last events to include (default 20; 0: none)."`
}

type ResumeBody struct {
	jobs.Resume
	Events       []episodic.Event `json:"events" doc:"The job's last events (oldest first), from its episodic log."`
	LastEventSeq int64            `json:"last_event_seq" doc:"The log's last seq."`
}

type ResumeOutput struct {
	ETag string `header:"ETag" doc:"The latest checkpoint version (send it as If-Match with the next checkpoint)."`
	Body ResumeBody
}

type CreateHandoffInput struct {
	JobPath
	Body struct {
		ID      string          `json:"id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen id (default: assigned). Sending the same id again is a re-send."`
		From    string          `json:"from" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The handing agent (the job's owner, when it has one)."`
		To      string          `json:"to" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The receiving agent."`
		Context json.RawMessage `json:"context,omitempty" doc:"What the receiver needs to know (JSON object)."`
	}
}

type HandoffOutput struct {
	Status int
	Body   jobs.Handoff
}

type ListHandoffsInput struct {
	JobPath
	Status string `query:"status" enum:"pending,acknowledged"`
	Page
}

type ListHandoffsOutput struct {
	Body List[jobs.Handoff]
}

type AckHandoffInput struct {
	JobPath
	ID   string `path:"id" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	Body struct {
		AgentID string `json:"agent_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The acknowledging agent: must be the handoff's to."`
	}
}

type AckOutput struct {
	Body struct {
		Handoff jobs.Handoff `json:"handoff"`
		Job     jobs.Job     `json:"job"`
	}
}

var OpPutJob = huma.Operation{
	OperationID: "put-job", Method: http.MethodPut, Path: "/v1/jobs/{job}", Tags: []string{"jobs"},
	Summary:     "Create or update a job",
	Description: "201 on create, 200 on update. The job's version is its ETag; send If-Match to update safely.",
}

var OpGetJob = huma.Operation{
	OperationID: "get-job", Method: http.MethodGet, Path: "/v1/jobs/{job}", Tags: []string{"jobs"}, Summary: "Read a job",
}

var OpListJobs = huma.Operation{
	OperationID: "list-jobs", Method: http.MethodGet, Path: "/v1/jobs", Tags: []string{"jobs"},
	Summary:     "List jobs (by status; stalled ones with where they stalled)",
	Description: "`?status=running&stalled=true` is what an operator checks after a deployment or an outage: running jobs whose in-flight lease expired, or that made no progress for STRATA_STALLED_AFTER, each with the step where it stalled and that step's input.",
}

var OpCompleteJob = huma.Operation{
	OperationID: "complete-job", Method: http.MethodPost, Path: "/v1/jobs/{job}/complete", Tags: []string{"jobs"},
	Summary: "Finish a job (completed, failed or cancelled)",
	Description: "Marks the job done and, in the same transaction, enqueues its consolidation into a semantic \"job\" memory " +
		"(a job_outbox row of kind consolidate_job). Finishing again with the same status answers the job as it is.",
}

var OpPutCheckpoint = huma.Operation{
	OperationID: "put-checkpoint", Method: http.MethodPut, Path: "/v1/jobs/{job}/checkpoint", Tags: []string{"jobs"},
	Summary: "Write the job's next checkpoint version",
	Description: "Every write is a new version (201). If-Match names the version it builds on; a stale one → 409 and nothing is written. " +
		"Without If-Match only a job's first checkpoint is written: on a job that has one the write is refused with 428 " +
		"(Precondition Required), so that no writer buries another's progress unawares. `If-Match: *` is the explicit " +
		"overwrite: it writes the next version whatever the latest is.",
	DefaultStatus: http.StatusCreated,
	Errors:        []int{http.StatusPreconditionRequired},
}

var OpListCheckpoints = huma.Operation{
	OperationID: "list-checkpoints", Method: http.MethodGet, Path: "/v1/jobs/{job}/checkpoints", Tags: []string{"jobs"},
	Summary:     "List a job's checkpoint versions",
	Description: "Summaries without the state documents; read one version for those. A fork lists its parent's versions up to the fork point, then its own.",
}

var OpGetCheckpoint = huma.Operation{
	OperationID: "get-checkpoint", Method: http.MethodGet, Path: "/v1/jobs/{job}/checkpoints/{version}", Tags: []string{"jobs"},
	Summary: "Read one checkpoint version (time travel)",
}

var OpForkCheckpoint = huma.Operation{
	OperationID: "fork-checkpoint", Method: http.MethodPost, Path: "/v1/jobs/{job}/checkpoints/{version}/fork", Tags: []string{"jobs"},
	Summary: "Fork a job from a checkpoint version",
	Description: "Creates new_job_id, a running job whose history starts at this version: it shares the parent's checkpoints " +
		"up to the version and the parent's events up to that checkpoint's event seq (nothing is copied), plus the " +
		"steps completed by then. Writes to the fork never show in the parent.",
	DefaultStatus: http.StatusCreated,
}

var OpStartStep = huma.Operation{
	OperationID: "start-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/start", Tags: []string{"jobs"},
	Summary: "Claim a step (lease + fencing token), or get its stored result",
	Description: "status claimed: you hold a lease; run the step and complete or fail it with the fencing_token. " +
		"status completed: it already ran; here is its result; do not run it again. A live lease of another owner → 409 " +
		"naming holder and until; an expired one is taken over with a greater token. The holder asking again gets the " +
		"same claim. A manual_review failure → 409 until an operator clears it.",
}

var OpHeartbeatStep = huma.Operation{
	OperationID: "heartbeat-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/heartbeat", Tags: []string{"jobs"},
	Summary: "Extend a step's lease (current fencing token only)",
}

var OpCompleteStep = huma.Operation{
	OperationID: "complete-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/complete", Tags: []string{"jobs"},
	Summary:     "Complete a step with its result (current fencing token only)",
	Description: "A stale token → 409 and nothing is written. Completing again with the same token answers the stored step.",
}

var OpFailStep = huma.Operation{
	OperationID: "fail-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/fail", Tags: []string{"jobs"},
	Summary: "Fail a step: retryable, or manual_review (current fencing token only)",
}

var OpClearStep = huma.Operation{
	OperationID: "clear-step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/clear", Tags: []string{"jobs"},
	Summary:     "Clear a manual_review failure (operators: admin keys)",
	Description: "The step becomes failed/retryable (cleared_at, cleared_by record who released it), so start may claim it again.",
}

var OpGetStep = huma.Operation{
	OperationID: "get-step", Method: http.MethodGet, Path: "/v1/jobs/{job}/steps/{step}", Tags: []string{"jobs"}, Summary: "Read a step",
}

var OpListSteps = huma.Operation{
	OperationID: "list-steps", Method: http.MethodGet, Path: "/v1/jobs/{job}/steps", Tags: []string{"jobs"}, Summary: "List a job's steps in run order (first claim, then step id)",
}

var OpListAttempts = huma.Operation{
	OperationID: "list-step-attempts", Method: http.MethodGet, Path: "/v1/jobs/{job}/steps/{step}/attempts", Tags: []string{"jobs"},
	Summary: "List every attempt of a step (oldest first)",
	Description: "One attempt per claim: owner, fencing token, lease (acquired, expires, released), the input recorded " +
		"at the claim, heartbeats, and how it ended: completed, failed (error, disposition), lease_lost (its lease ran " +
		"out and the step was claimed again) or taken_over (a handoff moved its live lease); the current claim has no " +
		"outcome. Kept until the org's policy prunes them (steps.keep_attempts). The cursor is the last fencing token.",
}

var OpResumeJob = huma.Operation{
	OperationID: "resume-job", Method: http.MethodGet, Path: "/v1/jobs/{job}/resume", Tags: []string{"jobs"},
	Summary: "Everything needed to carry on with a job, in one call",
	Description: "The job, its latest checkpoint (next action, working-state snapshot), completed steps with results, " +
		"in-flight steps with lease state (live/expired), failed steps with dispositions and inputs, pending handoffs, " +
		"and the last events. Start every turn here.",
}

var OpCreateHandoff = huma.Operation{
	OperationID: "create-handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs", Tags: []string{"jobs"},
	Summary: "Hand a job to another agent (pending until acknowledged)",
	Description: "201 for a new handoff; 200 for a re-send (the same id, or the same from/to while it is pending). " +
		"Another handoff while one is pending → 409. The job stays with from until to acknowledges.",
}

var OpListHandoffs = huma.Operation{
	OperationID: "list-handoffs", Method: http.MethodGet, Path: "/v1/jobs/{job}/handoffs", Tags: []string{"jobs"}, Summary: "List a job's handoffs",
}

var OpAckHandoff = huma.Operation{
	OperationID: "ack-handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs/{id}/ack", Tags: []string{"jobs"},
	Summary: "Acknowledge a handoff (the receiver): ownership moves atomically",
	Description: "The job's owner becomes to, and in-flight step leases move to to under new fencing tokens (the previous " +
		"holder is fenced off). Acknowledging again answers the same result.",
}

// Data subjects the answers name (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go).

func (o *JobOutput) SubjectUsers() []string { return []string{o.Body.UserID} }

func (o *CheckpointOutput) SubjectUsers() []string { return []string{o.Body.UserID} }

func (o *ResumeOutput) SubjectUsers() []string { return []string{o.Body.Job.UserID} }

func (o *ListJobsOutput) ItemSubjects() (users, jobs []string) {
	for _, j := range o.Body.Items {
		users = append(users, j.UserID)
	}
	return users, nil
}

func (o *ListJobsOutput) DropItems(drop func(int) bool) { o.Body.DropItems(drop) }
