package keyvalue

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/strata"
)

// Level is the scope level an entry lives at.
type Level string

// The four levels, from least to most specific. Resolution prefers session > agent > user >
// org.
const (
	LevelOrg     Level = "org"
	LevelUser    Level = "user"
	LevelAgent   Level = "agent"
	LevelSession Level = "session"
)

// KVEntry is one key at one scope level, as stored. Value is absent on a deleted entry
// (returned by Delete).
type KVEntry struct {
	Namespace string          `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value,omitempty" doc:"The stored JSON value."`
	Version   int64           `json:"version" doc:"Grows by one on every write of this key at this scope (also returned as ETag)."`
	Level     Level           `json:"level" enum:"org,user,agent,session" doc:"The scope level the entry lives at (on a resolved read: the level that answered)."`
	UserID    string          `json:"user_id,omitempty" doc:"The data subject the entry was written for (its level id at user level)."`
	AgentID   string          `json:"agent_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	Deleted   bool            `json:"deleted,omitempty" doc:"True only in the answer to a DELETE."`
	ExpiresAt *time.Time      `json:"expires_at,omitempty" doc:"When the entry stops being visible (from ttl_seconds)."`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	UpdatedBy string          `json:"updated_by" doc:"Id of the API key that wrote this version."`
}

// live reports whether the entry is visible at now.
func (e *KVEntry) live(now time.Time) bool {
	return e != nil && !e.Deleted && (e.ExpiresAt == nil || e.ExpiresAt.After(now))
}

// KVVersion is one entry of a key's history.
type KVVersion struct {
	Version      int64           `json:"version"`
	Op           string          `json:"op" enum:"put,restore,delete,rectify" doc:"put, restore (a new write copying restored_from's value), delete, or rectify (a correction on the data subject's behalf, GDPR Art. 16)."`
	Value        json.RawMessage `json:"value,omitempty" doc:"The value written (absent for delete)."`
	UserID       string          `json:"user_id,omitempty"`
	AgentID      string          `json:"agent_id,omitempty" doc:"The agent scope the write named, if any."`
	SessionID    string          `json:"session_id,omitempty"`
	ExpiresAt    *time.Time      `json:"expires_at,omitempty"`
	RestoredFrom int64           `json:"restored_from,omitempty"`
	WrittenBy    string          `json:"written_by" doc:"Id of the API key that made the write."`
	WrittenAt    time.Time       `json:"written_at"`
}

// slot is one (level, level id) a read looks at or a write goes to.
type slot struct {
	Level   Level
	ScopeID string // '' at org level
}

// writeSlot is the one level a write with scope sc goes to: its most specific given level.
func writeSlot(sc strata.Scope) slot {
	switch {
	case sc.SessionID != "":
		return slot{LevelSession, sc.SessionID}
	case sc.AgentID != "":
		return slot{LevelAgent, sc.AgentID}
	case sc.UserID != "":
		return slot{LevelUser, sc.UserID}
	}
	return slot{LevelOrg, ""}
}

// readSlots are the levels a read with scope sc consults, most specific first; only the
// most specific one when exact.
func readSlots(sc strata.Scope, exact bool) []slot {
	if exact {
		return []slot{writeSlot(sc)}
	}
	out := make([]slot, 0, 4)
	if sc.SessionID != "" {
		out = append(out, slot{LevelSession, sc.SessionID})
	}
	if sc.AgentID != "" {
		out = append(out, slot{LevelAgent, sc.AgentID})
	}
	if sc.UserID != "" {
		out = append(out, slot{LevelUser, sc.UserID})
	}
	return append(out, slot{LevelOrg, ""})
}

// Options configure a Store. Zero values take the defaults noted.
type Options struct {
	// Prefix starts every Redis key (config RedisPrefix).
	Prefix string
	// MaxValueBytes bounds a value's JSON encoding (default 65536).
	MaxValueBytes int
	// MaxJSONDepth bounds a value's nesting (default 64).
	MaxJSONDepth int
	// CacheTTL is how long a cached entry lives in Redis (default 60s). It bounds staleness
	// only in the one case the write path cannot cover: Redis unreachable from the writer
	// both before and after its commit, while reachable from a reader.
	CacheTTL time.Duration
	// PendingTTL is how long a write's "pending" marker blocks cached reads and cache fills
	// of its entry if the writer never clears it (default 35s). It must exceed the longest
	// a request transaction can stay open (the request timeout).
	PendingTTL time.Duration
	// CacheTimeout is the deadline put on each Redis call (default 500ms). go-redis honours
	// it only when the client has ContextTimeoutEnabled; otherwise the client's own
	// read/write timeouts (STRATA_STORE_TIMEOUT) bound how long a hung Redis delays a
	// request before it falls back to Postgres. A refused connection fails at once.
	CacheTimeout time.Duration
	// LoadTimeout bounds a Postgres read done on behalf of several callers (default 5s).
	LoadTimeout time.Duration
	// DisableCache makes every read go to Postgres (benchmarks of the uncached path).
	DisableCache bool
	// Now is the clock (default time.Now); TTLs and timestamps use it.
	Now func() time.Time
	// Log receives cache failures (default slog.Default()).
	Log *slog.Logger
	// NameHash names a user in Redis key names (a keyed hash; app passes the pseudonym
	// key's), so no key name carries a raw user id. Default: unkeyed SHA-256 (tests).
	NameHash func(org, id string) string
}

func (o *Options) defaults() {
	if o.MaxValueBytes <= 0 {
		o.MaxValueBytes = 65536
	}
	if o.MaxJSONDepth <= 0 {
		o.MaxJSONDepth = 64
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 60 * time.Second
	}
	if o.PendingTTL <= 0 {
		o.PendingTTL = 35 * time.Second
	}
	if o.CacheTimeout <= 0 {
		o.CacheTimeout = 500 * time.Millisecond
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// hooks let tests interleave goroutines at the points that matter; all nil in production.
type hooks struct {
	load       func()                  // a Postgres read of entries is about to run
	beforeFill func()                  // entries were read from Postgres; the cache fill is next
	join       func(key string, n int) // a caller joined a flight (n = callers so far)
	skipEnd    bool                    // simulate Redis failing after commit
}

// Store is the key-value tier: Postgres is the store of record, Redis a read-through cache.
type Store struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	opt    Options
	flight flightGroup
	hooks  hooks
}

// New returns a store. rdb may be nil (no cache).
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, opt Options) *Store {
	opt.defaults()
	if rdb == nil {
		opt.DisableCache = true
	}
	return &Store{pool: pool, rdb: rdb, opt: opt}
}

// MaxValueBytes is the configured value size limit.
func (s *Store) MaxValueBytes() int { return s.opt.MaxValueBytes }
