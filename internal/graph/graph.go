package graph

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/strata"
)

// Limits on what the store accepts.
const (
	MaxNameLen    = 500   // characters of a name, an alias or a literal object value
	MaxNameBytes  = 1500  // UTF-8 bytes of a name or an alias, and of its key: see checkName
	MaxAliases    = 64    // aliases of one entity (a merge may exceed it: nothing is dropped)
	MaxTypeLen    = 100   // characters of an entity type
	MaxSummaryLen = 8192  // characters of a summary
	MaxFactLen    = 2000  // characters of a relation's fact sentence
	MaxPredicate  = 200   // characters of a predicate
	MaxDepth      = 3     // the deepest neighbours walk
	MaxLimit      = 1000  // the most rows a list returns
	maxWalkPaths  = 20000 // paths a neighbours walk may visit before it stops (breadth first)
)

// Space identifies the embedding space a vector lives in (as semantic.Space does; the tier
// keeps its own copy because tiers do not import each other).
type Space struct {
	Embedder string `json:"embedder"`
	Model    string `json:"model"`
	Dims     int    `json:"dims"`
}

// Entity is a person, place, organisation, thing or concept in an org's scope.
type Entity struct {
	ID        uuid.UUID `json:"id"`
	UserID    string    `json:"user_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Name      string    `json:"name"`
	Type      string    `json:"type,omitempty"`
	Aliases   []string  `json:"aliases"`
	Summary   string    `json:"summary,omitempty"`
	// Embedding is the space of the stored vector (nil: none stored). The vector itself is
	// not read back.
	Embedding *Space `json:"embedding,omitempty"`
	// SourceMemoryIDs are the memories that mentioned the entity.
	SourceMemoryIDs []uuid.UUID `json:"source_memory_ids,omitempty"`
	// MergedInto is set on a tombstone: the entity was merged into this one.
	MergedInto *uuid.UUID `json:"merged_into,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// Scope is the entity's own scope.
func (e Entity) Scope(org string) strata.Scope {
	return strata.Scope{OrgID: org, UserID: e.UserID, AgentID: e.AgentID, SessionID: e.SessionID}
}

// Provenance says where a relation came from.
type Provenance struct {
	MemoryID *uuid.UUID `json:"memory_id,omitempty"` // the memory it was extracted from
	JobID    string     `json:"job_id,omitempty"`    // the job, and the episodic event, it came from
	EventSeq *int64     `json:"event_seq,omitempty"`
	KeyID    string     `json:"key_id,omitempty"`   // the API key that wrote it
	AgentID  string     `json:"agent_id,omitempty"` // the agent that wrote it
	// Writers is every key that wrote the turns it was extracted from (an extraction
	// batch, issue 57): a quarantine of any of them holds it (notQuarantinedSQL). Not read
	// back; nil for relations written by one key.
	Writers []string `json:"-"`
}

// Relation is one version of a fact about a subject: subject -predicate-> object.
type Relation struct {
	ID        uuid.UUID `json:"id"`
	UserID    string    `json:"user_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	SubjectID uuid.UUID `json:"subject_id"`
	// SubjectName and ObjectName are the entities' names when the relation was read.
	SubjectName string     `json:"subject_name,omitempty"`
	Predicate   string     `json:"predicate"`
	ObjectID    *uuid.UUID `json:"object_id,omitempty"`
	ObjectName  string     `json:"object_name,omitempty"`
	// ObjectValue is the literal object when there is no object entity.
	ObjectValue *string    `json:"object_value,omitempty"`
	Functional  bool       `json:"functional"`
	Fact        string     `json:"fact,omitempty"`
	Provenance  Provenance `json:"provenance"`
	ValidFrom   time.Time  `json:"valid_from"`
	ValidTo     *time.Time `json:"valid_to,omitempty"`
	RecordedAt  time.Time  `json:"recorded_at"`
	// SupersededAt is when Strata learned the relation had ended (by a contradiction, or
	// Close); SupersededBy the relation that ended it, if any.
	SupersededAt *time.Time `json:"superseded_at,omitempty"`
	SupersededBy *uuid.UUID `json:"superseded_by,omitempty"`
}

// InForce reports whether neither time axis has closed the relation.
func (r Relation) InForce() bool { return r.ValidTo == nil && r.SupersededAt == nil }

// AsOf picks a moment on each time axis. The zero AsOf means now on both: the relations in
// force. World is when the relation held in the world (valid_from ≤ World < valid_to);
// Record, when set, answers with what Strata knew at that time (relations recorded by
// then, and closings learned by then).
type AsOf struct {
	World  *time.Time
	Record *time.Time
}

// Options tune the store.
type Options struct {
	// Now is the store's clock [time.Now].
	Now func() time.Time
}

// Store reads and writes the graph. It holds no connection: every method takes the
// caller's transaction, bound to the org (pg.SetOrg), and names the org in its SQL too.
// It is safe for concurrent use.
type Store struct {
	now func() time.Time
}

// NewStore returns a store.
func NewStore(o Options) *Store {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{now: o.Now}
}

// Normalize is the resolution form of a name or alias: lower case, whitespace collapsed.
func Normalize(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

func checkScope(sc strata.Scope) error {
	if sc.OrgID == "" {
		return strata.Invalid("org_id", "is required")
	}
	if err := strata.CheckID("user_id", sc.UserID, true); err != nil {
		return err
	}
	if err := strata.CheckID("agent_id", sc.AgentID, true); err != nil {
		return err
	}
	return strata.CheckID("session_id", sc.SessionID, true)
}

// checkString refuses NUL, blank (when required) and over-long strings.
func checkString(field, s string, max int, required bool) error {
	if err := strata.CheckText(field, s); err != nil {
		return err
	}
	if !utf8.ValidString(s) {
		return strata.Invalid(field, "must be valid UTF-8")
	}
	if required && strings.TrimSpace(s) == "" {
		return strata.Invalid(field, "must not be blank")
	}
	if n := utf8.RuneCountInString(s); n > max {
		return strata.Invalid(field, "must be at most %d characters, got %d", max, n) // 422 naming it, not 413
	}
	return nil
}

// checkName is checkString for a name or an alias, which is also an index key: its bytes
// and its normalised key's bytes are bounded too (MaxNameBytes), so the unique index on
// (org, user, agent, session, name key) stays under Postgres's b-tree row limit (2,704
// bytes) with four 200-byte ids beside the key: a 422, not SQLSTATE 54000.
func checkName(field, s string, required bool) error {
	if err := checkString(field, s, MaxNameLen, required); err != nil {
		return err
	}
	if n := max(len(s), len(Normalize(s))); n > MaxNameBytes {
		return strata.Invalid(field, "must be at most %d bytes of UTF-8, got %d", MaxNameBytes, n)
	}
	return nil
}

func checkLimit(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return min(limit, MaxLimit)
}

// utc returns t in UTC (nil stays nil).
func utcp(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
