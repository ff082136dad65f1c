package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/jobs"
)

// LangGraph threads (docs/jobs.md, "LangGraph threads"): the storage LangGraph's
// BaseCheckpointSaver needs, as part of the jobs tier. The thread id is the job id, so a
// LangGraph thread is resumed, audited, retained and erased like any job. The client is
// clients/langgraph-js (StrataSaver). Values travel as LangGraph's serializer made them:
// a type tag and bytes (base64).

type putLangGraphCheckpointInput struct {
	JobPath
	Body struct {
		CheckpointNS       string               `json:"checkpoint_ns,omitempty" maxLength:"2000" doc:"LangGraph namespace (\"\": the root graph; subgraphs have their own)."`
		CheckpointID       string               `json:"checkpoint_id" minLength:"1" maxLength:"200" doc:"The checkpoint's id (LangGraph's uuid6: its byte order is its time order)."`
		ParentCheckpointID string               `json:"parent_checkpoint_id,omitempty" maxLength:"200" doc:"The checkpoint this one follows."`
		Checkpoint         json.RawMessage      `json:"checkpoint" doc:"LangGraph's checkpoint document without channel_values (a JSON object: v, id, ts, channel_versions, versions_seen, ...)."`
		Metadata           json.RawMessage      `json:"metadata,omitempty" doc:"Checkpoint metadata (a JSON object); list filters it by containment."`
		Blobs              []jobs.LangGraphBlob `json:"blobs,omitempty" maxItems:"10000" doc:"Values of the channels whose version changed (LangGraph's newVersions). Unchanged channels are not sent and not rewritten."`
		ScopeBody
	}
}

type putLangGraphCheckpointOutput struct {
	Status int
	Body   jobs.LangGraphPutResult
}

type putLangGraphWritesInput struct {
	JobPath
	Body struct {
		CheckpointNS string                `json:"checkpoint_ns,omitempty" maxLength:"2000"`
		CheckpointID string                `json:"checkpoint_id" minLength:"1" maxLength:"200" doc:"The checkpoint the writes belong to."`
		TaskID       string                `json:"task_id" minLength:"1" maxLength:"1000"`
		TaskPath     string                `json:"task_path,omitempty" maxLength:"2000"`
		Writes       []jobs.LangGraphWrite `json:"writes" maxItems:"10000"`
		ScopeBody
	}
}

type putLangGraphWritesOutput struct {
	Body struct {
		ThreadID     string `json:"thread_id"`
		CheckpointNS string `json:"checkpoint_ns"`
		CheckpointID string `json:"checkpoint_id"`
		TaskID       string `json:"task_id"`
		Stored       int    `json:"stored" doc:"Writes stored or replaced by this call (a repeat of stored writes stores 0)."`
	}
}

type getLangGraphCheckpointInput struct {
	JobPath
	CheckpointNS string `query:"checkpoint_ns" maxLength:"2000" doc:"Namespace (default \"\": the root graph)."`
	CheckpointID string `query:"checkpoint_id" maxLength:"200" doc:"The checkpoint; absent: the latest of the namespace."`
}

type langGraphTupleOutput struct {
	Body jobs.LangGraphTuple
}

// LangGraphListQuery is the query of both list operations.
type LangGraphListQuery struct {
	CheckpointNS string `query:"checkpoint_ns" maxLength:"2000" doc:"Only this namespace (present and empty: the root graph); absent: every namespace."`
	CheckpointID string `query:"checkpoint_id" maxLength:"200" doc:"Only this checkpoint id."`
	Before       string `query:"before" maxLength:"200" doc:"Only checkpoints whose id is less than this one (older)."`
	Filter       string `query:"filter" maxLength:"8000" doc:"A JSON object the checkpoint metadata must contain (jsonb @>), e.g. {\"source\":\"loop\"}."`
	Page
	nsSet bool
}

func (q *LangGraphListQuery) resolveNS(ctx huma.Context) {
	u := ctx.URL()
	_, q.nsSet = u.Query()["checkpoint_ns"]
}

type listLangGraphThreadInput struct {
	JobPath
	LangGraphListQuery
}

// Resolve notes whether checkpoint_ns was sent (empty means the root namespace).
func (in *listLangGraphThreadInput) Resolve(ctx huma.Context) []error { in.resolveNS(ctx); return nil }

