package httpapi

import (
	"strconv"
	"strings"

	"github.com/strata-mem/strata/internal/strata"
)

// ScopeQuery is the optional scope of a read, from the query string. The org is never a
// parameter: it is the API key's.
type ScopeQuery struct {
	UserID    string `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id."`
	AgentID   string `query:"agent_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Agent id."`
	SessionID string `query:"session_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Session id."`
}

// ScopeBody is the optional scope of a write, flat in the JSON body. Embed it in a body
// struct.
type ScopeBody struct {
	UserID    string `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id."`
	AgentID   string `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Agent id."`
	SessionID string `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Session id."`
}

// Scope returns the query's scope for the caller's org.
func (q ScopeQuery) Scope(r *Request) strata.Scope { return r.Scope(q.UserID, q.AgentID, q.SessionID) }

// Scope returns the body's scope for the caller's org.
func (b ScopeBody) Scope(r *Request) strata.Scope { return r.Scope(b.UserID, b.AgentID, b.SessionID) }

// etag renders a version as a strong ETag: "7".
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch parses an If-Match header carrying one of our ETags (quoted or bare, optionally
// W/-prefixed). ok is false when the header is absent or "*".
func ifMatch(h string) (version int64, ok bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" || h == "*" {
		return 0, false, nil
	}
	h = strings.TrimPrefix(h, "W/")
	h = strings.Trim(h, `"`)
	v, perr := strconv.ParseInt(h, 10, 64)
	if perr != nil || v < 0 {
		return 0, false, &strata.FieldError{Field: "header.If-Match", Msg: `must be an ETag this API returned, such as "3"`, Status: 400}
	}
	return v, true, nil
}
