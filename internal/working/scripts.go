package working

import "github.com/redis/go-redis/v9"

// Meta hash fields:
//
//	v     state version (0 before the first state write)
//	doc   the state document (absent until written)
//	uid   user_id, aid agent_id (set by the first write of an incarnation)
//	ttl   sliding TTL in ms
//	seq   last turn sequence number assigned; dseq: every turn <= dseq is in Postgres
//	ca    created, ua updated (unix ms); dx: expires_at of the durable copy (unix ms)
//	new   "1" while this incarnation has not been written (scope may still be set)
//	rs    "1" while the document is what was restored from Postgres (no write since)
//	lin   the write lineage: "version:token" entries of the newest state writes (casScript)

// scopeCheck is shared by the write scripts: on a written session, user_id and agent_id
// are fixed; on a new one the request's values are adopted.
const scopeCheck = `
local isnew = f.new == '1'
local uid, aid = f.uid or '', f.aid or ''
if isnew then
  uid, aid = ARGV[2], ARGV[3]
else
  if ARGV[2] ~= '' and ARGV[2] ~= uid then return {'SCOPE', 'user_id'} end
  if ARGV[3] ~= '' and ARGV[3] ~= aid then return {'SCOPE', 'agent_id'} end
end
local ttl = tonumber(ARGV[4])
if ttl <= 0 then ttl = tonumber(f.ttl) end
local now = tonumber(ARGV[5])
`

const readMeta = `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'MISSING'} end
local raw = redis.call('HMGET', KEYS[1], 'v', 'uid', 'aid', 'new', 'ttl', 'ca', 'doc', 'dseq')
local f = {v = raw[1], uid = raw[2], aid = raw[3], new = raw[4], ttl = raw[5], ca = raw[6], doc = raw[7], dseq = raw[8]}
`

const finishWrite = `
redis.call('HSET', KEYS[1], 'ttl', ttl, 'ua', now, 'dx', now + ttl)
redis.call('HDEL', KEYS[1], 'rs')
if isnew then
  redis.call('HDEL', KEYS[1], 'new')
  if uid ~= '' then redis.call('HSET', KEYS[1], 'uid', uid) end
  if aid ~= '' then redis.call('HSET', KEYS[1], 'aid', aid) end
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
`