type searchLangGraphInput struct {
	ThreadID string `query:"thread_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this thread (job); absent: every thread of the org."`
	LangGraphListQuery
}

// Resolve notes whether checkpoint_ns was sent (empty means the root namespace).
func (in *searchLangGraphInput) Resolve(ctx huma.Context) []error { in.resolveNS(ctx); return nil }

type listLangGraphOutput struct {
	Body List[jobs.LangGraphTuple]
}

type deleteLangGraphThreadOutput struct {
	Body struct {
		ThreadID string `json:"thread_id"`
		Deleted  bool   `json:"deleted" doc:"false: there was no such thread."`
	}
}

var opPutLanggraphCheckpoint = huma.Operation{
	OperationID: "put-langgraph-checkpoint", Method: http.MethodPost, Path: "/v1/jobs/{job}/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary: "Store a LangGraph checkpoint (BaseCheckpointSaver.put)",
	Description: "Creates the job when the thread is new. 201 for a new checkpoint; 200 when the (namespace, checkpoint_id) " +
		"existed (its checkpoint and metadata are replaced, as LangGraph's savers do). A new root-namespace checkpoint also " +
		"writes the job's next checkpoint version (job_version), so resume shows the thread's progress. Blobs already " +
		"stored for a (channel, version) are kept.",
	DefaultStatus: http.StatusCreated,
}

