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
	return pg.Listener{
		Up:     func(up bool) { s.cache.reset(up); s.revoked.signal() },
		Notify: func(string, string) { s.cache.reset(true); s.revoked.signal() },
	}
}

// Forget clears this replica's cached lookups (the revoking replica calls it right after
// its revocation commits, so its own next request never sees the key).
func (s *Store) Forget() { s.cache.reset(s.cache.isEnabled()); s.revoked.signal() }

// Revoked returns a channel closed at the next revocation this replica hears of (or when
// its listener connects or disconnects). A long-lived request (an event stream) waits on it
// and then checks its own key with Active: a revoked key's stream ends within the
// notification's delivery, on every replica. Take the channel before the check it guards.
func (s *Store) Revoked() <-chan struct{} { return s.revoked.wait() }

// Listening reports whether revocations reach this replica by notification now; while
// they do not, a long-lived request checks its key by polling.
func (s *Store) Listening() bool { return s.cache.isEnabled() }

// Active reports whether the key with this id is still usable (not revoked, not deleted),
// asking Postgres (no cache). The root key is always active.
func (s *Store) Active(ctx context.Context, keyID string) (bool, error) {
	if keyID == "root" {
		return true, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL)`, keyID).Scan(&ok)
	return ok, pg.Interpret(err)
}

// broadcast is a channel closed at each signal and replaced by a fresh one.
type broadcast struct {
	mu sync.Mutex
	c  chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == nil {
		b.c = make(chan struct{})
	}
	return b.c
}

func (b *broadcast) signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		close(b.c)
		b.c = nil
	}
}

func (c *keyCache) isEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled
}
