package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/strata"
)

// Durable jobs (docs/jobs.md): the job record, checkpoints, leased steps, resume, handoffs,
// completion. What a job's episodic log adds (a new job's empty log, the log's head recorded
// by a write, a fork of the log, the last events in resume) is composed in internal/joblog.

// ifMatchPtr parses an optional If-Match.
func ifMatchPtr(h string) (*int64, error) {
	v, ok, err := ifMatch(h)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

func (s *Server) putJob(ctx context.Context, r *Request, in *api.PutJobInput) (*api.JobOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	b := in.Body
	spec := jobs.JobSpec{Goal: b.Goal, Status: b.Status, Owner: b.Owner, UserID: b.UserID, AgentID: b.AgentID,
		SessionID: b.SessionID, Metadata: b.Metadata, Outcome: b.Outcome}
	j, created, err := s.JobLog.PutJob(ctx, r.Tx, r.Org, in.Job, spec, im)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &api.JobOutput{Status: status, ETag: etag(j.Version), Body: j}, nil
}

func (s *Server) getJob(ctx context.Context, r *Request, in *api.JobPath) (*api.JobOutput, error) {
	j, err := s.Jobs.GetJob(ctx, r.Tx, r.Org, in.Job)
	if err != nil {
		return nil, err
	}
	return &api.JobOutput{Status: http.StatusOK, ETag: etag(j.Version), Body: j}, nil
}

func (s *Server) listJobs(ctx context.Context, r *Request, in *api.ListJobsInput) (*api.ListJobsOutput, error) {
	l, err := listPage(in.Page, func(j jobs.JobListItem) string { return j.JobID }, func(n int) ([]jobs.JobListItem, error) {
		return s.Jobs.ListJobs(ctx, r.Tx, r.Org, jobs.ListFilter{Status: in.Status, Stalled: in.Stalled, After: in.Cursor,
			Parent: in.Parent, Limit: n})
	})
	if err != nil {
		return nil, err
	}
	return &api.ListJobsOutput{Body: l}, nil
}

func (s *Server) completeJob(ctx context.Context, r *Request, in *api.CompleteJobInput) (*api.JobOutput, error) {
	j, err := s.JobLog.CompleteJob(ctx, r.Tx, r.Org, in.Job, in.Body.Status, in.Body.Outcome)
	if err != nil {
		return nil, err
	}
	s.emit(r, outbox.New{Type: "job." + j.Status, JobID: j.JobID, DedupeKey: "job." + j.Status + ":" + j.JobID,
		Data: map[string]any{"job_id": j.JobID, "status": j.Status, "version": j.Version}})
	return &api.JobOutput{Status: http.StatusOK, ETag: etag(j.Version), Body: j}, nil
}

// putCheckpoint writes the next version. If-Match: "n" writes only on version n; If-Match: *
// writes whatever the latest is (an explicit overwrite); no If-Match writes only the first
// checkpoint, and on a job that has one answers 428: a writer that did not say what it
// built on would silently bury another writer's progress.
func (s *Server) putCheckpoint(ctx context.Context, r *Request, in *api.PutCheckpointInput) (*api.CheckpointOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	absent := im == nil && strings.TrimSpace(in.IfMatch) != "*"
	if absent {
		im = new(int64) // builds on no checkpoint: the job's first
	}
	b := in.Body
	cp := jobs.CheckpointInput{Goal: b.Goal, CurrentStep: b.CurrentStep, Done: b.Done, Pending: b.Pending,
		NextAction: b.NextAction, State: b.State, WorkingState: b.WorkingState, AgentID: b.AgentID, UserID: b.UserID}
	c, err := s.JobLog.PutCheckpoint(ctx, r.Tx, r.Org, in.Job, cp, im)
	var ce *strata.ConflictError
	if absent && errors.As(err, &ce) && ce.Details["current_version"] != nil {
		v := fmt.Sprint(ce.Details["current_version"])
		return nil, huma.NewError(http.StatusPreconditionRequired, "job "+in.Job+" already has checkpoint version "+v+
			": send If-Match: \""+v+"\" (the version you resumed from and build on), or If-Match: * to overwrite it whatever it is",
			&huma.ErrorDetail{Location: "header.If-Match", Message: "required once the job has a checkpoint", Value: ce.Details})
	}
	if err != nil {
		return nil, err
	}
	return &api.CheckpointOutput{Status: http.StatusCreated, ETag: etag(c.Version), Body: c}, nil
}

func (s *Server) listCheckpoints(ctx context.Context, r *Request, in *api.ListCheckpointsInput) (*api.ListCheckpointsOutput, error) {
	l, err := listPage(in.Page, func(c jobs.CheckpointSummary) string { return strconv.FormatInt(c.Version, 10) },
		func(n int) ([]jobs.CheckpointSummary, error) {
			return s.Jobs.ListCheckpoints(ctx, r.Tx, r.Org, in.Job, in.Cursor, in.Order == "desc", n)
		})
	if err != nil {
		return nil, err
	}
	return &api.ListCheckpointsOutput{Body: l}, nil
}

func (s *Server) getCheckpoint(ctx context.Context, r *Request, in *api.CheckpointPath) (*api.CheckpointOutput, error) {
	c, err := s.Jobs.GetCheckpoint(ctx, r.Tx, r.Org, in.Job, in.Version)
	if err != nil {
		return nil, err
	}
	return &api.CheckpointOutput{Status: http.StatusOK, ETag: etag(c.Version), Body: c}, nil
}

func (s *Server) forkCheckpoint(ctx context.Context, r *Request, in *api.ForkInput) (*api.ForkOutput, error) {
	j, cp, err := s.JobLog.Fork(ctx, r.Tx, r.Org, in.Job, in.Version, jobs.ForkInput{NewJobID: in.Body.NewJobID, Owner: in.Body.Owner})
	if err != nil {
		return nil, err
	}
	out := &api.ForkOutput{Status: http.StatusCreated}
	out.Body.Job, out.Body.Checkpoint = j, cp
	return out, nil
}

func (s *Server) startStep(ctx context.Context, r *Request, in *api.StartStepInput) (*api.ClaimOutput, error) {
	b := in.Body
	c, w, err := s.Jobs.PrepareStart(ctx, r.Tx, r.Org, in.Job, in.Step, jobs.StartInput{Owner: b.Owner, LeaseSeconds: b.LeaseSeconds, Input: b.Input})
	if err != nil {
		return nil, err
	}
	if w != nil {
		st, err := s.sendStepWrite(ctx, r, w)
		if err != nil {
			return nil, err
		}
		c = jobs.ClaimOf(st)
	}
	return &api.ClaimOutput{Body: c}, nil
}

func (s *Server) heartbeatStep(ctx context.Context, r *Request, in *api.HeartbeatInput) (*api.StepOutput, error) {
	st, w, err := s.Jobs.PrepareHeartbeat(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.LeaseSeconds)
	if err == nil && w != nil {
		st, err = s.sendStepWrite(ctx, r, w)
	}
	if err != nil {
		return nil, err
	}
	return &api.StepOutput{Body: st}, nil
}

func (s *Server) completeStep(ctx context.Context, r *Request, in *api.CompleteStepInput) (*api.StepOutput, error) {
	st, w, err := s.Jobs.PrepareComplete(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.Result)
	if err == nil && w != nil {
		st, err = s.sendStepWrite(ctx, r, w)
	}
	if err != nil {
		return nil, err
	}
	return &api.StepOutput{Body: st}, nil
}

func (s *Server) failStep(ctx context.Context, r *Request, in *api.FailStepInput) (*api.StepOutput, error) {
	st, err := s.Jobs.Fail(ctx, r.Tx, r.Org, in.Job, in.Step, in.Body.FencingToken, in.Body.Error, in.Body.Disposition)
	if err != nil {
		return nil, err
	}
	s.emit(r, outbox.New{Type: outbox.StepFailed, JobID: st.JobID,
		DedupeKey: fmt.Sprintf("step.failed:%s:%s:%d", st.JobID, st.StepID, st.FencingToken),
		Data: map[string]any{"job_id": st.JobID, "step_id": st.StepID, "fencing_token": st.FencingToken,
			"disposition": st.Disposition, "owner": st.Owner, "attempts": st.Attempts}})
	return &api.StepOutput{Body: st}, nil
}

func (s *Server) clearStep(ctx context.Context, r *Request, in *api.StepPath) (*api.StepOutput, error) {
	p := r.Caller
	st, err := s.Jobs.ClearStep(ctx, r.Tx, r.Org, in.Job, in.Step, p.KeyID)
	if err != nil {
		return nil, err
	}
	return &api.StepOutput{Body: st}, nil
}

func (s *Server) getStep(ctx context.Context, r *Request, in *api.StepPath) (*api.StepOutput, error) {
	st, err := s.Jobs.GetStep(ctx, r.Tx, r.Org, in.Job, in.Step)
	if err != nil {
		return nil, err
	}
	return &api.StepOutput{Body: st}, nil
}

func (s *Server) listSteps(ctx context.Context, r *Request, in *api.ListStepsInput) (*api.ListStepsOutput, error) {
	l, err := listPage(in.Page, jobs.StepCursor, func(n int) ([]jobs.Step, error) { return s.Jobs.PageSteps(ctx, r.Tx, r.Org, in.Job, in.Cursor, n) })
	if err != nil {
		return nil, err
	}
	return &api.ListStepsOutput{Body: l}, nil
}

func (s *Server) listAttempts(ctx context.Context, r *Request, in *api.ListAttemptsInput) (*api.ListAttemptsOutput, error) {
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	items, err := s.Jobs.PageAttempts(ctx, r.Tx, r.Org, in.Job, in.Step, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &api.ListAttemptsOutput{Body: page(items, limit, func(a jobs.Attempt) string {
		return strconv.FormatInt(a.FencingToken, 10)
	})}, nil
}

func (s *Server) resumeJob(ctx context.Context, r *Request, in *api.ResumeInput) (*api.ResumeOutput, error) {
	res, err := s.JobLog.Resume(ctx, r.Tx, r.Org, in.Job, in.Events)
	if err != nil {
		return nil, err
	}
	out := &api.ResumeOutput{ETag: etag(res.Job.CheckpointVersion)}
	out.Body.Resume, out.Body.Events, out.Body.LastEventSeq = res.Resume, res.Events, res.LastEventSeq
	return out, nil
}

func (s *Server) createHandoff(ctx context.Context, r *Request, in *api.CreateHandoffInput) (*api.HandoffOutput, error) {
	h, created, err := s.Jobs.CreateHandoff(ctx, r.Tx, r.Org, in.Job, jobs.HandoffInput{ID: in.Body.ID, From: in.Body.From,
		To: in.Body.To, Context: in.Body.Context})
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.emit(r, outbox.New{Type: outbox.HandoffPending, JobID: h.JobID, DedupeKey: "handoff.pending:" + h.JobID + ":" + h.ID,
			Data: map[string]any{"job_id": h.JobID, "handoff_id": h.ID, "from": h.From, "to": h.To}})
	}
	return &api.HandoffOutput{Status: status, Body: h}, nil
}

func (s *Server) listHandoffs(ctx context.Context, r *Request, in *api.ListHandoffsInput) (*api.ListHandoffsOutput, error) {
	l, err := listPage(in.Page, func(h jobs.Handoff) string { return h.ID }, func(n int) ([]jobs.Handoff, error) {
		return s.Jobs.ListHandoffs(ctx, r.Tx, r.Org, in.Job, in.Status, in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.ListHandoffsOutput{Body: l}, nil
}

func (s *Server) ackHandoff(ctx context.Context, r *Request, in *api.AckHandoffInput) (*api.AckOutput, error) {
	h, j, err := s.Jobs.AckHandoff(ctx, r.Tx, r.Org, in.Job, in.ID, in.Body.AgentID)
	if err != nil {
		return nil, err
	}
	s.emit(r, outbox.New{Type: outbox.HandoffAcknowledged, JobID: h.JobID, DedupeKey: "handoff.acknowledged:" + h.JobID + ":" + h.ID,
		Data: map[string]any{"job_id": h.JobID, "handoff_id": h.ID, "from": h.From, "to": h.To}})
	out := &api.AckOutput{}
	out.Body.Handoff, out.Body.Job = h, j
	return out, nil
}
