package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/jobs"
)

// LangGraph threads (docs/jobs.md, "LangGraph threads"): the storage LangGraph's
// BaseCheckpointSaver needs, as part of the jobs tier. The thread id is the job id, so a
// LangGraph thread is resumed, audited, retained and erased like any job. The client is
// clients/langgraph-js (StrataSaver). Values travel as LangGraph's serializer made them:
// a type tag and bytes (base64).

type PutLangGraphCheckpointInput struct {
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
	PreferHeader
}

// PreferHeader is RFC 7240's Prefer header of a write that may answer without a body.
type PreferHeader struct {
	Prefer string `header:"Prefer" doc:"return=minimal: answer 204 with no body (Preference-Applied: return=minimal). The write then costs one round trip to Postgres (its statement, audit row, idempotency record and COMMIT together) instead of two."`
}

// Minimal reports whether the client asked for return=minimal.
func (p PreferHeader) Minimal() bool {
	for pref := range strings.SplitSeq(p.Prefer, ",") {
		name, _, _ := strings.Cut(pref, ";")
		if strings.EqualFold(strings.ReplaceAll(strings.TrimSpace(name), " ", ""), "return=minimal") {
			return true
		}
	}
	return false
}

// minimalResponse documents the 204 of a write sent with Prefer: return=minimal.
func minimalResponse() map[string]*huma.Response {
	return map[string]*huma.Response{"204": {Description: "Stored (the request had Prefer: return=minimal): no body.",
		Headers: map[string]*huma.Param{"Preference-Applied": {Description: "return=minimal", Schema: &huma.Schema{Type: "string"}}}}}
}

type PutLangGraphCheckpointOutput struct {
	Status            int
	PreferenceApplied string `header:"Preference-Applied"`
	Body              jobs.LangGraphPutResult
}

type PutLangGraphWritesInput struct {
	JobPath
	Body struct {
		CheckpointNS string                `json:"checkpoint_ns,omitempty" maxLength:"2000"`
		CheckpointID string                `json:"checkpoint_id" minLength:"1" maxLength:"200" doc:"The checkpoint the writes belong to."`
		TaskID       string                `json:"task_id" minLength:"1" maxLength:"1000"`
		TaskPath     string                `json:"task_path,omitempty" maxLength:"2000"`
		Writes       []jobs.LangGraphWrite `json:"writes" maxItems:"10000"`
		ScopeBody
	}
	PreferHeader
}

type PutLangGraphWritesOutput struct {
	Status            int
	PreferenceApplied string `header:"Preference-Applied"`
	Body              struct {
		ThreadID     string `json:"thread_id"`
		CheckpointNS string `json:"checkpoint_ns"`
		CheckpointID string `json:"checkpoint_id"`
		TaskID       string `json:"task_id"`
		Stored       int    `json:"stored" doc:"Writes stored or replaced by this call (a repeat of stored writes stores 0)."`
	}
}

type GetLangGraphCheckpointInput struct {
	JobPath
	CheckpointNS string `query:"checkpoint_ns" maxLength:"2000" doc:"Namespace (default \"\": the root graph)."`
	CheckpointID string `query:"checkpoint_id" maxLength:"200" doc:"The checkpoint; absent: the latest of the namespace."`
}

