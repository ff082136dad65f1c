package semantic

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/strata"
)

// What the semantic tier checks of its callers' input. Errors are *strata.FieldError with
// bare field names ("text", "kinds[2]", "provenance.key_ids[0]"); the caller's transport
// says where the field travelled.

// Limits of a memory and of a search.
const (
	MaxMetadataBytes   = 16384 // a memory's metadata, as JSON
	MaxTopK            = 100   // results of one search
	DefaultTopK        = 10
	DefaultSimilarJobs = 5
)

// ErrIncludeQuarantined: only an admin may search quarantined memory versions (a review
// tool); it is an ErrForbidden.
var ErrIncludeQuarantined = fmt.Errorf("include_quarantined needs an admin key: %w", strata.ErrForbidden)

// CheckText enforces what a memory's text (or a search's query) must be beyond its length:
// not blank, no NUL.
func CheckText(field, text string) error {
	if strings.TrimSpace(text) == "" {
		return strata.Invalid(field, "must not be blank")
	}
	return strata.CheckText(field, text)
}

// CheckMetadata checks a memory's metadata object (nil: none): at most MaxMetadataBytes of
// JSON, no NUL.
func CheckMetadata(field string, m map[string]any) error {
	if m == nil {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return strata.Invalid(field, "must be a JSON object")
	}
	if len(b) > MaxMetadataBytes {
		return strata.Invalid(field, "must be at most %d bytes of JSON", MaxMetadataBytes)
	}
	return strata.CheckJSON(field, b)
}

// Validate checks a new memory's text and metadata beyond their shape (before the caller
// spends an embedding on it).
func (n NewMemory) Validate() error {
	if err := CheckText("text", n.Text); err != nil {
		return err
	}
	return CheckMetadata("metadata", n.Metadata)
}

// Validate checks a patch's new text and metadata, as NewMemory.Validate.
func (p Patch) Validate() error {
	if p.Text != nil {
		if err := CheckText("text", *p.Text); err != nil {
			return err
		}
	}
	return CheckMetadata("metadata", p.Metadata)
}

// ParseID parses a memory (or quarantine) id named field.
func ParseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, strata.Invalid(field, "must be a UUID")
	}
	return id, nil
}

// parseIDCursor reads a page cursor that is the previous page's last id ("": the start).
func parseIDCursor(c string) (uuid.UUID, error) {
	if c == "" {
		return uuid.Nil, nil
	}
	id, err := uuid.Parse(c)
	if err != nil {
		return uuid.Nil, badCursor()
	}
	return id, nil
}

func badCursor() error { return strata.Invalid("cursor", "must be a next_cursor this API returned") }

// SetFilters validates the trust and provenance filters of a search (similar jobs and
// context use the same ones) into q. pf nil: no provenance filter.
func SetFilters(q *Query, trust []string, pf *ProvenanceFilter) error {
	if err := checkTrust(trust); err != nil {
		return err
	}
	q.Trust = trust
	return setProvenance(q, pf)
}

func checkTrust(trust []string) error {
	for i, t := range trust {
		if !ValidTrust(t) {
			return strata.Invalid("trust["+strconv.Itoa(i)+"]", "must be one of %s", strings.Join(Trusts, ", "))
		}
	}
	return nil
}

func setProvenance(q *Query, pf *ProvenanceFilter) error {
	if pf == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		ids  []string
	}{{"key_ids", pf.KeyIDs}, {"agent_ids", pf.AgentIDs}, {"job_ids", pf.JobIDs},
		{"exclude_key_ids", pf.ExcludeKeyIDs}, {"exclude_agent_ids", pf.ExcludeAgentIDs}} {
		for i, id := range f.ids {
			if !strata.ValidID(id) {
				return strata.Invalid("provenance."+f.name+"["+strconv.Itoa(i)+"]", "must be 1-200 characters of A-Z a-z 0-9 . _ : -")
			}
		}
	}
	q.Provenance = *pf
	return nil
}

// SearchRequest is a memory search as a caller asks for it; Query validates it.
type SearchRequest struct {
	Scope strata.Scope
	// ScopeFilter: only memories with every level Scope names (Mem0's filters), not the
	// composed scopes (org-level and every combination of the named levels).
	ScopeFilter   bool
	Text          string
	Kinds         []string
	Metadata      map[string]any
	Trust         []string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	AsOf          *time.Time
	TopK          int // 0: DefaultTopK
	ExcludeStale  bool
	StaleAfter    string // a positive Go duration; "": the org's policy
	Provenance    *ProvenanceFilter
	// IncludeQuarantined asks for quarantined versions too, which only an admin (Admin)
	// may see (ErrIncludeQuarantined otherwise).
	IncludeQuarantined bool
	Admin              bool
}

