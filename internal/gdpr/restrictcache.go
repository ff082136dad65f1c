package gdpr

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-mem/strata/internal/pg"
)

// RestrictionChannel is notified with the org by every committed change to
// gdpr_restrictions (a trigger: migrations/0014_restriction_notify.sql).
const RestrictionChannel = "strata_gdpr_restrictions"

// An org's restricted subjects are kept for at most restrictionTTL, and only for orgs with
// at most maxCachedRestrictions of them.
const (
	restrictionTTL        = time.Minute
	maxCachedRestrictions = 10_000
	maxCachedOrgs         = 100_000
)

// RestrictionCache keeps, per org, the set of restricted data subjects, so that the check
// every agent read makes ("is this subject restricted?") costs no round trip to Postgres.
// It is only used while the replica LISTENs on RestrictionChannel (Listen): a change
// anywhere drops that org's set on every replica when it commits (within the
// notification's delivery, milliseconds), and the replica that made it drops it at once
// (Forget, before its response). A set loaded while a notification arrived is not kept
// (generation check). If the listener loses its connection the cache is cleared and off
// until it is back; every check then asks Postgres, as it does without a cache.
type RestrictionCache struct {
	mu      sync.Mutex
	enabled bool
	gen     uint64
	orgs    map[string]restrictedSet
}

type restrictedSet struct {
	users map[string]bool
	until time.Time
}

// NewRestrictionCache returns a cache that is off until Listen connects.
func NewRestrictionCache() *RestrictionCache {
	return &RestrictionCache{orgs: map[string]restrictedSet{}}
}

// Listen keeps a connection LISTENing on RestrictionChannel until ctx ends, enabling the
// cache while it is connected. ready (may be nil) is closed once the first LISTEN
// succeeded. (The server shares one listening connection between its caches:
// RestrictionChannel and Listener.)
func (c *RestrictionCache) Listen(ctx context.Context, dsn string, log *slog.Logger, ready chan<- struct{}) {
	pg.Listen(ctx, dsn, []string{RestrictionChannel}, log, "GDPR restriction", c.Listener(), ready)
}

// Listener is what the cache needs from a connection LISTENing on RestrictionChannel.
func (c *RestrictionCache) Listener() pg.Listener {
	return pg.Listener{Up: c.reset, Notify: func(_, org string) { c.Forget(org) }}
}

func (c *RestrictionCache) reset(enabled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.enabled = enabled
	c.orgs = map[string]restrictedSet{}
}

// Forget drops org's set (its restrictions changed).
func (c *RestrictionCache) Forget(org string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.orgs, org)
}

// lookup returns org's cached set when there is a fresh one, the generation a load must
// still find to keep its set, and whether the cache is on (a nil cache is off).
func (c *RestrictionCache) lookup(org string, now time.Time) (users map[string]bool, ok bool, gen uint64, on bool) {
	if c == nil {
		return nil, false, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled {
		return nil, false, c.gen, false
	}
	s, ok := c.orgs[org]
	if !ok || now.After(s.until) {
		return nil, false, c.gen, true
	}
	return s.users, true, c.gen, true
}

func (c *RestrictionCache) put(org string, users map[string]bool, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || gen != c.gen {
		return
	}
	if len(c.orgs) >= maxCachedOrgs {
		c.orgs = map[string]restrictedSet{}
	}
	c.orgs[org] = restrictedSet{users: users, until: now.Add(restrictionTTL)}
}

// Load runs one query that selects user ids (for gdpr_restrictions, under the org's
// row-level security) and returns them.
type Load func(sql string, args ...any) ([]string, error)

// Among answers which of users are restricted in org: from memory when the org's set is
// cached; else through load, which reads the org's whole set when the cache is on (and
// keeps it when it is small enough), or only users when it is off. A nil cache always
// asks Postgres.
func (c *RestrictionCache) Among(org string, users []string, load Load) (map[string]bool, error) {
	set, cached, err := c.orgSet(org, load)
	if err != nil {
		return nil, err
	}
	if !cached {
		ids, err := load(`SELECT user_id FROM gdpr_restrictions WHERE org_id = $1 AND user_id = ANY($2)`, org, users)
		return toSet(ids), err
	}
	out := map[string]bool{}
	for _, u := range users {
		if set[u] {
			out[u] = true
		}
	}
	return out, nil
}

// NoneIn reports whether org has no restricted subject at all, from the cache (loading the
// org's set through load when it is not cached). It answers false, and the caller asks
// Postgres, while the cache is off or when the org has more subjects than are cached.
func (c *RestrictionCache) NoneIn(org string, load Load) (bool, error) {
	set, cached, err := c.orgSet(org, load)
	return cached && len(set) == 0, err
}

// orgSet is org's set of restricted subjects from the cache, loaded through load (and kept)
// when it is not there. cached is false, and nothing is loaded, while the cache is off;
// false too when the org has more subjects than are cached.
func (c *RestrictionCache) orgSet(org string, load Load) (set map[string]bool, cached bool, err error) {
	now := time.Now()
	set, ok, gen, on := c.lookup(org, now)
	if ok {
		return set, true, nil
	}
	if !on {
		return nil, false, nil
	}
	ids, err := load(`SELECT user_id FROM gdpr_restrictions WHERE org_id = $1 LIMIT $2`, org, maxCachedRestrictions+1)
	if err != nil || len(ids) > maxCachedRestrictions {
		return nil, false, err
	}
	set = toSet(ids)
	c.put(org, set, gen, now)
	return set, true, nil
}

func toSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
