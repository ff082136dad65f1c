// Package semantic is Strata's semantic memory on pgvector: memories (facts, preferences,
// job summaries, cases) with an embedding, provenance, a validity interval and a version
// lineage; scoped hybrid search (HNSW or exact cosine + full text, fused with reciprocal
// rank fusion, then recency, importance and access count); deduplication; supersession;
// re-verification; and the retrieval log.
//
// The store holds SQL only. It never calls an embedder: the service layer embeds the text
// and hands the store a vector together with the Space (embedder, model, dims) that made
// it. docs/semantic.md explains the ranking and the recall guarantees.
package semantic

import (
	"crypto/sha256"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/strata"
)

// Kinds every deployment knows. Any other kind matching strata.ValidID is accepted too.
const (
	KindFact       = "fact"
	KindPreference = "preference"
	KindJob        = "job"
	KindCase       = "case"
)

// Trust levels: how much a memory's content can be relied on, by where it came from.
var Trusts = []string{
	"verified",       // confirmed by a person or an authoritative system
	"user_stated",    // the end user said it
	"agent_inferred", // an agent concluded it (the default)
	"tool_output",    // a tool or API returned it
	"consolidated",   // written by consolidation from episodic logs / finished jobs
	"extracted",      // extracted by the org's LLM from conversation turns (internal/extraction)
}

// DefaultTrust is the trust of a memory written without one.
const DefaultTrust = "agent_inferred"

// ValidTrust reports whether t is one of Trusts.
func ValidTrust(t string) bool {
	for _, x := range Trusts {
		if x == t {
			return true
		}
	}
	return false
}

// Space identifies the embedding space a vector lives in. Vectors of different spaces are
// never compared.
type Space struct {
	Embedder string `json:"embedder"`
	Model    string `json:"model"`
	Dims     int    `json:"dims"`
}

// Provenance says who wrote a memory version and from what.
type Provenance struct {
	KeyID    string `json:"key_id,omitempty" doc:"The API key that wrote this version."`
	AgentID  string `json:"agent_id,omitempty" doc:"The agent that wrote it."`
	JobID    string `json:"job_id,omitempty" doc:"The job it came from."`
	EventSeq *int64 `json:"event_seq,omitempty" doc:"The episodic event it came from."`
}

// Memory is one version of a memory.
type Memory struct {
	ID           uuid.UUID      `json:"id"`
	RootID       uuid.UUID      `json:"root_id" doc:"The first version's id; shared by every version of this memory."`
	Version      int            `json:"version"`
	Kind         string         `json:"kind"`
	Text         string         `json:"text"`
	UserID       string         `json:"user_id,omitempty"`
	AgentID      string         `json:"agent_id,omitempty"`
	SessionID    string         `json:"session_id,omitempty"`
	Metadata     map[string]any `json:"metadata"`
	Importance   float64        `json:"importance"`
	Pinned       bool           `json:"pinned"`
	Trust        string         `json:"trust"`
	Provenance   Provenance     `json:"provenance"`
	Embedding    Space          `json:"embedding"`
	ValidFrom    time.Time      `json:"valid_from" doc:"When this version was written."`
	ValidTo      *time.Time     `json:"valid_to,omitempty" doc:"When a newer version superseded it."`
	SupersededBy *uuid.UUID     `json:"superseded_by,omitempty"`
	AccessCount  int64          `json:"access_count"`
	LastAccessed *time.Time     `json:"last_accessed_at,omitempty"`
	DedupCount   int            `json:"dedup_count" doc:"How many writes were deduplicated into this memory."`
	LastVerified *time.Time     `json:"last_verified_at,omitempty"`
	VerifiedBy   string         `json:"last_verified_by,omitempty"`
	UpdatedAt    time.Time      `json:"updated_at"`
}

// Scope is the memory's own scope.
func (m Memory) Scope(org string) strata.Scope {
	return strata.Scope{OrgID: org, UserID: m.UserID, AgentID: m.AgentID, SessionID: m.SessionID}
}

// VerifiedAt is when the memory's content was last confirmed: its last verification, or
// its writing.
func (m Memory) VerifiedAt() time.Time {
	if m.LastVerified != nil && m.LastVerified.After(m.ValidFrom) {
		return *m.LastVerified
	}
	return m.ValidFrom
}

