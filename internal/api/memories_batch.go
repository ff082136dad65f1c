package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/semantic"
)

// BatchMemoryItem is one memory of a batch write: the body of POST /v1/memories.
type BatchMemoryItem struct {
	Text string `json:"text" minLength:"1" maxLength:"16384" doc:"The memory, in natural language."`
	Kind string `json:"kind,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"fact (default), preference, job, case, or a custom kind."`
	ScopeBody
	Metadata   map[string]any  `json:"metadata,omitempty" doc:"Free-form object (at most 16 KiB)."`
	Importance *float64        `json:"importance,omitempty" minimum:"0" maximum:"1" doc:"0-1, default 0.5: a ranking feature."`
	Pinned     bool            `json:"pinned,omitempty" doc:"Pinned memories do not decay with age (and eviction keeps them)."`
	Trust      string          `json:"trust,omitempty" enum:"verified,user_stated,agent_inferred,tool_output,consolidated" doc:"Where the content came from (default agent_inferred)."`
	Provenance *ProvenanceBody `json:"provenance,omitempty"`
}

// CreateMemoriesInput is a batch of memories.
type CreateMemoriesInput struct {
	Body struct {
		Memories []BatchMemoryItem `json:"memories" minItems:"1" maxItems:"1000" doc:"1-1000 memories, written in this order."`
	}
}

// BatchItemProblem is why one item of a batch was not written.
type BatchItemProblem struct {
	Status int                 `json:"status" doc:"The status a single write of this item would have answered."`
	Detail string              `json:"detail"`
	Errors []*huma.ErrorDetail `json:"errors,omitempty"`
}

// BatchMemoryResult is what became of one item.
type BatchMemoryResult struct {
	Index       int               `json:"index" doc:"The item's position in the request."`
	Status      string            `json:"status" enum:"created,deduplicated,failed" doc:"created: a new memory; deduplicated: the existing duplicate answers (no row created); failed: see error, nothing written for this item."`
	Memory      *semantic.Memory  `json:"memory,omitempty"`
	Dedup       *semantic.Dedup   `json:"dedup,omitempty"`
	DuplicateOf *int              `json:"duplicate_of,omitempty" doc:"The index of the earlier item of this batch it duplicated."`
	Error       *BatchItemProblem `json:"error,omitempty"`
}

// CreateMemoriesOutput is the per-item answer of a batch.
type CreateMemoriesOutput struct {
	Body struct {
		Items        []BatchMemoryResult `json:"items" doc:"One result per item, in the request's order."`
		Created      int                 `json:"created"`
		Deduplicated int                 `json:"deduplicated"`
		Failed       int                 `json:"failed"`
	}
}

// BatchBodyBytes is the body limit of a batch (STRATA_MAX_BODY_BYTES when that is larger).
const BatchBodyBytes = 16 << 20

// OpCreateMemories is POST /v1/memories/batch.
var OpCreateMemories = huma.Operation{
	OperationID: "create-memories", Method: http.MethodPost, Path: "/v1/memories/batch", Tags: []string{"semantic"},
	Summary: "Write up to 1,000 memories in one transaction (deduplicated)", MaxBodyBytes: BatchBodyBytes,
	Description: "The batch is written as if its items were POSTed to /v1/memories one after the other, in one " +
		"transaction: each item is deduplicated (exact and near, in its scope) against the store and against the " +
		"batch's earlier items, and a duplicate answers with the existing memory. Embeddings are computed in batches. " +
		"An item whose content the schema accepts but the tier refuses (metadata over 16 KiB, for one) is answered " +
		"`failed` with its problem and nothing is written for it; the others are written. A body the schema refuses " +
		"(a missing text, a bad id, more than 1,000 items) is refused whole (422, nothing written). Send an " +
		"Idempotency-Key: a retried batch replays its first answer. The body may hold up to 16 MiB.",
}