type LangGraphTupleOutput struct {
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

// NamespaceSent reports whether checkpoint_ns was in the query (present and empty is the
// root graph; absent is every namespace).
func (q LangGraphListQuery) NamespaceSent() bool { return q.nsSet }

func (q *LangGraphListQuery) resolveNS(ctx huma.Context) {
	u := ctx.URL()
	_, q.nsSet = u.Query()["checkpoint_ns"]
}

type ListLangGraphThreadInput struct {
	JobPath
	LangGraphListQuery
}

// Resolve notes whether checkpoint_ns was sent (empty means the root namespace).
func (in *ListLangGraphThreadInput) Resolve(ctx huma.Context) []error { in.resolveNS(ctx); return nil }

type SearchLangGraphInput struct {
	ThreadID string `query:"thread_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this thread (job); absent: every thread of the org."`
	LangGraphListQuery
}

// Resolve notes whether checkpoint_ns was sent (empty means the root namespace).
func (in *SearchLangGraphInput) Resolve(ctx huma.Context) []error { in.resolveNS(ctx); return nil }

type ListLangGraphOutput struct {
	Body List[jobs.LangGraphTuple]
}

type DeleteLangGraphThreadOutput struct {
	Body struct {
		ThreadID string `json:"thread_id"`
		Deleted  bool   `json:"deleted" doc:"false: there was no such thread."`
	}
}

var OpPutLanggraphCheckpoint = huma.Operation{
	OperationID: "put-langgraph-checkpoint", Method: http.MethodPost, Path: "/v1/jobs/{job}/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary: "Store a LangGraph checkpoint (BaseCheckpointSaver.put)",
	Description: "Creates the job when the thread is new. 201 for a new checkpoint; 200 when the (namespace, checkpoint_id) " +
		"existed (its checkpoint and metadata are replaced, as LangGraph's savers do). A new root-namespace checkpoint also " +
		"writes the job's next checkpoint version (job_version), so resume shows the thread's progress. Blobs already " +
		"stored for a (channel, version) are kept. With Prefer: return=minimal, 204 and no body (StrataSaver sends it).",
	DefaultStatus: http.StatusCreated,
	Responses:     minimalResponse(),
}

var OpPutLanggraphWrites = huma.Operation{
	OperationID: "put-langgraph-writes", Method: http.MethodPost, Path: "/v1/jobs/{job}/langgraph/writes", Tags: []string{"langgraph"},
	Summary: "Store a task's pending writes (BaseCheckpointSaver.putWrites)",
	Description: "Idempotent: a write whose (checkpoint, task_id, idx) is stored keeps its first value, unless every write of " +
		"the batch has a negative idx (LangGraph's special channels: ERROR, INTERRUPT, ...), which replace. The checkpoint " +
		"need not be stored yet (durability \"async\"). Creates the job when the thread is new. With Prefer: return=minimal, " +
		"204 and no body (StrataSaver sends it).",
	Responses: minimalResponse(),
}

var OpGetLanggraphCheckpoint = huma.Operation{
	OperationID: "get-langgraph-checkpoint", Method: http.MethodGet, Path: "/v1/jobs/{job}/langgraph/checkpoint", Tags: []string{"langgraph"},
	Summary:     "Read a LangGraph checkpoint tuple (BaseCheckpointSaver.getTuple)",
	Description: "checkpoint_id, or the latest checkpoint of the namespace; with its channel values and pending writes. 404 when there is none.",
}

var OpListLanggraphCheckpoints = huma.Operation{
	OperationID: "list-langgraph-checkpoints", Method: http.MethodGet, Path: "/v1/jobs/{job}/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary:     "List a thread's LangGraph checkpoints, newest first (BaseCheckpointSaver.list)",
	Description: "Filters: checkpoint_ns, checkpoint_id, before (older than this id), filter (metadata containment). Each item is a full tuple.",
}

var OpSearchLanggraphCheckpoints = huma.Operation{
	OperationID: "search-langgraph-checkpoints", Method: http.MethodGet, Path: "/v1/langgraph/checkpoints", Tags: []string{"langgraph"},
	Summary:     "List LangGraph checkpoints across threads, newest first (BaseCheckpointSaver.list without a thread)",
	Description: "As the per-thread list, over every thread of the org (or thread_id).",
}

var OpDeleteLanggraphThread = huma.Operation{
	OperationID: "delete-langgraph-thread", Method: http.MethodDelete, Path: "/v1/jobs/{job}/langgraph", Tags: []string{"langgraph"},
	Summary: "Delete a LangGraph thread (BaseCheckpointSaver.deleteThread)",
	Description: "Deletes the thread's job and with it every checkpoint, blob and pending write, and the job's checkpoint " +
		"versions, steps and handoffs. The job's episodic log is append-only and stays (erasure removes it). Deleting a " +
		"thread that does not exist answers deleted: false. A job with forks → 409.",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go): a thread is a job.

func (in *SearchLangGraphInput) SubjectJob() string { return in.ThreadID }

func (o *ListLangGraphOutput) ItemSubjects() (users, jobs []string) {
	for _, t := range o.Body.Items {
		jobs = append(jobs, t.ThreadID)
	}
	return nil, jobs
}

func (o *ListLangGraphOutput) DropItems(drop func(int) bool) { o.Body.DropItems(drop) }
