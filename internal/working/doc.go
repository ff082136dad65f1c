// Package working is Strata's fast tier: per-session working memory in Redis — a JSON state
// document with optimistic versions, and a bounded buffer of recent conversation turns —
// with a durable copy in Postgres that makes Redis a cache rather than the only copy.
//
// # What it owns
//
//   - Redis keys under <prefix>ws: (layout in keys.go), hash-tagged per session so one
//     session lives on one Redis Cluster slot, plus per-org and per-user index sets that let
//     erasure and export find a subject's sessions without KEYS or SCAN.
//   - The Postgres tables working_sessions (state, version, scope, expiry; tombstones) and
//     working_turns (every turn, by seq: the session's durable turn log).
//
// # Guarantees
//
// Versions: every state write bumps the version by one inside a Lua script that compares
// the expected version and sets the document atomically, so concurrent writers with
// If-Match never lose an update; a stale version writes nothing (strata.ConflictError).
// Versions and turn sequence numbers never go backwards: they survive a Redis flush (they
// are restored from Postgres), a delete or erasure (the Postgres row stays as a tombstone,
// one version above the deleted state), and expiry (a new incarnation of the session
// continues the numbering).
//
// Durability is write-through: a state write or a turn is written to Redis, then to
// Postgres in the request's transaction, and the request is acknowledged only after that
// transaction commits. Worst-case loss window for acknowledged writes: zero. After FLUSHALL
// or a Redis restart, the first access restores the session (document, version, scope, TTL,
// newest turns, counters) from Postgres, and reads say restored: true until the next write.
//
// Postgres is the arbiter; Redis is a cache that may be ahead of it only by writes that
// have not committed yet. A state write's Postgres half is one upsert (Persist) that
// decides by write lineage. Every state write carries a random token; the Redis
// compare-and-set appends (version, token) to the session's lineage (the newest 32
// versions, a contiguous chain ending at the current one) and the write sends that
// lineage with its upsert; the durable row keeps the lineage of the write it holds
// (working_sessions.write_lineage), and restore loads it back into Redis. A delete, an
// erasure and a purge move the head: the tombstone takes the next version with a fresh
// token, and its lineage is that one entry (Delete writes the same pair to the Redis
// tombstone; erasure and purge drop the Redis copy, and restore loads the tombstone's), so
// the next incarnation's first write descends from the tombstone. The upsert applies a write whose lineage contains the durable head (the row's
// version and its token) and is newer than it: normally the next version, but also one
// that reached Postgres ahead of its ancestors (B got v3 in Redis on top of A's v2, and
// B's upsert ran first). It acknowledges without changing anything a write the durable
// lineage already contains (A arriving after B: it is B's ancestor, so what it wrote is
// in what is durable). A row whose lineage does not name its own version (written by the
// previous release) has an unknown head, and the write must then be exactly the next
// version. Anything else means the Redis copy was not the durable one — a concurrent write
// landed in Redis but has not committed (Redis lost the session while it was in flight
// and another writer restored the older durable copy), or Redis came back from a failover
// or restore without writes Postgres holds — and the upsert fails (it sets the NOT NULL
// version to NULL, so the transaction, audit record included, aborts even when it is
// committed in the same round trip). The write is answered 409 (re-read and retry), is not
// stored, and its Redis copy is dropped so the next access restores the durable one. So
// two writers are never both acknowledged at one version, an acknowledged version is never
// overwritten by one that was not built on it, and ordinary contention without Redis loss
// is never answered 409 by Postgres (only a stale If-Match is, by Redis). A write that
// arrives more than 32 versions behind its descendants is no longer recognized and is
// refused like a stale one. A delete with If-Match is checked against the durable version
// as well.
//
// Deleted and erased data stays deleted under writes: when Redis comes back with a copy
// from before a delete or an erasure (a failover to a replica that missed it, a restored
// backup), or a write was in flight across it, a write built on that copy claims the
// tombstone's version (or one below it) without the tombstone's token, so the upsert
// refuses it (409, nothing stored, the session stays deleted, the Redis copy is dropped)
// and a stale ETag from before the delete never matches again. A turn appended to such a
// copy is not stored there either: the session row's upsert leaves a tombstone alone when
// the Redis copy was written and its lineage lacks the tombstone's head, and the append is
// then made again on a fresh incarnation restored from the tombstone (the same redo as for
// a seq Postgres already holds), so neither the deleted turns nor the subject come back.
// Reads are not covered: until the next write (or the copy's TTL), a rolled-back Redis
// copy is served as it is — Redis is a cache, and reads do not consult Postgres.
//
// Put and Patch send the upsert on the request's transaction; the HTTP layer sends it with
// the write's audit record and COMMIT in one round trip (PreparePut, PreparePatch) and
// passes a failure to Persist.Failed.
//
// The one window this does not close: Redis applies a write before Postgres commits it, so
// for that instant other callers can see a version that is not yet durable. If the
// Postgres half fails inside the request, the Redis half is compensated (the session is
// dropped from Redis when still at that version, and is restored from Postgres on next
// access). If the process dies between the two, the unacknowledged version stays in Redis
// until it is overwritten; if Redis is then also lost, reads return the last acknowledged
// version with restored: true. A write answered with 5xx therefore has an unknown outcome,
// as with any timeout.
//
// Turn buffer (spill before trim): a turn gets its seq from HINCRBY in Redis and is pushed
// onto the list; the same script returns the turns not yet confirmed durable and the
// overflow beyond the buffer size. Those are inserted into working_turns with ON CONFLICT
// DO NOTHING in the request's transaction; only after the commit does confirmScript record
// the durable seq and trim the overflow. A crash anywhere in between leaves the overflow
// in Redis (the buffer is briefly longer than N; reads return the newest N), and the next
// append re-spills it: at-least-once delivery made exactly-once by the (org, session, seq)
// primary key. A turn applied to Redis whose request died before commit is picked up by
// the next append (seq > dseq), so it is not lost either. The appended turn itself must be
// inserted, not skipped: the insert answers whether its seq was new, and when Postgres
// already holds that seq (Redis handed it out again after losing the session while another
// append was committing, or after coming back from a replica that missed appends) the
// Redis copy is dropped, restored on the request's transaction — which holds the session
// row's lock, so no other append commits meanwhile — and the turn is appended again under
// the next free seq. An acknowledged turn is therefore in the durable log exactly once,
// under the seq its answer gave.
//
// TTL: each session has a sliding TTL (default from config, settable per session with
// ttl_seconds); every read and write slides the Redis keys and reports expires_at. The
// durable copy's expires_at moves on writes, and on reads at most once per TTL/10, so it
// trails the Redis expiry by less than TTL/10; an expired session is not restored.
//
// Redis down: reads are served from the durable copy (restored: true); writes answer 503
// (strata.UnavailableError) because the version compare-and-set lives in Redis.
//
// Scope: a session belongs to the API key's org; user_id and agent_id are set by the first
// write and fixed afterwards (a write naming others is a conflict). Another org's session
// is simply not found.
package working
