package keyvalue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis layout (every key starts with Options.Prefix; {…} is the cluster hash tag, so the
// keys of all levels of one (org, namespace, key) share a slot and one script reads them):
//
//	<prefix>kv{<org>|<ns>|<key>}|<level>|<scope id>    entry: "<version>|<entry JSON>", or
//	                                                    "<version>|" when the key is absent
//	                                                    at that level (version 0: never written)
//	<prefix>kvp{<org>|<ns>|<key>}|<level>|<scope id>   set of tokens of writes in flight
//
// At user level the scope id is Options.NameHash of the user id, never the id itself: a
// Redis key name is not a place for a data subject's id (issue 28). Ids never contain
// '|', '{' or '}' (they are [A-Za-z0-9._:-]) and hashes are hex, so the layout is
// unambiguous, and a user-level entry's cache key is derivable from (org, ns, key, user)
// by whoever holds the key.

func (s *Store) scopeName(org string, sl slot) string {
	if sl.Level != LevelUser || sl.ScopeID == "" {
		return sl.ScopeID
	}
	if s.opt.NameHash != nil {
		return s.opt.NameHash(org, sl.ScopeID)
	}
	h := sha256.Sum256([]byte(org + "\x00" + sl.ScopeID))
	return hex.EncodeToString(h[:16])
}

func (s *Store) entryKey(org, ns, key string, sl slot) string {
	return s.opt.Prefix + "kv{" + org + "|" + ns + "|" + key + "}|" + string(sl.Level) + "|" + s.scopeName(org, sl)
}

func (s *Store) pendingKey(org, ns, key string, sl slot) string {
	return s.opt.Prefix + "kvp{" + org + "|" + ns + "|" + key + "}|" + string(sl.Level) + "|" + s.scopeName(org, sl)
}

// cached is what the cache knows about one key at one level: its version and the entry,
// nil when the key is absent (never written, or deleted) there.
type cached struct {
	version int64
	entry   *KVEntry
}

func encodeCached(c *cached) (string, error) {
	v := strconv.FormatInt(c.version, 10) + "|"
	if c.entry == nil {
		return v, nil
	}
	b, err := json.Marshal(c.entry)
	if err != nil {
		return "", err
	}
	return v + string(b), nil
}

func decodeCached(s string) (*cached, error) {
	i := bytes.IndexByte([]byte(s), '|')
	if i < 0 {
		return nil, fmt.Errorf("keyvalue: malformed cache entry")
	}
	v, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("keyvalue: malformed cache version: %w", err)
	}
	c := &cached{version: v}
	if rest := s[i+1:]; rest != "" {
		c.entry = &KVEntry{}
		if err := json.Unmarshal([]byte(rest), c.entry); err != nil {
			return nil, fmt.Errorf("keyvalue: malformed cache entry: %w", err)
		}
	}
	return c, nil
}

