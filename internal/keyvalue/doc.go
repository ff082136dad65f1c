// Package keyvalue is Strata's key-value (procedural) memory: structured facts an agent
// looks up by exact key — a user's brand colours, an agent's caption style, an org's export
// rules — scoped, versioned, with optional TTL and full history. Postgres is the store of
// record (migrations/0005_keyvalue.sql); Redis is a read-through cache.
//
// # Scope
//
// An entry lives at exactly one level: the most specific one its write names (session >
// agent > user > org; org when none is given). Its identity is (org, namespace, key, level,
// level id). The less specific ids a write also names are recorded on the entry (user_id
// for erasure and export, agent_id as provenance) but are not part of its identity: a
// session-level entry belongs to the session whatever user wrote it. A read for (user U,
// agent A, session S) consults session S, agent A, user U and the org, in that order, and
// answers the first live entry with its level; an exact read consults only the most
// specific given level. Expired (TTL) and deleted entries are invisible. A delete keeps
// the row as a tombstone so an identity's versions only ever grow.
//
// # Cache and its consistency guarantee
//
// Redis holds one cache entry per (org, namespace, key, level, level id) — see cache.go for
// the layout — carrying the version it caches ("absent" entries carry the tombstone version,
// or 0 when the key was never written there), so a resolution is one script call over up to
// four entries, and a write invalidates exactly one. Next to each entry is a "pending" set
// of the tokens of writes in flight. The protocol:
//
//   - Read: one script returns each level's entry, or nothing where it is not cached or a
//     write of it is pending. If the cached levels settle the answer it is served;
//     otherwise the levels are read from Postgres — concurrent misses of one resolution
//     share one query (a singleflight group) — and filled with a script that writes an
//     entry only if no write of it is pending and the cache does not hold that version or
//     a newer one.
//   - Write, in the request's transaction: lock the row, check If-Match, then (before
//     commit) add a token to the pending set and drop the cached entry; after commit
//     (pg.Session.AfterCommit, which runs before the response is sent) remove the token
//     and, when no other write is pending, store the committed version if it is newer than
//     what is cached.
//
// So once a write has been acknowledged, no reader on any replica can see an older value:
// a fill that read Postgres before the commit either runs while the token is pending
// (refused) or after the new version is cached (refused: not newer). If Redis fails after
// commit, the token stays and keeps the entry uncached — reads go to Postgres — until the
// pending set expires (PendingTTL, longer than any request transaction can stay open). If
// Redis fails before commit but works after it, the after-commit step still stores the new
// version over the old. Only when the writer cannot reach Redis at either point while a
// reader can is a stale read possible, for at most CacheTTL (60s by default); a Redis
// restart loses the cache and with it any staleness. A Redis that comes back older (a
// failover to a replica that missed writes) can serve an older entry until CacheTTL; a
// write whose If-Match names an older version than Postgres holds is refused (409: versions
// and preconditions are decided in Postgres, under the row lock, never in Redis) and drops
// the cached entry, so the client's re-read gets the durable one. Redis down: reads fall
// back to Postgres, writes succeed, /readyz reports "degraded".
//
// # Erasure
//
// Cache keys are derivable from Postgres rows (org, namespace, key, level, level id), so
// EraseUser finds everything of a user in Postgres (user_id, or the user level's id),
// deletes or anonymises it, and drops exactly those cache keys — no per-user Redis index.
//
// Writes take the caller's transaction (a pg.DBTX) and an AfterCommit to update the cache
// once it has committed; reads use a pooled connection of the store's own for one
// round trip (the org setting and the query are pipelined into one implicit transaction),
// so a cached read never touches Postgres and an uncached one costs one round trip.
package keyvalue
