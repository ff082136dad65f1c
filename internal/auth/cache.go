package auth

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-mem/strata/internal/pg"
)

// RevocationChannel carries "a key was revoked" to every replica (pg_notify in the revoking
// transaction, so it is delivered exactly when the revocation commits).
const RevocationChannel = "strata_keys"

// keyCache remembers successful lookups so the hot path does not query Postgres for every
// request. It is only used while this replica is LISTENing for revocations: a revocation
// anywhere clears it, so a revoked key stops working on every replica at once (within the
// notification's delivery, milliseconds). A lookup that raced with a revocation is not
// cached (generation check). If the listener loses its connection the cache is cleared and
// switched off until it is back.
type keyCache struct {
	mu      sync.Mutex
	enabled bool
	gen     uint64
	ttl     time.Duration
	entries map[[sha256.Size]byte]cachedKey // by the secret's hash: an array key costs no allocation
}

type cachedKey struct {
	p     Principal
	until time.Time
}

func newKeyCache(ttl time.Duration) *keyCache {
	return &keyCache{ttl: ttl, entries: map[[sha256.Size]byte]cachedKey{}}
}

func (c *keyCache) get(h [sha256.Size]byte, now time.Time) (Principal, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled {
		return Principal{}, false, c.gen
	}
	e, ok := c.entries[h]
	if !ok || now.After(e.until) {
		return Principal{}, false, c.gen
	}
	return e.p, true, c.gen
}

func (c *keyCache) put(h [sha256.Size]byte, p Principal, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || gen != c.gen {
		return
	}
	if len(c.entries) > 100_000 {
		c.entries = map[[sha256.Size]byte]cachedKey{}
	}
	c.entries[h] = cachedKey{p: p, until: now.Add(c.ttl)}
}

func (c *keyCache) reset(enabled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.enabled = enabled
	c.entries = map[[sha256.Size]byte]cachedKey{}
}

// Listen keeps a connection LISTENing for revocations until ctx ends, enabling the lookup
// cache while it is connected. Run it in a goroutine; ready (may be nil) is closed once
// the first LISTEN succeeded. (The server shares one listening connection between its
// caches: RevocationChannel and Listener.)
func (s *Store) Listen(ctx context.Context, dsn string, log *slog.Logger, ready chan<- struct{}) {
	pg.Listen(ctx, dsn, []string{RevocationChannel}, log, "API key revocation", s.Listener(), ready)
}

// Listener is what the key cache needs from a connection LISTENing on RevocationChannel.
func (s *Store) Listener() pg.Listener {
	return pg.Listener{Up: s.cache.reset, Notify: func(string, string) { s.cache.reset(true) }}
}

// Forget clears this replica's cached lookups (the revoking replica calls it right after
// its revocation commits, so its own next request never sees the key).
func (s *Store) Forget() { s.cache.reset(s.cache.isEnabled()) }

func (c *keyCache) isEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled
}