func (s *Server) putLanggraphCheckpoint(ctx context.Context, r *Request, in *putLangGraphCheckpointInput) (*putLangGraphCheckpointOutput, error) {
	b := in.Body
	put := jobs.LangGraphPut{CheckpointNS: b.CheckpointNS, CheckpointID: b.CheckpointID, ParentCheckpointID: b.ParentCheckpointID,
		Checkpoint: b.Checkpoint, Metadata: b.Metadata, Blobs: b.Blobs, UserID: b.UserID, AgentID: b.AgentID, SessionID: b.SessionID}
	var err error
	if put.EventSeq, err = s.eventHead(ctx, r, in.Job, put.Check()); err != nil {
		return nil, err
	}
	res, err := s.jobs.LangGraphPut(ctx, r.Tx, r.Org, in.Job, put)
	if err != nil {
		return nil, err
	}
	if res.JobCreated {
		if err := s.events.EnsureJob(ctx, r.Tx, r.Org, in.Job); err != nil {
			return nil, err
		}
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	return &putLangGraphCheckpointOutput{Status: status, Body: res}, nil
}

var opPutLanggraphWrites = huma.Operation{
	OperationID: "put-langgraph-writes", Method: http.MethodPost, Path: "/v1/jobs/{job}/langgraph/writes", Tags: []string{"langgraph"},
	Summary: "Store a task's pending writes (BaseCheckpointSaver.putWrites)",
	Description: "Idempotent: a write whose (checkpoint, task_id, idx) is stored keeps its first value, unless every write of " +
		"the batch has a negative idx (LangGraph's special channels: ERROR, INTERRUPT, ...), which replace. The checkpoint " +
		"need not be stored yet (durability \"async\"). Creates the job when the thread is new.",
}

func (s *Server) putLanggraphWrites(ctx context.Context, r *Request, in *putLangGraphWritesInput) (*putLangGraphWritesOutput, error) {
	b := in.Body
	n, created, err := s.jobs.LangGraphPutWrites(ctx, r.Tx, r.Org, in.Job, jobs.LangGraphWrites{CheckpointNS: b.CheckpointNS,
		CheckpointID: b.CheckpointID, TaskID: b.TaskID, TaskPath: b.TaskPath, Writes: b.Writes,
		UserID: b.UserID, AgentID: b.AgentID, SessionID: b.SessionID})
	if err != nil {
		return nil, err
	}
	if created {
		if err := s.events.EnsureJob(ctx, r.Tx, r.Org, in.Job); err != nil {
			return nil, err
		}
	}
	out := &putLangGraphWritesOutput{}
	out.Body.ThreadID, out.Body.CheckpointNS, out.Body.CheckpointID, out.Body.TaskID, out.Body.Stored =
		in.Job, b.CheckpointNS, b.CheckpointID, b.TaskID, n
	return out, nil
}

var opGetLanggraphCheckpoint = huma.Operation{
	OperationID: "get-langgraph-checkpoint", Method: http.MethodGet, Path: "/v1/jobs/{job}/langgraph/checkpoint", Tags: []string{"langgraph"},
	Summary:     "Read a LangGraph checkpoint tuple (BaseCheckpointSaver.getTuple)",
	Description: "checkpoint_id, or the latest checkpoint of the namespace; with its channel values and pending writes. 404 when there is none.",
}

func (s *Server) getLanggraphCheckpoint(ctx context.Context, r *Request, in *getLangGraphCheckpointInput) (*langGraphTupleOutput, error) {
	t, err := s.jobs.LangGraphGet(ctx, r.Tx, r.Org, in.Job, in.CheckpointNS, in.CheckpointID)
	if err != nil {
		return nil, err
	}
	return &langGraphTupleOutput{Body: t}, nil
}

var opListLanggraphCheckpoints = huma.Operation{
	OperationID: "list-langgraph-checkpoints", Method: http.MethodGet, Path: "/v1/jobs/{job}/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary:     "List a thread's LangGraph checkpoints, newest first (BaseCheckpointSaver.list)",
	Description: "Filters: checkpoint_ns, checkpoint_id, before (older than this id), filter (metadata containment). Each item is a full tuple.",
}

func (s *Server) listLanggraphCheckpoints(ctx context.Context, r *Request, in *listLangGraphThreadInput) (*listLangGraphOutput, error) {
	return s.listLangGraph(ctx, r, in.Job, in.LangGraphListQuery)
}

var opSearchLanggraphCheckpoints = huma.Operation{
	OperationID: "search-langgraph-checkpoints", Method: http.MethodGet, Path: "/v1/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary:     "List LangGraph checkpoints across threads, newest first (BaseCheckpointSaver.list without a thread)",
	Description: "As the per-thread list, over every thread of the org (or thread_id).",
}

func (s *Server) searchLanggraphCheckpoints(ctx context.Context, r *Request, in *searchLangGraphInput) (*listLangGraphOutput, error) {
	return s.listLangGraph(ctx, r, in.ThreadID, in.LangGraphListQuery)
}

var opDeleteLanggraphThread = huma.Operation{
	OperationID: "delete-langgraph-thread", Method: http.MethodDelete, Path: "/v1/jobs/{job}/langgraph", Tags: []string{"langgraph"},
	Summary: "Delete a LangGraph thread (BaseCheckpointSaver.deleteThread)",
	Description: "Deletes the thread's job and with it every checkpoint, blob and pending write, and the job's checkpoint " +
		"versions, steps and handoffs. The job's episodic log is append-only and stays (erasure removes it). Deleting a " +
		"thread that does not exist answers deleted: false. A job with forks → 409.",
}

func (s *Server) deleteLanggraphThread(ctx context.Context, r *Request, in *JobPath) (*deleteLangGraphThreadOutput, error) {
	deleted, err := s.jobs.LangGraphDeleteThread(ctx, r.Tx, r.Org, in.Job)
	if err != nil {
		return nil, err
	}
	out := &deleteLangGraphThreadOutput{}
	out.Body.ThreadID, out.Body.Deleted = in.Job, deleted
	return out, nil
}

// listLangGraph lists checkpoint tuples of one thread (or, thread "", of every thread).
func (s *Server) listLangGraph(ctx context.Context, r *Request, thread string, q LangGraphListQuery) (*listLangGraphOutput, error) {
	limit, err := q.Page.limit()
	if err != nil {
		return nil, err
	}
	f := jobs.LangGraphListFilter{ThreadID: thread, CheckpointID: q.CheckpointID, Before: q.Before, Filter: q.Filter,
		Cursor: q.Cursor, Limit: limit + 1}
	if q.nsSet { // present and empty is the root graph; absent is every namespace
		f.CheckpointNS = &q.CheckpointNS
	}
	items, err := s.jobs.LangGraphList(ctx, r.Tx, r.Org, f)
	if err != nil {
		return nil, err
	}
	return &listLangGraphOutput{Body: page(items, limit, jobs.LangGraphTuple.Cursor)}, nil
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: subjects.go): a thread is a job.

func (in *searchLangGraphInput) subjectJob() string { return in.ThreadID }

func (o *listLangGraphOutput) itemSubjects() (users, jobs []string) {
	for _, t := range o.Body.Items {
		jobs = append(jobs, t.ThreadID)
	}
	return nil, jobs
}
func (o *listLangGraphOutput) dropItems(drop func(int) bool) { o.Body.dropItems(drop) }
