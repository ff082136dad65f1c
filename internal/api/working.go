package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/working"
)

// JSONObject is a free-form JSON object kept as its raw bytes (numbers stay exact); its
// schema says "object", so huma refuses any other JSON type with a 422 naming the field.
type JSONObject json.RawMessage

// UnmarshalJSON keeps the raw bytes.
func (o *JSONObject) UnmarshalJSON(b []byte) error {
	*o = append((*o)[:0], b...)
	return nil
}

// MarshalJSON writes the raw bytes.
func (o JSONObject) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	return o, nil
}

// Schema describes the field as a JSON object with any members.
func (JSONObject) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{Type: "object", AdditionalProperties: true}
}

// SessionPath is the {session} path parameter of the working-memory routes.
type SessionPath struct {
	Session string `path:"session" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Client-chosen session id."`
}

// SessionWrite is the scope and TTL a session write may carry, flat in the body.
type SessionWrite struct {
	UserID     string `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id. Set by the session's first write; later writes may repeat it or omit it."`
	AgentID    string `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Agent id. Set by the session's first write, like user_id."`
	TTLSeconds int64  `json:"ttl_seconds,omitempty" minimum:"1" maximum:"31536000" doc:"Sliding TTL of the session (default STRATA_SESSION_TTL). Every read and write pushes expires_at to now + ttl."`
}

func (b SessionWrite) TTL() time.Duration { return time.Duration(b.TTLSeconds) * time.Second }

type PutStateInput struct {
	SessionPath
	IfMatch string `header:"If-Match" doc:"Write only if the state is at this version (an ETag from this API). Stale → 409."`
	Body    struct {
		State JSONObject `json:"state" doc:"The whole state document (a JSON object). Replaces the current one."`
		SessionWrite
	}
}

type PatchStateInput struct {
	SessionPath
	IfMatch string `header:"If-Match" doc:"Apply only if the state is at this version. Stale → 409. Without it the patch is applied to whatever the current version is."`
	Body    struct {
		State JSONObject `json:"state,omitempty" doc:"An RFC 7386 merge patch for the state document: members replace, objects merge recursively, null deletes."`
		SessionWrite
	} `contentType:"application/merge-patch+json"`
}

type StateOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   working.State
}

type DeleteStateInput struct {
	SessionPath
	IfMatch string `header:"If-Match" doc:"Delete only if the state is at this version."`
}

type PostMessageInput struct {
	SessionPath
	Body struct {
		Role     string      `json:"role,omitempty" enum:"user,assistant,system,tool" doc:"Required unless messages is sent."`
		Content  string      `json:"content,omitempty" doc:"Required unless messages is sent."`
		Metadata JSONObject  `json:"metadata,omitempty" doc:"Free-form JSON object."`
		Messages []MessageIn `json:"messages,omitempty" maxItems:"100" doc:"A batch of turns appended in order in one call (instead of role/content): all or none."`
		SessionWrite
	}
}

type MessageBody struct {
	SessionID string `json:"session_id"`
	working.Turn
	ExpiresAt time.Time      `json:"expires_at"`
	Items     []working.Turn `json:"items,omitempty" doc:"With messages: every turn appended, in order (the body's own fields are the last)."`
}

type MessageOutput struct {
	Status int
	Body   MessageBody
}

type ListMessagesInput struct {
	SessionPath
	AfterSeq int64 `query:"after_seq" default:"-1" minimum:"-1" doc:"Omit for the buffer (the newest turns, from Redis). Set (0 = from the start) to page through the session's durable log, which also holds the turns that left the buffer."`
	Limit    int   `query:"limit" minimum:"1" maximum:"1000" doc:"Page size for the log (default 100, max 1000)."`
}

type MessagesBody struct {
	SessionID  string         `json:"session_id"`
	Items      []working.Turn `json:"items"`
	NextCursor string         `json:"next_cursor,omitempty" doc:"Pass as after_seq for the next page of the log; absent on the last page."`
	ExpiresAt  *time.Time     `json:"expires_at,omitempty"`
	Restored   bool           `json:"restored" doc:"True when the buffer was rehydrated from the durable copy."`
}

type MessagesOutput struct {
	subjects // the session's data subject
	Body     MessagesBody
}

var OpPutSessionState = huma.Operation{
	OperationID: "put-session-state", Method: http.MethodPut, Path: "/v1/sessions/{session}/state", Tags: []string{"working"},
	Summary: "Replace a session's state document",
	Description: "Creates the session on first write (201; user_id and agent_id are fixed then). Every write bumps the version, " +
		"returned in the body and as ETag. Written through to Postgres before the response.",
}

var OpPatchSessionState = huma.Operation{
	OperationID: "patch-session-state", Method: http.MethodPatch, Path: "/v1/sessions/{session}/state", Tags: []string{"working"},
	Summary: "Merge-patch a session's state document (RFC 7386)",
	Description: "Send application/merge-patch+json (or application/json) with {\"state\": <patch>}. " +
		"With If-Match, a stale version gets 409 and nothing changes; without it, concurrent patches are all applied.",
}

var OpGetSessionState = huma.Operation{
	OperationID: "get-session-state", Method: http.MethodGet, Path: "/v1/sessions/{session}/state", Tags: []string{"working"},
	Summary: "Read a session's state document",
	Description: "Slides the session's TTL. After Redis lost the session (flush, restart) or while it is unreachable, " +
		"the last durable version is returned with restored: true.",
}

var OpDeleteSession = huma.Operation{
	OperationID: "delete-session", Method: http.MethodDelete, Path: "/v1/sessions/{session}/state", Tags: []string{"working"},
	Summary: "Delete a session", DefaultStatus: http.StatusNoContent,
	Description: "Removes the state document, the turn buffer and their durable copies (the turn log included) " +
		"from Redis and Postgres. The version counter is kept, so an old ETag never matches a recreated session.",
}

var OpPostSessionMessage = huma.Operation{
	OperationID: "post-session-message", Method: http.MethodPost, Path: "/v1/sessions/{session}/messages", Tags: []string{"working"},
	Summary: "Append a turn to a session", DefaultStatus: http.StatusCreated,
	Description: "The buffer keeps the newest STRATA_TURN_BUFFER turns; every turn is also in the session's durable " +
		"log, so what falls off the end is never lost (GET with after_seq reads it).",
}

var OpPopSessionMessage = huma.Operation{
	OperationID: "pop-session-message", Method: http.MethodPost, Path: "/v1/sessions/{session}/messages/pop", Tags: []string{"working"},
	Summary: "Remove a session's newest turn",
	Description: "Removes the newest turn from the buffer and the durable log and answers it (the OpenAI Agents SDK's " +
		"popItem). Seqs are not reused. A POST, so Idempotency-Key makes a retried pop one pop; 404 when no turn is left.",
}

// PopOutput is the removed turn.
type PopOutput struct {
	subjects // the session's data subject
	Body     struct {
		SessionID string `json:"session_id"`
		working.Turn
	}
}

var OpListSessionMessages = huma.Operation{
	OperationID: "list-session-messages", Method: http.MethodGet, Path: "/v1/sessions/{session}/messages", Tags: []string{"working"},
	Summary: "Read a session's turns",
	Description: "Without after_seq: the buffer (the newest turns, oldest first; slides the TTL). " +
		"With after_seq: a page of the durable log.",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go).

func (o *StateOutput) SubjectUsers() []string { return []string{o.Body.UserID} }
