package api

import "github.com/strata-mem/strata/internal/strata"

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

// Scope is the query's scope in the caller's org.
func (q ScopeQuery) Scope(org string) strata.Scope {
	return strata.Scope{OrgID: org, UserID: q.UserID, AgentID: q.AgentID, SessionID: q.SessionID}
}

// Scope is the body's scope in the caller's org.
func (b ScopeBody) Scope(org string) strata.Scope {
	return strata.Scope{OrgID: org, UserID: b.UserID, AgentID: b.AgentID, SessionID: b.SessionID}
}
