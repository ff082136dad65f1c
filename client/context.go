package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// ContextRequest asks for one turn's context (POST /v1/context).
type ContextRequest struct {
	Scope
	JobID        string   `json:"job_id,omitempty"`
	Query        string   `json:"query,omitempty"`
	MaxTokens    int      `json:"max_tokens,omitempty"`
	Model        string   `json:"model,omitempty"`
	KVNamespaces []string `json:"kv_namespaces,omitempty"`
	TopK         int      `json:"top_k,omitempty"`
	SimilarJobs  *int     `json:"similar_jobs,omitempty"`
	RecentTurns  *int     `json:"recent_turns,omitempty"`
	RecentEvents *int     `json:"recent_events,omitempty"`
}

// ContextSection is one section as placed in the context.
type ContextSection struct {
	Name       string   `json:"name"`
	Tokens     int      `json:"tokens"`
	Text       string   `json:"text"`
	Candidates int      `json:"candidates"`
	Included   []string `json:"included"`
	// Why says why each included item was chosen, in included's order, for sections that
	// say (graph: "mentioned: 'Ana'").
	Why     []string `json:"why,omitempty"`
	LeftOut []struct {
		ID     string `json:"id"`
		Tokens int    `json:"tokens"`
	} `json:"left_out"`
	LeftOutCount int    `json:"left_out_count"`
	Note         string `json:"note,omitempty"`
}

// TurnContext is the assembled context of a turn.
type TurnContext struct {
	Model        string           `json:"model"`
	Encoding     string           `json:"encoding"`
	Estimated    bool             `json:"estimated"`
	MaxTokens    int              `json:"max_tokens"`
	Tokens       int              `json:"tokens"`
	Prompt       string           `json:"prompt"`
	Sections     []ContextSection `json:"sections"`
	KVNamespaces []string         `json:"kv_namespaces"`
	Job          *struct {
		JobID             string `json:"job_id"`
		Status            string `json:"status"`
		CurrentStep       string `json:"current_step,omitempty"`
		NextAction        string `json:"next_action,omitempty"`
		CheckpointVersion int64  `json:"checkpoint_version"`
		LastEventSeq      int64  `json:"last_event_seq"`
		CompletedSteps    int    `json:"completed_steps"`
		InFlight          int    `json:"in_flight"`
	} `json:"job,omitempty"`
	Timings map[string]float64 `json:"timings_ms"`
}

// Context assembles this turn's context (a read; safe to retry).
func (c *Client) Context(ctx context.Context, r ContextRequest) (TurnContext, error) {
	var out TurnContext
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/context", Body: r}, &out)
	return out, err
}

// OpenAITool is one tool in OpenAI's function-calling format.
type OpenAITool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// Tools returns the agent tools as OpenAI function-calling schemas (GET /v1/tools).
func (c *Client) Tools(ctx context.Context) ([]OpenAITool, error) {
	var p Page[OpenAITool]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/tools"}, &p)
	return p.Items, err
}
