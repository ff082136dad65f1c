package audit

import "strings"

// Request is what the API knows of a successful write when it records it: ids from the
// route and the body, never the body itself.
type Request struct {
	OrgID, KeyID, Role string
	AgentID, UserID    string // agent_id and user_id named in the body or query ("" for none)
	Action             string // the operation id
	Method, Route      string // the route pattern, e.g. /v1/jobs/{job}/steps/{step}/start
	ParamKeys          []string
	ParamValues        []string // the route's path parameters, in order
	RequestID          string
	Status             int
	Via                string // the channel when not the API itself ("console"), recorded in details.via
}

// RequestEntry is the audit record of a request: the entity is the first path segment after
// /v1 (admin.<x> under /v1/admin) and the path parameters joined by "/"; a data subject
// named in the path ({user}) is recorded by pseudonym only, like the user_id of the body.
func (p *Pseudonymizer) RequestEntry(r Request) Entry {
	// The caller's values are copied only when a subject in them is replaced by its pseudonym.
	values, copied := r.ParamValues, false
	subject := r.UserID
	for i, k := range r.ParamKeys {
		if k == "user" && i < len(values) {
			if !copied {
				values, copied = append([]string(nil), values...), true
			}
			if subject == "" {
				subject = values[i]
			}
			values[i] = "subject:" + p.Subject(r.OrgID, values[i])
		}
	}
	rest := strings.TrimPrefix(r.Route, "/v1/")
	etype, _, _ := strings.Cut(rest, "/")
	if etype == "admin" {
		if parts := strings.Split(rest, "/"); len(parts) > 1 {
			etype = "admin." + parts[1]
		}
	}
	details := map[string]any{"method": r.Method, "route": r.Route}
	if r.Via != "" {
		details["via"] = r.Via
	}
	return Entry{
		OrgID: r.OrgID, ActorKeyID: r.KeyID, ActorRole: r.Role, AgentID: r.AgentID,
		Action: r.Action, EntityType: etype, EntityID: strings.Join(values, "/"), RequestID: r.RequestID,
		Subject: p.Subject(r.OrgID, subject), Status: r.Status,
		Details: details,
	}
}
