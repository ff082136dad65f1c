package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	tc "github.com/strata-mem/strata/internal/turncontext"
)

// POST /v1/context: per-turn context assembly (docs/context.md). The assembly lives in
// internal/turncontext, the handler in internal/httpapi/context.go; here are its wire types.

type ContextRequest struct {
	ScopeBody
	JobID        string   `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job the agent is working on: its resume summary comes first."`
	Query        string   `json:"query,omitempty" maxLength:"4096" doc:"What this turn is about (the user's message, the step at hand): memories and similar jobs are ranked against it. Without it those two sections are empty."`
	MaxTokens    int      `json:"max_tokens,omitempty" minimum:"50" maximum:"1000000" doc:"Token budget of the whole context (default 4000)."`
	Model        string   `json:"model,omitempty" maxLength:"100" pattern:"^[A-Za-z0-9._:/-]+$" doc:"The model the context is for: its tokenizer counts (gpt-4o, gpt-4.1, o3, gpt-4, gpt-3.5-turbo, ... or an encoding: o200k_base, cl100k_base). Other models are counted with o200k_base and marked estimated. Default gpt-4o."`
	KVNamespaces []string `json:"kv_namespaces,omitempty" maxItems:"20" doc:"Key-value namespaces whose keys apply as preferences, each resolved for the scope (session > agent > user > org). Default [\"preferences\", \"rules\"]."`
	TopK         int      `json:"top_k,omitempty" minimum:"1" maximum:"100" doc:"Memories to consider (default 10)."`
	SimilarJobs  *int     `json:"similar_jobs,omitempty" minimum:"0" maximum:"50" doc:"Similar past jobs to consider (default 3; 0: none)."`
	RecentTurns  *int     `json:"recent_turns,omitempty" minimum:"0" maximum:"200" doc:"Newest session turns to consider with the working state (default 6; 0: none)."`
	RecentEvents *int     `json:"recent_events,omitempty" minimum:"0" maximum:"200" doc:"Newest job events to consider after the completed steps (default 5; 0: none)."`
	// Poisoning controls (quarantine.go): the same filters as memory search.
	Trust      []string              `json:"trust,omitempty" maxItems:"5" doc:"Only memories (and job memories) of these trust levels."`
	Provenance *ProvenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) memories written by these keys, agents or jobs."`
}

type ContextInput struct {
	Body ContextRequest
}

// ContextJob is the job's position, for the agent's bookkeeping.
type ContextJob struct {
	JobID             string `json:"job_id"`
	Status            string `json:"status"`
	CurrentStep       string `json:"current_step,omitempty"`
	NextAction        string `json:"next_action,omitempty"`
	CheckpointVersion int64  `json:"checkpoint_version" doc:"Send it as If-Match with the next checkpoint."`
	LastEventSeq      int64  `json:"last_event_seq"`
	CompletedSteps    int    `json:"completed_steps"`
	InFlight          int    `json:"in_flight"`
}

// ContextBody is the assembled context.
type ContextBody struct {
	Model        string        `json:"model"`
	Encoding     string        `json:"encoding" doc:"The BPE vocabulary that counted (o200k_base, cl100k_base, ...)."`
	Estimated    bool          `json:"estimated" doc:"True when the model is not an OpenAI model: counts are o200k_base's, an estimate."`
	MaxTokens    int           `json:"max_tokens"`
	Tokens       int           `json:"tokens" doc:"Tokens of prompt: never more than max_tokens."`
	Prompt       string        `json:"prompt" doc:"Every included section, in priority order, ready to put in the model's context."`
	Sections     []tc.Packed   `json:"sections" doc:"job, working_state, summary, preferences, memories, graph, similar_jobs (always all seven, in this order): tokens used and what was left out. graph is the entities the query mentions by name or alias, with their relations in force (why says which words chose each). summary is the rolling summary of the session's spilled turns and the job's older events (GET /v1/sessions/{session}/summary, /v1/jobs/{job}/summary)."`
	Job          *ContextJob   `json:"job,omitempty"`
	KVNamespaces []string      `json:"kv_namespaces"`
	Timings      ContextTiming `json:"timings_ms" doc:"Where the time went (milliseconds)."`
}

// ContextTiming is the server-side cost of one assembly.
type ContextTiming struct {
	Job         float64 `json:"job" doc:"The first round trip: the job's resume and newest events, every namespace's preferences and the restriction check, in one pipeline."`
	Working     float64 `json:"working_state" doc:"Reading the session's state and turns (Redis), beside the searches."`
	Preferences float64 `json:"preferences" doc:"Rendering the preferences read in the first round trip."`
	Search      float64 `json:"search" doc:"The memory and similar-jobs searches (the query's embedding is computed beside the first round trip)."`
	Graph       float64 `json:"graph" doc:"The entities the query mentions and their relations (nothing when the org has none)."`
	Pack        float64 `json:"pack"`
}

type ContextOutput struct {
	Body ContextBody
}

var OpGetContext = huma.Operation{
	OperationID: "get-context", Method: http.MethodPost, Path: "/v1/context", Tags: []string{"context"},
	Summary: "Assemble this turn's context within a token budget",
	Description: "The one call an agent makes at the start of every turn. Answers, in priority order and within " +
		"max_tokens (counted with the model's tokenizer): the job's resume summary (current step, next action, " +
		"steps done — never redo them), the working state (session state document and newest turns, or the " +
		"checkpoint's snapshot), the preferences that apply (kv_namespaces resolved session > agent > user > org), " +
		"the memories most relevant to query, and similar past jobs. Each section reports the tokens it used and " +
		"the items left out for the budget. Reads only (memories served are recorded in the retrieval log).",
}
