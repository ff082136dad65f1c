package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// MemoryFilter selects the memories of ListMemories (GET /v1/memories). Empty fields do
// not filter; scope fields match exactly.
type MemoryFilter struct {
	Scope
	Kind          string
	Trust         string
	Provenance    string // extracted, consolidated or written
	KeyID         string
	CreatedAfter  time.Time
	CreatedBefore time.Time
}

// ListMemories pages through the current memories matching f, newest first (pass the
// previous page's NextCursor as cursor).
func (c *Client) ListMemories(ctx context.Context, f MemoryFilter, cursor string, limit int) (Page[Memory], error) {
	q := url.Values{}
	for k, v := range map[string]string{"user_id": f.UserID, "agent_id": f.AgentID, "session_id": f.SessionID,
		"kind": f.Kind, "trust": f.Trust, "provenance": f.Provenance, "key_id": f.KeyID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	setPage(q, cursor, limit)
	var p Page[Memory]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/memories", Query: q}, &p)
	return p, err
}

// SessionInfo is one session of ListSessions.
type SessionInfo struct {
	SessionID string    `json:"session_id"`
	UserID    string    `json:"user_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	Version   int64     `json:"version"`
	Turns     int64     `json:"turns"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ListSessions pages through the org's live sessions (user "": every user's), newest first.
func (c *Client) ListSessions(ctx context.Context, user, cursor string, limit int) (Page[SessionInfo], error) {
	q := url.Values{}
	if user != "" {
		q.Set("user_id", user)
	}
	setPage(q, cursor, limit)
	var p Page[SessionInfo]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/sessions", Query: q}, &p)
	return p, err
}

// Summary is one version of a rolling summary (docs/summaries.md).
type Summary struct {
	Kind          string    `json:"kind"`
	SubjectID     string    `json:"subject_id"`
	Version       int64     `json:"version"`
	UserID        string    `json:"user_id,omitempty"`
	FromSeq       int64     `json:"from_seq"`
	AddedFrom     int64     `json:"added_from"`
	ToSeq         int64     `json:"to_seq"`
	Items         int       `json:"items"`
	Text          string    `json:"text"`
	Tokens        int       `json:"tokens"`
	Summarizer    string    `json:"summarizer"`
	PromptVersion string    `json:"prompt_version,omitempty"`
	Fallback      string    `json:"fallback,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}

// SessionSummary reads the latest rolling summary of a session (IsNotFound until there is one).
func (c *Client) SessionSummary(ctx context.Context, session string) (Summary, error) {
	var s Summary
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/sessions/" + PathEscape(session) + "/summary"}, &s)
	return s, err
}

// JobSummary reads the latest rolling summary of a job's log.
func (c *Client) JobSummary(ctx context.Context, job string) (Summary, error) {
	var s Summary
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/jobs/" + PathEscape(job) + "/summary"}, &s)
	return s, err
}

// SummaryVersions pages through a session's ("session") or job's ("job") summary versions,
// newest first; cursor is the previous page's NextCursor.
func (c *Client) SummaryVersions(ctx context.Context, kind, id, cursor string, limit int) (Page[Summary], error) {
	base := "/v1/sessions/"
	if kind == "job" {
		base = "/v1/jobs/"
	}
	q := url.Values{}
	setPage(q, cursor, limit)
	var p Page[Summary]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: base + PathEscape(id) + "/summary/versions", Query: q}, &p)
	return p, err
}
