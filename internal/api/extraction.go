package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/working"
)

// Conversation memory: extraction of facts and preferences from turns (issue 21,
// docs/extraction.md). Wire types and operation docs; handlers are in extraction.go.

// MessageIn is one turn of a batch append.
type MessageIn struct {
	Role     string     `json:"role" enum:"user,assistant,system,tool"`
	Content  string     `json:"content"`
	Metadata JSONObject `json:"metadata,omitempty" doc:"Free-form JSON object."`
}

type ExtractMessage struct {
	Role    string `json:"role" enum:"user,assistant,system,tool"`
	Content string `json:"content" maxLength:"100000"`
}

type ExtractInput struct {
	Body struct {
		SessionID string           `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Extract the session's turns not extracted yet (its cursor advances unless dry_run). Either this or messages."`
		Messages  []ExtractMessage `json:"messages,omitempty" maxItems:"200" doc:"Extract from these messages (not stored as turns). Either this or session_id."`
		UserID    string           `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject (with messages; a session has its own)."`
		AgentID   string           `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
		DryRun    bool             `json:"dry_run,omitempty" doc:"Answer the decisions without applying any (the cursor does not move)."`
	}
}

type ExtractBody struct {
	SessionID string `json:"session_id,omitempty"`
	UserID    string `json:"user_id,omitempty"`
	FromSeq   int64  `json:"from_seq,omitempty" doc:"The first turn extracted (session_id)."`
	ToSeq     int64  `json:"to_seq,omitempty" doc:"The last turn extracted; the session's cursor after the call unless dry_run."`
	extraction.Decisions
}

type ExtractOutput struct {
	Body ExtractBody
}

var OpExtractMemories = huma.Operation{
	OperationID: "extract-memories", Method: http.MethodPost, Path: "/v1/memories/extract", Tags: []string{"semantic"},
	Summary: "Extract facts and preferences from turns (on demand)",
	Description: "Asks the org's LLM what to remember from a session's turns not extracted yet (session_id) or from " +
		"messages sent here, and applies its decisions: add (deduplicated), update (a new version superseding the old), " +
		"delete (retracted: validity ends, history kept), noop. Preferences go to key-value namespace preferences at " +
		"user level. Every result has trust extracted and records its provenance (GET /v1/memories/{id}/provenance). " +
		"dry_run answers the decisions without applying them. Without an LLM configured the answer is 503 naming " +
		"STRATA_LLM_MODEL. Background extraction (policy extraction.enabled) does the same after appends.",
}

type ExtractedFromBody struct {
	MemoryID string              `json:"memory_id"`
	Items    []ExtractedFromItem `json:"items" doc:"One per extracted version of the memory, oldest first; empty when it was never extracted."`
}

type ExtractedFromItem struct {
	extraction.ProvenanceRecord
	Turns []working.Turn `json:"turns" doc:"The turns it came from that still exist (a deleted session's are gone)."`
}

type ExtractedFromOutput struct {
	subjects // the memory's data subject
	Body     ExtractedFromBody
}

var OpMemoryProvenance = huma.Operation{
	OperationID: "memory-provenance", Method: http.MethodGet, Path: "/v1/memories/{id}/provenance", Tags: []string{"semantic"},
	Summary: "The turns a memory was extracted from",
	Description: "For every version of the memory that extraction wrote: the decision, the session and turn seqs, the " +
		"model and prompt version, the API key that wrote the turns, and the turns themselves.",
}

type ExtractionStateOutput struct {
	subjects // the session's data subject
	Body     extraction.SessionExtraction
}

var OpSessionExtraction = huma.Operation{
	OperationID: "get-session-extraction", Method: http.MethodGet, Path: "/v1/sessions/{session}/extraction", Tags: []string{"working"},
	Summary: "A session's extraction status",
	Description: "The cursor (extracted_seq: every turn at or below it was extracted), the newest waiting turn, the " +
		"status of the last run and, after a failure, why and when it is retried. 404 when extraction never saw the session.",
}
