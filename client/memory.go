package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Memory is one memory version.
type Memory struct {
	ID           string         `json:"id"`
	RootID       string         `json:"root_id"`
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
	ValidFrom    time.Time      `json:"valid_from"`
	ValidTo      *time.Time     `json:"valid_to,omitempty"`
	SupersededBy *string        `json:"superseded_by,omitempty"`
	AccessCount  int64          `json:"access_count"`
	LastVerified *time.Time     `json:"last_verified_at,omitempty"`
	UpdatedAt    time.Time      `json:"updated_at"`
	// Deduplicated: no row was created; this is the existing duplicate.
	Deduplicated bool            `json:"deduplicated"`
	Dedup        json.RawMessage `json:"dedup,omitempty"`
}

// Provenance says where a memory came from.
type Provenance struct {
	KeyID    string `json:"key_id,omitempty"`
	AgentID  string `json:"agent_id,omitempty"`
	JobID    string `json:"job_id,omitempty"`
	EventSeq *int64 `json:"event_seq,omitempty"`
}

// NewMemory is a memory to write.
type NewMemory struct {
	Text string `json:"text"`
	Kind string `json:"kind,omitempty"`
	Scope
	Metadata   map[string]any `json:"metadata,omitempty"`
	Importance *float64       `json:"importance,omitempty"`
	Pinned     bool           `json:"pinned,omitempty"`
	Trust      string         `json:"trust,omitempty"`
	Provenance *Provenance    `json:"provenance,omitempty"`
}

// Remember writes a memory (deduplicated against the same scope).
func (c *Client) Remember(ctx context.Context, m NewMemory) (Memory, error) {
	var out Memory
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/memories", Body: m}, &out)
	return out, err
}

// SearchQuery is a memory search.
type SearchQuery struct {
	Query string `json:"query"`
	Scope
	Kinds        []string       `json:"kinds,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	Trust        []string       `json:"trust,omitempty"`
	AsOf         *time.Time     `json:"as_of,omitempty"`
	TopK         int            `json:"top_k,omitempty"`
	ExcludeStale bool           `json:"exclude_stale,omitempty"`
	JobID        string         `json:"job_id,omitempty"`
}

// SearchResult is one ranked memory.
type SearchResult struct {
	Memory Memory         `json:"memory"`
	Score  map[string]any `json:"score"`
	Stale  bool           `json:"stale"`
}

// SearchAnswer is a search's answer.
type SearchAnswer struct {
	Items  []SearchResult `json:"items"`
	Search map[string]any `json:"search"`
}

// Recall searches memories (vector + full text, ranked).
func (c *Client) Recall(ctx context.Context, q SearchQuery) (SearchAnswer, error) {
	var out SearchAnswer
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/memories/search", Body: q}, &out)
	return out, err
}

// GetMemory reads a memory version.
func (c *Client) GetMemory(ctx context.Context, id string) (Memory, error) {
	var out Memory
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/memories/" + PathEscape(id)}, &out)
	return out, err
}

// MemoryPatch changes a memory (a new version).
type MemoryPatch struct {
	Text       *string        `json:"text,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Importance *float64       `json:"importance,omitempty"`
	Pinned     *bool          `json:"pinned,omitempty"`
	Trust      *string        `json:"trust,omitempty"`
}

// UpdateMemory writes a new version of the memory id (ifMatch optional).
func (c *Client) UpdateMemory(ctx context.Context, id string, p MemoryPatch, ifMatch *int64) (Memory, error) {
	var out Memory
	_, err := c.Do(ctx, Call{Method: http.MethodPatch, Path: "/v1/memories/" + PathEscape(id), Body: p, Header: ifMatchHeader(ifMatch)}, &out)
	return out, err
}

// Forget deletes a memory with all its versions; it answers the ids removed.
func (c *Client) Forget(ctx context.Context, id string) ([]string, error) {
	var out struct {
		Versions []string `json:"deleted_versions"`
	}
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: "/v1/memories/" + PathEscape(id)}, &out)
	return out.Versions, err
}

// MemoryHistory lists a memory's versions, oldest first.
func (c *Client) MemoryHistory(ctx context.Context, id string) ([]Memory, error) {
	var p Page[Memory]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/memories/" + PathEscape(id) + "/history"}, &p)
	return p.Items, err
}

