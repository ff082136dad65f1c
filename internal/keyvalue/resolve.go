package keyvalue

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mem/strata/internal/strata"
)

// Reads use a pooled connection of the store's own, not the request's transaction: the org
// setting and the query travel in one pipeline (one round trip, no BEGIN/COMMIT), and a
// cache fill must read what is committed, never a request's uncommitted writes.

// Get resolves key for the scope: the entry at the most specific level that has it
// (session > agent > user > org), or only the most specific given level when exact.
// ErrNotFound when no level has a live entry.
func (s *Store) Get(ctx context.Context, ns, key string, sc strata.Scope, exact bool) (KVEntry, error) {
	if err := s.checkTarget(ns, key, sc); err != nil {
		return KVEntry{}, err
	}
	res, err := s.resolve(ctx, sc.OrgID, ns, []string{key}, readSlots(sc, exact))
	if err != nil {
		return KVEntry{}, err
	}
	if res[0] == nil {
		return KVEntry{}, strata.ErrNotFound
	}
	return *res[0], nil
}

// GetMany resolves each of keys like Get, in one cache round trip and at most one
// Postgres query; the answer is aligned with keys, nil where no level has the key.
func (s *Store) GetMany(ctx context.Context, ns string, keys []string, sc strata.Scope, exact bool) ([]*KVEntry, error) {
	for i, k := range keys {
		if err := strata.CheckID("keys["+strconv.Itoa(i)+"]", k, false); err != nil {
			return nil, err
		}
	}
	for _, k := range keys {
		if err := s.checkTarget(ns, k, sc); err != nil {
			return nil, err
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return s.resolve(ctx, sc.OrgID, ns, keys, readSlots(sc, exact))
}

// pick resolves one key from what is known about its slots (most specific first). known
// is false when a slot that matters is not cached.
func pick(states []*cached, now time.Time) (e *KVEntry, known bool) {
	for _, c := range states {
		if c == nil {
			return nil, false
		}
		if c.entry.live(now) {
			cp := *c.entry
			return &cp, true
		}
	}
	return nil, true
}

func (s *Store) resolve(ctx context.Context, org, ns string, keys []string, slots []slot) ([]*KVEntry, error) {
	now := s.opt.Now()
	states, err := s.cacheRead(ctx, org, ns, keys, slots)
	if err != nil {
		s.opt.Log.Debug("keyvalue: cache read failed; reading Postgres", "err", err)
		for i := range states {
			clear(states[i])
		}
	}
	out := make([]*KVEntry, len(keys))
	var missKeys []string
	var missIdx []int
	for i := range keys {
		e, known := pick(states[i], now)
		if known {
			out[i] = e
			continue
		}
		missKeys, missIdx = append(missKeys, keys[i]), append(missIdx, i)
	}
	if len(missKeys) == 0 {
		return out, nil
	}

	loadAndFill := func(lctx context.Context) (map[string]*cached, error) {
		m, err := s.load(lctx, org, ns, missKeys, slots)
		if err != nil {
			return nil, err
		}
		fills := make([]fill, 0, len(missKeys)*len(slots))
		for _, k := range missKeys {
			for _, sl := range slots {
				fills = append(fills, fill{key: k, sl: sl, c: m[loadKey(k, sl)]})
			}
		}
		s.cacheFill(lctx, org, ns, fills)
		return m, nil
	}
	var loaded map[string]*cached
	if len(missKeys) == 1 {
		// Concurrent misses of one resolution share one Postgres read. The read runs
		// detached from any one caller's cancellation, bounded by LoadTimeout.
		var fk strings.Builder
		fk.WriteString(org + "\x00" + ns + "\x00" + missKeys[0])
		for _, sl := range slots {
			fk.WriteString("\x00" + string(sl.Level) + "\x00" + sl.ScopeID)
		}
		loaded, err = s.flight.do(fk.String(), s.hooks.join, func() (map[string]*cached, error) {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opt.LoadTimeout)
			defer cancel()
			return loadAndFill(lctx)
		})
	} else {
		loaded, err = loadAndFill(ctx)
	}
	if err != nil {
		return nil, err
	}
	for n, i := range missIdx {
		st := make([]*cached, len(slots))
		for j, sl := range slots {
			st[j] = loaded[loadKey(missKeys[n], sl)]
		}
		out[i], _ = pick(st, now)
	}
	return out, nil
}