// NormalizeText is the exact-duplicate form of a text: lower case, whitespace collapsed.
func NormalizeText(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}

// TextHash is sha256 of the normalised text.
func TextHash(s string) []byte {
	h := sha256.Sum256([]byte(NormalizeText(s)))
	return h[:]
}

// Options tune the store. Zero values take the defaults in brackets.
type Options struct {
	// DedupThreshold: a write whose vector has cosine similarity ≥ this with a current
	// memory of the same scope is a near-duplicate [0.92]. 1 turns near-dedup off (only
	// identical vectors).
	DedupThreshold float64
	// ExactBelow: a search whose visible scope holds at most this many current memories is
	// answered by an exact distance sort over the scope (b-tree on the scope) instead of
	// HNSW [5000].
	ExactBelow int
	// BatchHeld bounds the vector components (dimensions × memories) a batch reads whole
	// from the small scopes it writes to, to find its items' near duplicates in memory
	// instead of by a query per chunk (batch.go); the scopes past it are queried
	// [1<<22: 16 MiB of float32, 10,922 memories of 384 dimensions]; negative: none.
	BatchHeld int
	// ScopeIndexAbove: a user scope searched with more current memories than this is a
	// candidate for an HNSW index of its own (scopeindex.go), and once it has one its
	// searches use it instead of counting and sorting exactly [1000].
	ScopeIndexAbove int
	// ScopeEfSearch is hnsw.ef_search for a scope answered by its own index (raised to the
	// candidate count): its graph holds the scope alone, so a smaller ef reaches the recall
	// the org-wide graph needs 100 for (0.994 at 40 in BenchmarkSemantic100k) [40].
	ScopeEfSearch int
	// CountTTL: a scope counted at most ExactBelow/2, or past ExactBelow, is not counted
	// again for this long (see counts.go) [5s]; negative: always count.
	CountTTL time.Duration
	// EfSearch is hnsw.ef_search for HNSW scans (raised to the candidate count) [100].
	EfSearch int
	// MaxScanTuples bounds an iterative HNSW scan (hnsw.max_scan_tuples) [20000].
	MaxScanTuples int
	// RRFK is the k of reciprocal rank fusion [60].
	RRFK float64
	// HalfLife is the recency half-life [30 days].
	HalfLife time.Duration
	// StaleAfter is the default verification age past which a fact is stale [90 days].
	StaleAfter time.Duration
	// Weights of the ranking features (see docs/semantic.md) [0.25, 0.25, 0.1].
	WRecency, WImportance, WAccess float64
}

func (o Options) withDefaults() Options {
	if o.DedupThreshold <= 0 {
		o.DedupThreshold = 0.92
	}
	if o.ExactBelow <= 0 {
		o.ExactBelow = 5000
	}
	if o.BatchHeld == 0 {
		o.BatchHeld = 1 << 22
	}
	if o.ScopeEfSearch <= 0 {
		o.ScopeEfSearch = 40
	}
	if o.ScopeIndexAbove <= 0 {
		o.ScopeIndexAbove = min(1000, o.ExactBelow)
	}
	if o.CountTTL == 0 {
		o.CountTTL = 5 * time.Second
	}
	if o.EfSearch <= 0 {
		o.EfSearch = 100
	}
	if o.MaxScanTuples <= 0 {
		o.MaxScanTuples = 20000
	}
	if o.RRFK <= 0 {
		o.RRFK = 60
	}
	if o.HalfLife <= 0 {
		o.HalfLife = 30 * 24 * time.Hour
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 90 * 24 * time.Hour
	}
	if o.WRecency == 0 && o.WImportance == 0 && o.WAccess == 0 {
		o.WRecency, o.WImportance, o.WAccess = 0.25, 0.25, 0.1
	}
	return o
}

// Store reads and writes memories. It is safe for concurrent use.
type Store struct {
	o      Options
	now    func() time.Time
	counts scopeCounts
	hot    hotScopes
	// restSlack is topSlack (fused.go); tests change it to exercise the reads it saves.
	restSlack float64
}

// NewStore returns a store; now may be nil (time.Now).
func NewStore(o Options, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{o: o.withDefaults(), now: now, restSlack: topSlack}
}

// Options returns the effective options.
func (s *Store) Options() Options { return s.o }