// VerifyMemory re-confirms a memory.
func (c *Client) VerifyMemory(ctx context.Context, id string) (Memory, error) {
	var out Memory
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/memories/" + PathEscape(id) + "/verify"}, &out)
	return out, err
}

// SimilarJob is a past job like the one at hand.
type SimilarJob struct {
	MemoryID   string         `json:"memory_id"`
	JobID      string         `json:"job_id,omitempty"`
	Outcome    any            `json:"outcome,omitempty"`
	Parameters any            `json:"parameters,omitempty"`
	Summary    string         `json:"summary"`
	Score      map[string]any `json:"score"`
	At         time.Time      `json:"at"`
}

// SimilarJobs finds similar finished jobs (topK 0: 5).
func (c *Client) SimilarJobs(ctx context.Context, query string, sc Scope, topK int) ([]SimilarJob, error) {
	body := map[string]any{"query": query}
	for k, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID} {
		if v != "" {
			body[k] = v
		}
	}
	if topK > 0 {
		body["top_k"] = topK
	}
	var p Page[SimilarJob]
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/jobs/similar", Body: body}, &p)
	return p.Items, err
}

// KVEntry is a key-value entry.
type KVEntry struct {
	Namespace string          `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value,omitempty"`
	Version   int64           `json:"version"`
	Level     string          `json:"level"`
	UserID    string          `json:"user_id,omitempty"`
	AgentID   string          `json:"agent_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	Deleted   bool            `json:"deleted,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	UpdatedBy string          `json:"updated_by"`
}

// KVVersion is one version in a key's history.
type KVVersion struct {
	Version      int64           `json:"version"`
	Op           string          `json:"op"`
	Value        json.RawMessage `json:"value,omitempty"`
	UserID       string          `json:"user_id,omitempty"`
	AgentID      string          `json:"agent_id,omitempty"`
	SessionID    string          `json:"session_id,omitempty"`
	RestoredFrom int64           `json:"restored_from,omitempty"`
	WrittenBy    string          `json:"written_by"`
	WrittenAt    time.Time       `json:"written_at"`
}

func kvPath(ns, key string) string { return "/v1/kv/" + PathEscape(ns) + "/" + PathEscape(key) }

// KVSet writes value at the most specific level sc names (org when none). ttl 0: none.
func (c *Client) KVSet(ctx context.Context, ns, key string, value any, sc Scope, ttl time.Duration, ifMatch *int64) (KVEntry, error) {
	body := map[string]any{"value": value}
	for k, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID} {
		if v != "" {
			body[k] = v
		}
	}
	if ttl > 0 {
		body["ttl_seconds"] = int64(ttl / time.Second)
	}
	var e KVEntry
	_, err := c.Do(ctx, Call{Method: http.MethodPut, Path: kvPath(ns, key), Body: body, Header: ifMatchHeader(ifMatch)}, &e)
	return e, err
}

// KVGet reads a key resolved across scopes (session > agent > user > org); Level says which
// answered. exact reads only the most specific level given.
func (c *Client) KVGet(ctx context.Context, ns, key string, sc Scope, exact bool) (KVEntry, error) {
	q := sc.query(nil)
	if exact {
		q.Set("exact", "true")
	}
	var e KVEntry
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: kvPath(ns, key), Query: q}, &e)
	return e, err
}

// KVDelete deletes the key at exactly the level sc names.
func (c *Client) KVDelete(ctx context.Context, ns, key string, sc Scope, ifMatch *int64) (KVEntry, error) {
	var e KVEntry
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: kvPath(ns, key), Query: sc.query(nil), Header: ifMatchHeader(ifMatch)}, &e)
	return e, err
}

// KVList lists a namespace (resolve: per key, what a resolved read answers).
func (c *Client) KVList(ctx context.Context, ns string, sc Scope, resolve bool, cursor string, limit int) (Page[KVEntry], error) {
	q := sc.query(nil)
	if resolve {
		q.Set("resolve", "true")
	}
	setPage(q, cursor, limit)
	var p Page[KVEntry]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/kv/" + PathEscape(ns), Query: q}, &p)
	return p, err
}

