package semantic

import (
	"encoding/json"
	"sync"
	"time"
)

// maxCounts bounds the remembered scope counts (the map starts over when full).
const maxCounts = 50_000

// scopeCounts remembers the bounded scope counts that choose between the exact sort and
// the HNSW scan, so that a search of a scope counted in the last Options.CountTTL skips the
// count's round trip and its scan — when the count was far from the threshold: at most half
// of ExactBelow, or past it. Only the choice of strategy rests on it. The exact sort is right
// at any size, so a small scope that grew within that time is sorted exactly once or twice
// more, never answered wrongly. A big scope that shrank within that time is scanned by HNSW a
// few more times, as it was a moment before, with the exact fallback when the scan comes
// back short. Counting a big scope is the expensive case: the bounded count reads
// ExactBelow+1 index entries (and, without a fresh visibility map, their heap rows), several
// milliseconds, every search. Per replica, in memory; keys carry the org and every filter
// argument.
type scopeCounts struct {
	mu sync.Mutex
	m  map[string]scopeCount
}

type scopeCount struct {
	n  int
	at time.Time
}

// scopeKey identifies a count: the filter's SQL and its arguments (which include the org).
func scopeKey(f *filter) string {
	args, err := json.Marshal(f.args)
	if err != nil {
		return ""
	}
	return f.sql() + "\x00" + string(args)
}

// remembered returns a count of key when it is younger than ttl and far from exactBelow:
// at most half of it, or past it.
func (c *scopeCounts) remembered(key string, exactBelow int, ttl time.Duration) (int, bool) {
	if key == "" || ttl <= 0 {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || time.Since(e.at) > ttl || (e.n > exactBelow/2 && e.n <= exactBelow) {
		return 0, false
	}
	return e.n, true
}

func (c *scopeCounts) put(key string, n int) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCounts {
		c.m = make(map[string]scopeCount)
	}
	c.m[key] = scopeCount{n: n, at: time.Now()}
}