// Query validates r into a store query in space (the caller adds the vector).
func (r SearchRequest) Query(space Space) (Query, error) {
	q := Query{Scope: r.Scope, ScopeFilter: r.ScopeFilter, Text: r.Text, Space: space, Kinds: r.Kinds, Metadata: r.Metadata,
		Trust: r.Trust, CreatedAfter: r.CreatedAfter, CreatedBefore: r.CreatedBefore, AsOf: r.AsOf,
		TopK: r.TopK, ExcludeStale: r.ExcludeStale}
	if err := CheckText("query", r.Text); err != nil {
		return q, err
	}
	if r.IncludeQuarantined {
		if !r.Admin {
			return q, ErrIncludeQuarantined
		}
		q.IncludeQuarantined = true
	}
	if err := setProvenance(&q, r.Provenance); err != nil {
		return q, err
	}
	if q.TopK == 0 {
		q.TopK = DefaultTopK
	}
	if q.TopK > MaxTopK {
		return q, strata.Invalid("top_k", "must be at most %d", MaxTopK)
	}
	for i, k := range r.Kinds {
		if !strata.ValidID(k) {
			return q, strata.Invalid("kinds["+strconv.Itoa(i)+"]", "must be 1-200 characters of A-Z a-z 0-9 . _ : -")
		}
	}
	if err := checkTrust(r.Trust); err != nil {
		return q, err
	}
	if err := CheckMetadata("metadata", r.Metadata); err != nil {
		return q, err
	}
	if r.StaleAfter != "" {
		d, err := time.ParseDuration(r.StaleAfter)
		if err != nil || d <= 0 {
			return q, strata.Invalid("stale_after", "must be a positive Go duration such as 720h")
		}
		q.StaleAfter = d
	}
	if r.CreatedAfter != nil && r.CreatedBefore != nil && !r.CreatedAfter.Before(*r.CreatedBefore) {
		return q, strata.Invalid("created_before", "must be after created_after")
	}
	return q, nil
}

// SimilarJobsRequest asks for the job memories most like a job at hand.
type SimilarJobsRequest struct {
	Scope      strata.Scope
	Text       string
	TopK       int // 0: DefaultSimilarJobs
	Trust      []string
	Provenance *ProvenanceFilter
}

// Query validates r into a search of job memories in space (the caller adds the vector).
func (r SimilarJobsRequest) Query(space Space) (Query, error) {
	q := Query{Scope: r.Scope, Text: r.Text, Space: space, Kinds: []string{KindJob}, TopK: r.TopK}
	if err := CheckText("query", r.Text); err != nil {
		return q, err
	}
	if q.TopK == 0 {
		q.TopK = DefaultSimilarJobs
	}
	return q, SetFilters(&q, r.Trust, r.Provenance)
}

// SimilarJob is a past job found by similar-jobs: its job memory, read through the
// metadata keys consolidation writes (job_id, outcome, parameters).
type SimilarJob struct {
	MemoryID   uuid.UUID `json:"memory_id"`
	JobID      string    `json:"job_id,omitempty" doc:"metadata.job_id of the job memory."`
	Outcome    any       `json:"outcome,omitempty" doc:"metadata.outcome: how the job ended."`
	Parameters any       `json:"parameters,omitempty" doc:"metadata.parameters: the settled parameters."`
	Summary    string    `json:"summary" doc:"The job memory's text."`
	Score      Breakdown `json:"score"`
	At         time.Time `json:"at"`
}

// SimilarJobs reads each job memory of res as a SimilarJob.
func SimilarJobs(res []Result) []SimilarJob {
	items := make([]SimilarJob, len(res))
	for i, r := range res {
		md := r.Memory.Metadata
		jobID, _ := md["job_id"].(string)
		items[i] = SimilarJob{MemoryID: r.Memory.ID, JobID: jobID, Outcome: md["outcome"],
			Parameters: md["parameters"], Summary: r.Memory.Text, Score: r.Score, At: r.Memory.ValidFrom}
	}
	return items
}

// Validate checks what a quarantine request must have beyond its shape: a start time and
// a reason without NUL (exactly one of key and agent is checked by CreateQuarantine).
func (n NewQuarantine) Validate() error {
	if n.Since.IsZero() {
		return strata.Invalid("since", "is required (RFC 3339)")
	}
	return strata.CheckText("reason", n.Reason)
}