// KVHistory lists a key's versions at one level, newest first.
func (c *Client) KVHistory(ctx context.Context, ns, key string, sc Scope, cursor string, limit int) (Page[KVVersion], error) {
	q := sc.query(nil)
	setPage(q, cursor, limit)
	var p Page[KVVersion]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: kvPath(ns, key) + "/history", Query: q}, &p)
	return p, err
}

// KVRestore writes an earlier version's value again.
func (c *Client) KVRestore(ctx context.Context, ns, key string, version int64, sc Scope) (KVEntry, error) {
	body := map[string]any{"version": version}
	for k, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID} {
		if v != "" {
			body[k] = v
		}
	}
	var e KVEntry
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: kvPath(ns, key) + "/restore", Body: body}, &e)
	return e, err
}

// SessionState is a session's working-state document.
type SessionState struct {
	SessionID  string          `json:"session_id"`
	UserID     string          `json:"user_id,omitempty"`
	AgentID    string          `json:"agent_id,omitempty"`
	State      json.RawMessage `json:"state"`
	Version    int64           `json:"version"`
	TTLSeconds int64           `json:"ttl_seconds"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Restored   bool            `json:"restored"`
}

// SessionWrite is the optional scope and TTL of a session write.
type SessionWrite struct {
	UserID  string
	AgentID string
	TTL     time.Duration
}

func (w SessionWrite) body(m map[string]any) map[string]any {
	if w.UserID != "" {
		m["user_id"] = w.UserID
	}
	if w.AgentID != "" {
		m["agent_id"] = w.AgentID
	}
	if w.TTL > 0 {
		m["ttl_seconds"] = int64(w.TTL / time.Second)
	}
	return m
}

func sessionPath(s string, rest string) string { return "/v1/sessions/" + PathEscape(s) + "/" + rest }

// PutState replaces a session's state document (a JSON object).
func (c *Client) PutState(ctx context.Context, session string, state any, w SessionWrite, ifMatch *int64) (SessionState, error) {
	var st SessionState
	_, err := c.Do(ctx, Call{Method: http.MethodPut, Path: sessionPath(session, "state"),
		Body: w.body(map[string]any{"state": state}), Header: ifMatchHeader(ifMatch)}, &st)
	return st, err
}

// PatchState merge-patches (RFC 7386) a session's state document.
func (c *Client) PatchState(ctx context.Context, session string, patch any, w SessionWrite, ifMatch *int64) (SessionState, error) {
	hdr := ifMatchHeader(ifMatch)
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Content-Type", "application/merge-patch+json")
	var st SessionState
	_, err := c.Do(ctx, Call{Method: http.MethodPatch, Path: sessionPath(session, "state"),
		Body: w.body(map[string]any{"state": patch}), Header: hdr}, &st)
	return st, err
}

// GetState reads a session's state document.
func (c *Client) GetState(ctx context.Context, session string) (SessionState, error) {
	var st SessionState
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: sessionPath(session, "state")}, &st)
	return st, err
}

// DeleteSession removes a session's state, buffer and durable copies.
func (c *Client) DeleteSession(ctx context.Context, session string, ifMatch *int64) error {
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: sessionPath(session, "state"), Header: ifMatchHeader(ifMatch)}, nil)
	return err
}

// Turn is one message of a session.
type Turn struct {
	Seq       int64           `json:"seq"`
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// AddMessage appends a turn (role user, assistant, system or tool).
func (c *Client) AddMessage(ctx context.Context, session, role, content string, w SessionWrite) (Turn, error) {
	var t Turn
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: sessionPath(session, "messages"),
		Body: w.body(map[string]any{"role": role, "content": content})}, &t)
	return t, err
}

// Messages reads the session's buffer (afterSeq < 0) or a page of its durable log.
func (c *Client) Messages(ctx context.Context, session string, afterSeq int64, limit int) (Page[Turn], error) {
	q := url.Values{}
	if afterSeq >= 0 {
		q.Set("after_seq", strconv.FormatInt(afterSeq, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p Page[Turn]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: sessionPath(session, "messages"), Query: q}, &p)
	return p, err
}