// loadScript reads a session and slides its TTL.
// KEYS: meta, turns. ARGV: 1 number of newest turns to return (0: none).
// Returns nil when the session is not in Redis; otherwise the session in one string (see
// decodeLoad: one reply value instead of one per hash field, which go-redis would allocate
// twice each), followed, when ARGV[1] > 0, by the newest turns: {session, turn...}.
// The string: "v ttl ca ua dx seq new rs len(uid) len(aid) hasdoc\n" .. uid .. aid .. doc.
var loadScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'v', 'doc', 'uid', 'aid', 'ttl', 'ca', 'ua', 'dx', 'new', 'rs', 'seq')
if not f[1] then return false end
local ttl = tonumber(f[5])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
local uid, aid = f[3] or '', f[4] or ''
local hasdoc = '0'
if f[2] then hasdoc = '1' end
local s = table.concat({f[1], f[5], f[6] or '0', f[7] or '0', f[8] or '0', f[11] or '0', f[9] or '0', f[10] or '0',
  #uid, #aid, hasdoc}, ' ') .. '\n' .. uid .. aid .. (f[2] or '')
local n = tonumber(ARGV[1])
if n <= 0 then return s end
local out = redis.call('LRANGE', KEYS[2], -n, -1)
table.insert(out, 1, s)
return out
`)

// casScript is the compare-and-set of the state document. It also extends the session's
// write lineage (field lin: "version:token" entries, oldest first, a contiguous chain that
// ends at the current version, at most maxLineage of them) with this write's token; when
// the chain does not end at the version it replaces (a previous release wrote without
// one), it starts again from this write.
// KEYS: meta, turns. ARGV: 1 expected version (-1: any), 2 user_id, 3 agent_id,
// 4 ttl ms (0: keep), 5 now ms, 6 the new document, 7 the write's token.
// Returns {'OK', version, uid, aid, ttl, ca, had_doc, lineage} | {'CONFLICT', current} |
// {'SCOPE', field} | {'MISSING'}.
var casScript = redis.NewScript(readMeta + scopeCheck + `
local cur = tonumber(f.v)
local exp = tonumber(ARGV[1])
if exp >= 0 and exp ~= cur then return {'CONFLICT', cur} end
local v = cur + 1
local ents = {}
for e in string.gmatch(redis.call('HGET', KEYS[1], 'lin') or '', '%S+') do ents[#ents + 1] = e end
if #ents == 0 or tonumber(string.match(ents[#ents], '^(%d+):')) ~= cur then ents = {} end
ents[#ents + 1] = v .. ':' .. ARGV[7]
while #ents > ` + maxLineageLua + ` do table.remove(ents, 1) end
local lin = table.concat(ents, ' ')
redis.call('HSET', KEYS[1], 'v', v, 'doc', ARGV[6], 'lin', lin)
` + finishWrite + `
local had = 0
if f.doc then had = 1 end
return {'OK', v, uid, aid, ttl, f.ca, had, lin}
`)

// appendScript appends one turn and reports what must reach Postgres: the turns not yet
// confirmed durable (seq > dseq, normally just this one) and the overflow beyond the
// buffer size, which stays in the list until confirmScript trims it after the commit.
// KEYS: meta, turns. ARGV: 1 buffer size, 2 user_id, 3 agent_id, 4 ttl ms (0: keep),
// 5 now ms, 6 the turn's JSON.
// Returns {'OK', seq, uid, aid, ttl, ca, overflow[], pending[], wasnew, lineage} |
// {'SCOPE', field} | {'MISSING'}; wasnew is 1 when the incarnation had not been written
// before this turn, lineage the session's write lineage (see casScript).
var appendScript = redis.NewScript(readMeta + scopeCheck + `
local lin = redis.call('HGET', KEYS[1], 'lin') or ''
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('RPUSH', KEYS[2], seq .. '\n' .. ARGV[6])
` + finishWrite + `
local len = redis.call('LLEN', KEYS[2])
local n = tonumber(ARGV[1])
local over = {}
if len > n then over = redis.call('LRANGE', KEYS[2], 0, len - n - 1) end
local k = seq - tonumber(f.dseq or '0')
if k > len then k = len end
local pend = {}
if k > 0 then pend = redis.call('LRANGE', KEYS[2], -k, -1) end
local wasnew = 0
if isnew then wasnew = 1 end
return {'OK', seq, uid, aid, ttl, f.ca, over, pend, wasnew, lin}
`)

// confirmScript runs after the Postgres commit: it records that every turn <= ARGV[1] is
// durable and trims the head of the buffer through seq ARGV[2] (only turns that are now in
// Postgres are ever trimmed: spill before trim).
// KEYS: meta, turns.
var confirmScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local d = tonumber(redis.call('HGET', KEYS[1], 'dseq') or '0')
if tonumber(ARGV[1]) > d then redis.call('HSET', KEYS[1], 'dseq', ARGV[1]) end
local upto = tonumber(ARGV[2])
local n = 0
while true do
  local h = redis.call('LINDEX', KEYS[2], 0)
  if not h then break end
  local s = tonumber(string.match(h, '^(%d+)'))
  if s == nil or s > upto then break end
  redis.call('LPOP', KEYS[2])
  n = n + 1
end
return n
`)

// restoreScript rehydrates a session from its durable copy unless it is already in Redis.
// KEYS: meta, turns. ARGV: 1 ttl ms, 2 number of hash args, hash field/value pairs, then
// the turn entries oldest first. Returns 1 when it restored, 0 when the session was there.
var restoreScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
local nf = tonumber(ARGV[2])
local args = {}
for i = 3, 2 + nf do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(args))
for i = 3 + nf, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[1]))
return 1
`)

// tombstoneScript deletes a session's content but keeps its turn counter (as a fresh,
// unwritten incarnation), so a concurrent reader cannot resurrect the deleted copy from
// Postgres before the delete commits. Deleting a written incarnation moves the head: the
// tombstone takes the next version, and its lineage holds only that version with the
// delete's token (ARGV[3]), the pair Postgres records too; so a stale ETag never matches
// again, and a write built on a copy from before the delete (Redis rolled back) does not
// descend from the tombstone and is refused by the durable upsert. A tombstone (or fresh
// incarnation) deleted again keeps its version and lineage.
// KEYS: meta, turns. ARGV: 1 expected version (-1: any), 2 now ms, 3 the delete's token.
// Returns {'OK', uid, existed, seq, version} | {'CONFLICT', current} | {'MISSING'};
// existed is 0 when the incarnation had never been written.
var tombstoneScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'v', 'seq', 'uid', 'new', 'ttl', 'lin')
if not f[1] then return {'MISSING'} end
local exp = tonumber(ARGV[1])
if exp >= 0 and exp ~= tonumber(f[1]) then return {'CONFLICT', tonumber(f[1])} end
redis.call('DEL', KEYS[1], KEYS[2])
local seq = f[2] or '0'
local existed = 1
if f[4] == '1' then existed = 0 end
local v, lin = tonumber(f[1]), f[6]
if existed == 1 then
  v = v + 1
  lin = v .. ':' .. ARGV[3]
end
redis.call('HSET', KEYS[1], 'v', v, 'seq', seq, 'dseq', seq, 'new', '1', 'ttl', f[5], 'ca', ARGV[2], 'ua', ARGV[2], 'dx', 0)
if lin then redis.call('HSET', KEYS[1], 'lin', lin) end
redis.call('PEXPIRE', KEYS[1], tonumber(f[5]))
return {'OK', f[3] or '', existed, tonumber(seq), v}
`)

// alignTombstoneScript makes a tombstone this delete wrote (still unwritten, at version
// ARGV[1]) carry the durable tombstone's version (ARGV[2]) and head token (ARGV[3], empty
// for none), when Postgres settled on another one (the durable row was ahead of the Redis
// copy, or was already a tombstone). KEYS: meta.
var alignTombstoneScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'v', 'new')
if f[2] ~= '1' or tonumber(f[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'lin', ARGV[2] .. ':' .. ARGV[3]) else redis.call('HDEL', KEYS[1], 'lin') end
return 1
`)

// dropIfScript removes a session from Redis when it is still at version ARGV[1] (the
// compensation of a write whose Postgres half failed: the next access restores the
// durable copy). KEYS: meta, turns.
var dropIfScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'v')
if v and tonumber(v) == tonumber(ARGV[1]) then redis.call('DEL', KEYS[1], KEYS[2]) return 1 end
return 0
`)

// dropTurnScript removes one turn entry (compensation of a failed append). KEYS: meta, turns.
var dropTurnScript = redis.NewScript(`return redis.call('LREM', KEYS[2], 1, ARGV[1])`)

// eraseIfUserScript deletes a session's keys when it belongs to user ARGV[1].
// KEYS: meta, turns. Returns the number of keys deleted.
var eraseIfUserScript = redis.NewScript(`
local u = redis.call('HGET', KEYS[1], 'uid')
if u == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
`)