// readScript returns, for each (entry, pending) key pair, the cached entry or nil when it
// is not cached or a write of it is in flight (the pending set exists).
var readScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i+1]) == 1 then
    out[#out+1] = false
  else
    out[#out+1] = redis.call('GET', KEYS[i])
  end
end
return out`)

// fillScript stores what a reader loaded from Postgres, for each (entry, pending) key pair
// with ARGV (version, payload) pairs after ARGV[1] = TTL in ms, but only where no write is
// in flight and the cache does not already hold that version or a newer one. A fill that
// raced with a write therefore can never put an older version over a newer one.
var fillScript = redis.NewScript(`
local n = 0
for i = 1, #KEYS, 2 do
  local j = i + 1
  if redis.call('EXISTS', KEYS[i+1]) == 0 then
    local v = tonumber(ARGV[j])
    local cur = redis.call('GET', KEYS[i])
    local cv = cur and tonumber(string.match(cur, '^(%d+)|'))
    if not cv or cv < v then
      redis.call('SET', KEYS[i], ARGV[j+1], 'PX', ARGV[1])
      n = n + 1
    end
  end
end
return n`)

// beginScript runs in the write path before commit: it registers the write's token in the
// pending set (which blocks cached reads and fills of the entry) and drops the cached entry.
var beginScript = redis.NewScript(`
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1`)

// endScript runs after commit: it removes the write's token and, when no other write of
// the entry is in flight, stores the committed version unless a newer one is already
// there. With other writes in flight it only drops the cached entry: the last of them
// writes it. ARGV: token, version, payload, TTL ms, keep ("1", for erasure: the entry
// becomes a tombstone of the highest version for TTL ms, which no fill that raced with the
// erasure can overwrite, and the pending set, named after the subject, is deleted).
var endScript = redis.NewScript(`
if ARGV[5] == '1' then
  redis.call('SET', KEYS[1], '9223372036854775807|', 'PX', ARGV[4])
  redis.call('DEL', KEYS[2])
  return 0
end
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('DEL', KEYS[1])
  return 0
end
local v = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
local cv = cur and tonumber(string.match(cur, '^(%d+)|'))
if cv and cv >= v then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1`)

func (s *Store) cacheCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opt.CacheTimeout)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// cacheRead reads the given slots of each key in one round trip (a pipeline of one script
// per key). The result has one slice per key, aligned with slots; nil means "unknown".
func (s *Store) cacheRead(ctx context.Context, org, ns string, keys []string, slots []slot) ([][]*cached, error) {
	out := make([][]*cached, len(keys))
	for i := range out {
		out[i] = make([]*cached, len(slots))
	}
	if s.opt.DisableCache {
		return out, nil
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	calls := make([]scriptCall, len(keys))
	for i, k := range keys {
		rk := make([]string, 0, 2*len(slots))
		for _, sl := range slots {
			rk = append(rk, s.entryKey(org, ns, k, sl), s.pendingKey(org, ns, k, sl))
		}
		calls[i] = scriptCall{keys: rk}
	}
	cmds, err := s.evalMany(cctx, readScript, calls)
	if err != nil {
		return out, err
	}
	for i, c := range cmds {
		vals, err := c.Slice()
		if err != nil {
			return out, err
		}
		for j, v := range vals {
			if j >= len(slots) {
				break
			}
			str, ok := v.(string)
			if !ok {
				continue
			}
			cv, err := decodeCached(str)
			if err != nil {
				s.opt.Log.Warn("keyvalue: ignoring a malformed cache entry", "err", err)
				continue
			}
			out[i][j] = cv
		}
	}
	return out, nil
}

// fill is one slot loaded from Postgres, to be cached.
type fill struct {
	key string
	sl  slot
	c   *cached
}

// cacheFill stores what was loaded, version-checked (fillScript). Failures are logged
// and otherwise ignored: the cache is an optimisation.
func (s *Store) cacheFill(ctx context.Context, org, ns string, fills []fill) {
	if s.opt.DisableCache || len(fills) == 0 {
		return
	}
	if s.hooks.beforeFill != nil {
		s.hooks.beforeFill()
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	// One script per key (one hash tag) so the pipeline stays cluster-safe.
	byKey := map[string][]fill{}
	var order []string
	for _, f := range fills {
		if _, ok := byKey[f.key]; !ok {
			order = append(order, f.key)
		}
		byKey[f.key] = append(byKey[f.key], f)
	}
	calls := make([]scriptCall, 0, len(order))
	for _, k := range order {
		fs := byKey[k]
		keys := make([]string, 0, 2*len(fs))
		args := make([]any, 0, 1+2*len(fs))
		args = append(args, ms(s.opt.CacheTTL))
		for _, f := range fs {
			p, err := encodeCached(f.c)
			if err != nil {
				return
			}
			keys = append(keys, s.entryKey(org, ns, k, f.sl), s.pendingKey(org, ns, k, f.sl))
			args = append(args, f.c.version, p)
		}
		calls = append(calls, scriptCall{keys: keys, args: args})
	}
	if _, err := s.evalMany(cctx, fillScript, calls); err != nil {
		s.opt.Log.Debug("keyvalue: cache fill failed", "err", err)
	}
}

// cacheBegin marks a write of (ns, key, sl) as in flight, before its transaction commits.
// A failure is logged and ignored: the write goes on (see the package doc for what that
// costs).
func (s *Store) cacheBegin(ctx context.Context, org, ns, key string, sl slot, token string) {
	if s.rdb == nil {
		return
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	err := beginScript.Run(cctx, s.rdb, []string{s.entryKey(org, ns, key, sl), s.pendingKey(org, ns, key, sl)},
		token, ms(s.opt.PendingTTL)).Err()
	if err != nil {
		s.opt.Log.Warn("keyvalue: could not mark a write in the cache; cached reads of it stay possible until the write's commit updates the cache",
			"err", err, "namespace", ns)
	}
}

// cacheEnd stores the committed state of (ns, key, sl), after commit. keep (erasure)
// deletes the pending marker and leaves a tombstone for PendingTTL instead: nothing a
// reader loaded before the erasure may be cached for that long.
func (s *Store) cacheEnd(ctx context.Context, org, ns, key string, sl slot, token string, c *cached, keep bool) {
	if s.rdb == nil || s.hooks.skipEnd {
		return
	}
	p, err := encodeCached(c)
	if err != nil {
		return
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	k, ttl := "0", s.opt.CacheTTL
	if keep {
		k, ttl = "1", s.opt.PendingTTL
	}
	err = endScript.Run(cctx, s.rdb, []string{s.entryKey(org, ns, key, sl), s.pendingKey(org, ns, key, sl)},
		token, c.version, p, ms(ttl), k).Err()
	if err != nil {
		s.opt.Log.Warn("keyvalue: could not update the cache after a commit; the pending marker keeps reads on Postgres until it expires",
			"err", err, "namespace", ns)
	}
}

type scriptCall struct {
	keys []string
	args []any
}

// evalMany runs script once per call in one round trip. A single call goes through
// Script.Run (EVALSHA, then EVAL on NOSCRIPT); several go through a pipeline of EVALSHA,
// loading the script and retrying once when Redis does not know it yet. Each call touches
// one hash tag, so the pipeline is cluster-safe.
func (s *Store) evalMany(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		c := script.Run(ctx, s.rdb, calls[0].keys, calls[0].args...)
		return []*redis.Cmd{c}, c.Err()
	}
	for attempt := 0; ; attempt++ {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			cmds[i] = script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if lerr := script.Load(ctx, s.rdb).Err(); lerr != nil {
				return cmds, lerr
			}
			continue
		}
		return cmds, err
	}
}

// cacheAbort withdraws a write's pending token when its transaction will not commit.
func (s *Store) cacheAbort(ctx context.Context, org, ns, key string, sl slot, token string) {
	if s.rdb == nil {
		return
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	_ = s.rdb.SRem(cctx, s.pendingKey(org, ns, key, sl), token).Err()
}

// cacheForget drops the cached entry of (ns, key, sl), so that the next read loads it from
// Postgres. A write refused because its If-Match named an older version calls it: the
// caller may have read that version from a cache that is behind Postgres (a failover to a
// replica that missed writes), which would otherwise keep serving it for up to CacheTTL.
// Dropping an entry is always safe (a pending write's token is untouched).
func (s *Store) cacheForget(ctx context.Context, org, ns, key string, sl slot) {
	if s.rdb == nil {
		return
	}
	cctx, cancel := s.cacheCtx(ctx)
	defer cancel()
	_ = s.rdb.Del(cctx, s.entryKey(org, ns, key, sl)).Err()
}
