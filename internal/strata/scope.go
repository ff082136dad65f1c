package strata

// Role is what an API key may do.
type Role string

// The three roles of DESIGN.md.
const (
	RoleAgent      Role = "agent"      // the data plane: memory, jobs, sessions
	RoleCompliance Role = "compliance" // GDPR requests and the audit log
	RoleAdmin      Role = "admin"      // keys, policies, workers, and everything else
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool { return r == RoleAgent || r == RoleCompliance || r == RoleAdmin }

// Scope locates a record: the org always (from the API key, never the body), the others
// optional. An empty string means "not at this level".
type Scope struct {
	OrgID     string `json:"-"`
	UserID    string `json:"user_id,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
}

// Level names the most specific level the scope sets: session, agent, user or org.
func (s Scope) Level() string {
	switch {
	case s.SessionID != "":
		return "session"
	case s.AgentID != "":
		return "agent"
	case s.UserID != "":
		return "user"
	default:
		return "org"
	}
}
