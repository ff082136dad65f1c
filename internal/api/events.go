package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// OpStreamEvents documents GET /v1/events/stream (docs/events.md). It is served outside the
// unit of work (a long-lived stream holds no transaction), so it is added to the OpenAPI
// document as a description only.
var OpStreamEvents = huma.Operation{
	OperationID: "stream-events", Method: http.MethodGet, Path: "/v1/events/stream", Tags: []string{"events"},
	Summary: "Follow the org's events live (Server-Sent Events)",
	Description: "A text/event-stream of the caller's org's events from the transactional outbox: `id` is the event's seq, " +
		"`event` its type, `data` the event as JSON (ids only; subjects as pseudonyms). Reconnect with `Last-Event-ID` " +
		"to continue after the last event seen: none skipped, none repeated, across server restarts. " +
		"A `: heartbeat` comment keeps idle connections open. See docs/events.md for the event types.",
	Parameters: []*huma.Param{
		{Name: "types", In: "query", Description: "Only these event types, comma-separated (e.g. job.stalled,step.failed).",
			Schema: &huma.Schema{Type: "string"}},
		{Name: "job", In: "query", Description: "Only this job's events.",
			Schema: &huma.Schema{Type: "string", Pattern: "^[A-Za-z0-9._:-]{1,200}$"}},
		{Name: "after", In: "query", Description: "Start after this event seq (like Last-Event-ID).",
			Schema: &huma.Schema{Type: "integer", Minimum: ptr(0.0)}},
		{Name: "Last-Event-ID", In: "header", Description: "The seq of the last event received: the stream resumes after it.",
			Schema: &huma.Schema{Type: "string"}},
	},
	Responses: map[string]*huma.Response{
		"200": {Description: "The event stream.", Content: map[string]*huma.MediaType{
			"text/event-stream": {Schema: &huma.Schema{Type: "string"}}}},
		"401": {Description: "Missing or unknown API key."},
		"422": {Description: "A bad filter or Last-Event-ID (RFC 9457 problem naming it)."},
	},
}

func ptr[T any](v T) *T { return &v }
