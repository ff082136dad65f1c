package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// MaxBatch is the most memories one RememberBatch sends.
const MaxBatch = 1000

// BatchItem is what became of one memory of a batch.
type BatchItem struct {
	Index  int    `json:"index"`
	Status string `json:"status"` // created, deduplicated or failed
	// Memory is the memory written, or the duplicate that answered (nil when failed).
	Memory *Memory `json:"memory,omitempty"`
	// DuplicateOf is the index of the earlier item of the batch this one duplicated.
	DuplicateOf *int `json:"duplicate_of,omitempty"`
	// Error is why a failed item was not written: a problem as a single write would answer.
	Error *struct {
		Status int               `json:"status"`
		Detail string            `json:"detail"`
		Errors []json.RawMessage `json:"errors,omitempty"`
	} `json:"error,omitempty"`
}

// BatchAnswer is a batch's answer: one item per memory sent, in order, and the counts.
type BatchAnswer struct {
	Items        []BatchItem `json:"items"`
	Created      int         `json:"created"`
	Deduplicated int         `json:"deduplicated"`
	Failed       int         `json:"failed"`
}

// RememberBatch writes up to MaxBatch memories in one transaction, each deduplicated as
// Remember would. idempotencyKey ("" for a generated one) names the batch: sending the
// same batch again under the same key (after a crash, from another process) replays the
// first answer instead of writing again.
func (c *Client) RememberBatch(ctx context.Context, ms []NewMemory, idempotencyKey string) (BatchAnswer, error) {
	var out BatchAnswer
	call := Call{Method: http.MethodPost, Path: "/v1/memories/batch", Body: map[string]any{"memories": ms}}
	if idempotencyKey != "" {
		call.Header = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	_, err := c.Do(ctx, call, &out)
	return out, err
}
