package working

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/redisconn"
	"github.com/strata-mem/strata/internal/strata"
)

// Options configure a Store. Zero values take the defaults noted.
type Options struct {
	Prefix        string           // every Redis key starts with it (config: STRATA_REDIS_PREFIX)
	TTL           time.Duration    // default sliding session TTL (default 24h)
	MaxStateBytes int              // largest state document, compact JSON (default 256 KiB)
	BufferSize    int              // turns kept in the Redis buffer (default 50)
	MaxDepth      int              // deepest nesting of a document (default 64)
	Now           func() time.Time // clock (default time.Now)
}

// MaxTTL is the longest session TTL a client may ask for.
const MaxTTL = 365 * 24 * time.Hour

// Store is the working-memory tier. It is safe for concurrent use.
type Store struct {
	rdb  redis.UniversalClient
	pool *pgxpool.Pool
	opt  Options

	// Test hooks: crash injection between the two stores.
	afterRedisWrite func() error // after the Redis half of a write, before its Postgres half
	beforeConfirm   func() error // after the commit, before the buffer is trimmed
}

// New returns a store over pool (durable copy; used directly only for the occasional expiry
// bump on reads — request writes go through the caller's transaction) and rdb (live copy).
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, o Options) *Store {
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxStateBytes <= 0 {
		o.MaxStateBytes = 256 << 10
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 50
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{rdb: rdb, pool: pool, opt: o}
}

// BufferSize is the number of turns the Redis buffer keeps.
func (s *Store) BufferSize() int { return s.opt.BufferSize }

// State is a session's state document as the API returns it.
type State struct {
	SessionID  string          `json:"session_id"`
	UserID     string          `json:"user_id,omitempty"`
	AgentID    string          `json:"agent_id,omitempty"`
	State      json.RawMessage `json:"state" doc:"The state document (a JSON object)."`
	Version    int64           `json:"version" doc:"Bumped by every write; also the ETag."`
	TTLSeconds int64           `json:"ttl_seconds" doc:"The session's sliding TTL."`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	ExpiresAt  time.Time       `json:"expires_at" doc:"When the session expires unless it is read or written again."`
	Restored   bool            `json:"restored" doc:"True when this document was rehydrated from the durable copy (Redis lost it or is unreachable) and has not been written since."`
}

// Write is a state write: the document (PUT) or a merge patch (PATCH), plus the session's
// scope and TTL.
type Write struct {
	State   json.RawMessage
	UserID  string        // set on the session's first write; must match afterwards
	AgentID string        // likewise
	TTL     time.Duration // 0 keeps the session's TTL
	IfMatch *int64        // expected version; nil: unconditional (PUT) / retried merge (PATCH)
}

// meta is the decoded Redis hash of a session.
type meta struct {
	version  int64
	doc      []byte
	uid, aid string
	ttl      time.Duration
	ca, ua   int64 // unix ms
	dx       int64 // durable expires_at, unix ms
	isNew    bool
	restored bool
	seq      int64
}

// exists: the incarnation has been written (a fresh or deleted one has not).
func (m meta) exists() bool { return !m.isNew }

func (s *Store) stateOf(session string, m meta, now time.Time) State {
	return State{SessionID: session, UserID: m.uid, AgentID: m.aid, State: json.RawMessage(m.doc),
		Version: m.version, TTLSeconds: int64(m.ttl / time.Second), CreatedAt: msTime(m.ca),
		UpdatedAt: msTime(m.ua), ExpiresAt: now.Add(m.ttl).UTC().Truncate(time.Millisecond), Restored: m.restored}
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// redisErr translates a go-redis error and names the operation.
func redisErr(op string, err error) error {
	if err == nil {
		return nil
	}
	ierr := redisconn.Interpret(err)
	var ue *strata.UnavailableError
	if errors.As(ierr, &ue) || errors.Is(ierr, strata.ErrNotFound) {
		return ierr
	}
	return fmt.Errorf("working: %s: %w", op, err)
}

func isUnavailable(err error) bool {
	var ue *strata.UnavailableError
	return errors.As(err, &ue)
}

const maxAttempts = 200

// Get returns the session's state document, sliding its TTL. A session that has no
// document, has expired or belongs to another org is strata.ErrNotFound. When Redis lost
// the session it is restored from Postgres; when Redis is unreachable the durable copy is
// served; both say Restored.
func (s *Store) Get(ctx context.Context, db pg.DBTX, org, session string) (State, error) {
	if err := checkIDs(org, session); err != nil {
		return State{}, err
	}
	m, _, err := s.load(ctx, db, org, session, 0)
	if err != nil {
		return State{}, err
	}
	if m.doc == nil {
		return State{}, strata.ErrNotFound
	}
	return s.stateOf(session, m, s.opt.Now()), nil
}

// load reads a session (and its newest nTurns turns), restoring it from Postgres when
// Redis does not have it. It never creates a session.
func (s *Store) load(ctx context.Context, db pg.DBTX, org, session string, nTurns int) (meta, []Turn, error) {
	k := s.sessionKeys(org, session)
	for range 3 {
		res, err := s.runLoad(ctx, k, nTurns)
		if errors.Is(err, redis.Nil) {
			if err := s.restore(ctx, db, org, session, false); err != nil {
				if isUnavailable(err) {
					return s.loadDurable(ctx, db, org, session, nTurns)
				}
				return meta{}, nil, err
			}
			continue
		}
		if err != nil {
			err = redisErr("loading session", err)
			if isUnavailable(err) {
				return s.loadDurable(ctx, db, org, session, nTurns)
			}
			return meta{}, nil, err
		}
		m, turns, err := decodeLoad(res)
		if err != nil {
			return meta{}, nil, err
		}
		if !m.exists() {
			return meta{}, nil, strata.ErrNotFound
		}
		s.bumpDurableExpiry(ctx, org, session, m)
		return m, turns, nil
	}
	// Redis keeps losing the session (flushed again and again): Postgres has it.
	return s.loadDurable(ctx, db, org, session, nTurns)
}

// loadSHA is loadScript's EVALSHA argument, boxed once.
var loadSHA any = loadScript.Hash()

// runLoad runs loadScript as Script.Run would (EVALSHA, then EVAL when Redis has lost its
// script cache), with the command's arguments built in one slice: the session read is the
// most frequent request, and Script.Run costs three allocations more (its keys and
// arguments slices, copied into a third, and the boxed hash).
func (s *Store) runLoad(ctx context.Context, k keys, nTurns int) (any, error) {
	cmd := redis.NewCmd(ctx, "evalsha", loadSHA, 2, k.meta, k.turns, nTurns)
	cmd.SetFirstKeyPos(3) // the keys' slot, on a cluster
	err := s.rdb.Process(ctx, cmd)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return loadScript.Eval(ctx, s.rdb, []string{k.meta, k.turns}, nTurns).Result()
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// decodeLoad decodes loadScript's reply: the session's string alone, or with the newest
// turns after it.
func decodeLoad(res any) (meta, []Turn, error) {
	var entries []any
	s, ok := res.(string)
	if !ok {
		all, _ := res.([]any)
		if len(all) == 0 {
			return meta{}, nil, fmt.Errorf("working: unexpected load reply %v", res)
		}
		s, _ = all[0].(string)
		entries = all[1:]
	}
	m, err := decodeSession(s)
	if err != nil {
		return meta{}, nil, err
	}
	turns := make([]Turn, 0, len(entries))
	for _, e := range entries {
		es, _ := e.(string)
		t, err := decodeEntry(es)
		if err != nil {
			return meta{}, nil, err
		}
		turns = append(turns, t)
	}
	return m, turns, nil
}

// decodeSession parses loadScript's session string, "v ttl ca ua dx seq new rs len(uid)
// len(aid) hasdoc\n" followed by uid, aid and the document, without allocating but for
// the document's copy (uid and aid share the reply's memory).
func decodeSession(s string) (meta, error) {
	hdr, rest, ok := strings.Cut(s, "\n")
	var f [11]string
	for i := range f {
		f[i], hdr, _ = strings.Cut(hdr, " ")
	}
	// (The error names the header only: the rest is the subject's data.)
	bad := func() (meta, error) {
		return meta{}, fmt.Errorf("working: unexpected load reply %.100q", s[:len(s)-len(rest)])
	}
	if !ok || hdr != "" || f[10] == "" {
		return bad()
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	nu, na := int(num(8)), int(num(9))
	if nu < 0 || na < 0 || nu+na > len(rest) {
		return bad()
	}
	m := meta{version: num(0), ttl: time.Duration(num(1)) * time.Millisecond, ca: num(2), ua: num(3), dx: num(4),
		seq: num(5), isNew: f[6] == "1", restored: f[7] == "1", uid: rest[:nu], aid: rest[nu : nu+na]}
	if f[10] == "1" {
		m.doc = []byte(rest[nu+na:])
	}
	return m, nil
}

// durableBumpWait bounds bumpDurableExpiry, connection wait included.
const durableBumpWait = 250 * time.Millisecond

// bumpDurableExpiry moves the durable copy's expires_at along with the sliding Redis TTL,
// at most once per TTL/10 per session, in its own small transaction (a read's request
// transaction is rolled back). Best effort: a failure only means the durable copy may
// expire up to TTL/10 early if Redis is later lost.
func (s *Store) bumpDurableExpiry(ctx context.Context, org, session string, m meta) {
	now := s.opt.Now()
	exp := now.Add(m.ttl)
	if s.pool == nil || m.isNew || m.dx == 0 || exp.UnixMilli()-m.dx < int64(m.ttl/time.Millisecond)/10 {
		return
	}
	// Bounded: the caller may hold a connection of its own (context assembly), and waiting
	// long for a second one under load is how a small pool starves; a skipped bump is
	// retried by the next read.
	ctx, cancel := context.WithTimeout(ctx, durableBumpWait)
	defer cancel()
	err := pg.InOrgTx(ctx, s.pool, org, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE working_sessions SET expires_at = $3
			WHERE org_id = $1 AND session_id = $2 AND deleted_at IS NULL AND expires_at < $3`, org, session, exp)
		return err
	})
	if err == nil {
		k := s.sessionKeys(org, session)
		_ = s.rdb.HSet(ctx, k.meta, "dx", exp.UnixMilli()).Err()
	}
}

// durableRow is a working_sessions row.
type durableRow struct {
	uid, aid   string
	state      []byte
	version    int64
	seq        int64
	ttl        time.Duration
	created    time.Time
	updated    time.Time
	expires    time.Time
	deleted    bool
	found      bool
	liveAtTime bool
	lineage    string // write lineage in casScript's form
}

func (s *Store) durable(ctx context.Context, db pg.DBTX, org, session string) (durableRow, error) {
	var r durableRow
	var ttlMS int64
	var state *string
	var lineage []byte
	err := db.QueryRow(ctx, `SELECT coalesce(user_id, ''), coalesce(agent_id, ''), state::text, version, turn_seq,
			ttl_ms, created_at, updated_at, expires_at, deleted_at IS NOT NULL, write_lineage::text
		FROM working_sessions WHERE org_id = $1 AND session_id = $2`, org, session).
		Scan(&r.uid, &r.aid, &state, &r.version, &r.seq, &ttlMS, &r.created, &r.updated, &r.expires, &r.deleted, &lineage)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, pg.Interpret(fmt.Errorf("reading durable session %s: %w", session, err))
	}
	r.found = true
	r.lineage = lineageRedis(lineage)
	r.ttl = time.Duration(ttlMS) * time.Millisecond
	if state != nil {
		r.state = []byte(*state)
	}
	r.liveAtTime = !r.deleted && r.expires.After(s.opt.Now())
	return r, nil
}

// durableTurns returns the newest n turns of the session from Postgres, oldest first.
func durableTurns(ctx context.Context, db pg.DBTX, org, session string, n int) ([]Turn, error) {
	rows, err := db.Query(ctx, `SELECT seq, role, content, metadata::text, created_at FROM (
			SELECT * FROM working_turns WHERE org_id = $1 AND session_id = $2 ORDER BY seq DESC LIMIT $3
		) t ORDER BY seq`, org, session, n)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return collectTurns(rows)
}

func collectTurns(rows pgx.Rows) ([]Turn, error) {
	turns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Turn, error) {
		var t Turn
		var md *string
		err := r.Scan(&t.Seq, &t.Role, &t.Content, &md, &t.CreatedAt)
		if md != nil {
			t.Metadata = json.RawMessage(*md)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		return t, err
	})
	if turns == nil {
		turns = []Turn{}
	}
	return turns, pg.Interpret(err)
}

// loadDurable serves a read from Postgres alone (Redis unreachable).
func (s *Store) loadDurable(ctx context.Context, db pg.DBTX, org, session string, nTurns int) (meta, []Turn, error) {
	r, err := s.durable(ctx, db, org, session)
	if err != nil {
		return meta{}, nil, err
	}
	if !r.liveAtTime {
		return meta{}, nil, strata.ErrNotFound
	}
	m := meta{version: r.version, doc: r.state, uid: r.uid, aid: r.aid, ttl: r.ttl, ca: r.created.UnixMilli(),
		ua: r.updated.UnixMilli(), seq: r.seq, restored: true}
	var turns []Turn
	if nTurns > 0 {
		if turns, err = durableTurns(ctx, db, org, session, nTurns); err != nil {
			return meta{}, nil, err
		}
	}
	return m, turns, nil
}

// restore rehydrates a session into Redis from Postgres. A live durable session comes back
// as it was (marked restored); otherwise, when create is set, a fresh incarnation is
// created that continues the version and turn numbering of any tombstone or expired row.
// Without create, a session that is not live is strata.ErrNotFound and nothing is written.
func (s *Store) restore(ctx context.Context, db pg.DBTX, org, session string, create bool) error {
	r, err := s.durable(ctx, db, org, session)
	if err != nil {
		return err
	}
	now := s.opt.Now()
	nowMS := now.UnixMilli()
	var fields []any
	var entries []any
	ttl := s.opt.TTL
	if r.liveAtTime {
		ttl = r.ttl
		fields = append(fields, "v", r.version, "ttl", ttl.Milliseconds(), "seq", r.seq, "dseq", r.seq,
			"ca", r.created.UnixMilli(), "ua", r.updated.UnixMilli(), "dx", r.expires.UnixMilli(), "rs", "1")
		if r.state != nil {
			fields = append(fields, "doc", string(r.state))
		}
		if r.uid != "" {
			fields = append(fields, "uid", r.uid)
		}
		if r.aid != "" {
			fields = append(fields, "aid", r.aid)
		}
		turns, err := durableTurns(ctx, db, org, session, s.opt.BufferSize)
		if err != nil {
			return err
		}
		for _, t := range turns {
			e, err := encodeEntry(t)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
	} else {
		if !create {
			return strata.ErrNotFound
		}
		fields = append(fields, "v", r.version, "ttl", ttl.Milliseconds(), "seq", r.seq, "dseq", r.seq,
			"ca", nowMS, "ua", nowMS, "dx", 0, "new", "1")
	}
	if r.lineage != "" {
		fields = append(fields, "lin", r.lineage)
	}
	args := append([]any{ttl.Milliseconds(), len(fields)}, fields...)
	args = append(args, entries...)
	k := s.sessionKeys(org, session)
	if err := restoreScript.Run(ctx, s.rdb, []string{k.meta, k.turns}, args...).Err(); err != nil {
		return redisErr("restoring session", err)
	}
	if r.liveAtTime {
		return s.index(ctx, org, session, r.uid)
	}
	return nil
}

// index adds the session to its org's and user's index sets.
func (s *Store) index(ctx context.Context, org, session, user string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.orgIndexKey(org), session)
		if user != "" {
			p.SAdd(ctx, s.userIndexKey(org, user), session)
		}
		return nil
	})
	return redisErr("indexing session", err)
}

// runScript runs a write script pipelined behind the SADDs that index the session under
// org and user, so (on one Redis; across cluster nodes, nearly) an index entry exists
// before the data it points to, at the cost of a single round trip.
func (s *Store) runScript(ctx context.Context, sc *redis.Script, org, session, user string, args ...any) ([]any, error) {
	k := s.sessionKeys(org, session)
	keys := []string{k.meta, k.turns}
	var cmd *redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.orgIndexKey(org), session)
		if user != "" {
			p.SAdd(ctx, s.userIndexKey(org, user), session)
		}
		cmd = sc.EvalSha(ctx, p, keys, args...)
		return nil
	})
	if err != nil && cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = sc.Run(ctx, s.rdb, keys, args...) // script cache empty (Redis restarted): EVAL it
		err = cmd.Err()
	}
	if err != nil {
		return nil, redisErr("writing session", err)
	}
	res, err := cmd.Slice()
	if err != nil {
		return nil, redisErr("writing session", err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("working: empty script reply")
	}
	return res, nil
}

func replyInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func replyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func scopeConflict(field string) error {
	return strata.Conflict("this session's "+field+" was set by its first write and differs from the one given",
		map[string]any{"field": field})
}

func versionConflict(current int64) error {
	return strata.Conflict("version mismatch: the state was changed since the version in If-Match; re-read and retry",
		map[string]any{"version": current})
}

func (s *Store) checkTTL(d time.Duration) error {
	if d < 0 || d > MaxTTL {
		return strata.Invalid("ttl_seconds", "must be between 1 and %d", int64(MaxTTL/time.Second))
	}
	return nil
}

// Put replaces the state document. It reports whether this was the session's first state
// document (201 Created). The Postgres half runs on tx, the request's transaction.
func (s *Store) Put(ctx context.Context, tx pg.DBTX, org, session string, w Write) (State, bool, error) {
	return sendPrepared(ctx, tx)(s.PreparePut(ctx, tx, org, session, w))
}

// PreparePut is Put with its Postgres half not yet sent: the document is in Redis, and the
// returned Persist writes its durable copy (Send, or the caller's batch that commits it).
func (s *Store) PreparePut(ctx context.Context, tx pg.DBTX, org, session string, w Write) (State, bool, *Persist, error) {
	if err := checkIDs(org, session); err != nil {
		return State{}, false, nil, err
	}
	doc, err := s.checkDoc("state", w.State)
	if err != nil {
		return State{}, false, nil, err
	}
	if err := s.checkSize("state", doc); err != nil {
		return State{}, false, nil, err
	}
	return s.write(ctx, tx, org, session, w, func(meta) ([]byte, error) { return doc, nil }, false)
}

// Patch applies w.State as an RFC 7386 merge patch to the current document ({} when the
// session has none). Without If-Match, a concurrent change is absorbed by re-reading and
// re-applying the patch, so no update is lost.
func (s *Store) Patch(ctx context.Context, tx pg.DBTX, org, session string, w Write) (State, bool, error) {
	return sendPrepared(ctx, tx)(s.PreparePatch(ctx, tx, org, session, w))
}

// PreparePatch is Patch with its Postgres half not yet sent (see PreparePut).
func (s *Store) PreparePatch(ctx context.Context, tx pg.DBTX, org, session string, w Write) (State, bool, *Persist, error) {
	if err := checkIDs(org, session); err != nil {
		return State{}, false, nil, err
	}
	patch := []byte(w.State)
	if len(patch) == 0 {
		patch = []byte("{}")
	}
	patch, err := s.checkDoc("state", patch)
	if err != nil {
		return State{}, false, nil, err
	}
	return s.write(ctx, tx, org, session, w, func(m meta) ([]byte, error) {
		doc, err := applyPatch(m.doc, patch)
		if err != nil {
			return nil, err
		}
		if d := strata.JSONDepth(doc); d > s.opt.MaxDepth {
			return nil, strata.Invalid("state", "the patched document would be nested %d levels deep; the limit is %d", d, s.opt.MaxDepth)
		}
		return doc, s.checkSize("state", doc)
	}, true)
}

// current reads the session for a read-modify-write, creating a fresh incarnation when
// there is none.
func (s *Store) current(ctx context.Context, db pg.DBTX, org, session string) (meta, error) {
	k := s.sessionKeys(org, session)
	for range 3 {
		res, err := s.runLoad(ctx, k, 0)
		if errors.Is(err, redis.Nil) {
			if err := s.restore(ctx, db, org, session, true); err != nil {
				return meta{}, err
			}
			continue
		}
		if err != nil {
			return meta{}, redisErr("loading session", err)
		}
		m, _, err := decodeLoad(res)
		return m, err
	}
	// Redis keeps losing the session: read the durable copy. The compare-and-set that
	// follows restores the session again, and the durable upsert checks the version anyway.
	r, err := s.durable(ctx, db, org, session)
	if err != nil {
		return meta{}, err
	}
	if !r.liveAtTime {
		return meta{version: r.version, seq: r.seq, ttl: s.opt.TTL, isNew: true}, nil
	}
	return meta{version: r.version, doc: r.state, uid: r.uid, aid: r.aid, ttl: r.ttl, ca: r.created.UnixMilli(),
		ua: r.updated.UnixMilli(), seq: r.seq, restored: true}, nil
}

func (s *Store) write(ctx context.Context, tx pg.DBTX, org, session string, w Write,
	next func(meta) ([]byte, error), readModify bool) (State, bool, *Persist, error) {
	if err := s.checkTTL(w.TTL); err != nil {
		return State{}, false, nil, err
	}
	var doc []byte
	for range maxAttempts {
		expected := int64(-1)
		if w.IfMatch != nil {
			expected = *w.IfMatch
		}
		if readModify || doc == nil {
			var m meta
			if readModify {
				var err error
				if m, err = s.current(ctx, tx, org, session); err != nil {
					return State{}, false, nil, err
				}
				if w.IfMatch != nil && *w.IfMatch != m.version {
					return State{}, false, nil, versionConflict(m.version)
				}
				expected = m.version
			}
			var err error
			if doc, err = next(m); err != nil {
				return State{}, false, nil, err
			}
		}
		now := s.opt.Now()
		res, err := s.runScript(ctx, casScript, org, session, w.UserID,
			expected, w.UserID, w.AgentID, w.TTL.Milliseconds(), now.UnixMilli(), doc, newToken())
		if err != nil {
			return State{}, false, nil, err
		}
		switch replyStr(res[0]) {
		case "MISSING":
			if err := s.restore(ctx, tx, org, session, true); err != nil {
				return State{}, false, nil, err
			}
			continue
		case "CONFLICT":
			if w.IfMatch != nil || !readModify {
				return State{}, false, nil, versionConflict(replyInt(res[1]))
			}
			continue // a concurrent merge won: re-read and re-apply the patch
		case "SCOPE":
			return State{}, false, nil, scopeConflict(replyStr(res[1]))
		case "OK":
		default:
			return State{}, false, nil, fmt.Errorf("working: unexpected cas reply %v", res)
		}
		m := meta{version: replyInt(res[1]), uid: replyStr(res[2]), aid: replyStr(res[3]),
			ttl: time.Duration(replyInt(res[4])) * time.Millisecond, ca: replyInt(res[5]), ua: now.UnixMilli(), doc: doc}
		created := replyInt(res[6]) == 0
		if len(res) < 8 {
			return State{}, false, nil, fmt.Errorf("working: unexpected cas reply %v", res)
		}
		p := s.persist(org, session, m, lineageJSON(replyStr(res[7])), now)
		if s.afterRedisWrite != nil {
			if err := s.afterRedisWrite(); err != nil {
				p.Abandon(ctx)
				return State{}, false, nil, err
			}
		}
		return s.stateOf(session, m, now), created, p, nil
	}
	return State{}, false, nil, strata.Conflict("too many concurrent writers on this session; retry", nil)
}

// Persist is the Postgres half of a state write whose Redis half is done: an upsert that
// applies the version the write claims when the write descends from the durable row (its
// lineage contains the row's version and token: the next version, or a later one whose
// ancestors' upserts have not arrived yet; or the row is absent, or a tombstone or expired
// row whose version and lineage the new incarnation continues from, which restore put in
// Redis), and changes nothing when the durable lineage already contains the write (it
// arrived after a descendant). Postgres is the arbiter of versions: otherwise the Redis
// copy was not what Postgres committed (a concurrent write not yet committed, or a Redis
// flush or failover that lost acknowledged writes), and the statement fails, aborting its
// transaction and with it the write's audit record, so the write is answered with a
// conflict (re-read and retry) and never acknowledged (persistSQL has the rules). Send runs it on the
// request's transaction; a caller that commits it in a batch of its own (with the write's
// audit record and COMMIT: pg.Session.CommitInTrip) queues Statement there and passes the
// batch's error to Failed. Either way, a failed durable write drops the Redis copy, so
// that the next access restores the session from Postgres and no one reads a version
// Postgres does not hold.
type Persist struct {
	s            *Store
	org, session string
	version      int64
	stmt         pg.Statement
}

// persistSQL is the upsert. It decides by the write lineage (write_lineage: version →
// token of the write that produced it, for the newest maxLineage versions; the write
// carries its own, ending with its version and token, from casScript). The durable row's
// head is the entry at its own version; a row whose lineage does not name its version (NULL:
// written by the previous release) has an unknown head. On a conflict with an existing row:
//
//   - the write's lineage contains the durable head and the write is newer: it descends
//     from what Postgres holds (normally the next version; after contention, one that
//     arrived ahead of its ancestors, whose own upserts are still on their way): apply it;
//   - the row has never had a state (version 0: created by a turn append) and the write's
//     lineage starts at version 1: it descends from that empty start, apply it;
//   - the head is unknown and the write is the next version: the strict rule, apply it;
//   - the durable lineage already contains the write itself (at a version not above the
//     row's): it is an ancestor of what is durable, it arrived after its descendants:
//     change nothing (the WHERE clause), and the statement succeeds;
//   - anything else (the write was built on a copy Postgres does not hold: a flush or
//     rollback of Redis): version is set to NULL, which the column's NOT NULL constraint
//     refuses (23502 on working_sessions.version: isStaleVersion); a statement that merely
//     changed no row would still let the transaction, and its audit record, commit.
//
// Plain SQL, no function, so it runs as it is on a distributed (Citus) table too.
const persistSQL = `INSERT INTO working_sessions AS w (org_id, session_id, user_id, agent_id, state, version,
		ttl_ms, created_at, updated_at, expires_at, write_lineage)
	VALUES ($1, $2, nullif($3, ''), nullif($4, ''), $5::jsonb, $6, $7, $8, $9, $10, $11::jsonb)
	ON CONFLICT (org_id, session_id) DO UPDATE SET user_id = excluded.user_id, agent_id = excluded.agent_id,
		state = excluded.state,
		version = CASE
			WHEN excluded.version > w.version AND excluded.write_lineage @>
				jsonb_build_object(w.version::text, w.write_lineage -> w.version::text) THEN excluded.version
			WHEN w.version = 0 AND (excluded.write_lineage -> '1') IS NOT NULL THEN excluded.version
			WHEN excluded.version = w.version + 1 AND (w.write_lineage -> w.version::text) IS NULL THEN excluded.version
			END,
		ttl_ms = excluded.ttl_ms, created_at = excluded.created_at, updated_at = excluded.updated_at,
		expires_at = excluded.expires_at, deleted_at = NULL, write_lineage = excluded.write_lineage
	WHERE NOT coalesce(w.version >= excluded.version AND w.write_lineage @>
		jsonb_build_object(excluded.version::text, excluded.write_lineage -> excluded.version::text), false)`

func (s *Store) persist(org, session string, m meta, lineage string, now time.Time) *Persist {
	return &Persist{s: s, org: org, session: session, version: m.version, stmt: pg.Statement{
		SQL: persistSQL,
		Args: []any{org, session, m.uid, m.aid, string(m.doc), m.version, m.ttl.Milliseconds(), msTime(m.ca), now, now.Add(m.ttl),
			lineage},
	}}
}

// maxLineage is the number of versions a session's write lineage remembers (in Redis and
// in Postgres): how far a write may arrive behind its descendants and still be recognized
// as their ancestor (further behind, it is refused, as a conflict).
const (
	maxLineage    = 32
	maxLineageLua = "32" // maxLineage in casScript
)

// newToken is a state write's lineage token: random, so two writes that Redis gave the
// same version (one of them on a copy Postgres does not hold) never share one.
func newToken() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// lineageJSON turns casScript's lineage ("version:token ...") into the jsonb object the
// durable row keeps ({"version": "token", ...}).
func lineageJSON(lin string) string {
	m := map[string]string{}
	for _, e := range strings.Fields(lin) {
		if v, tok, ok := strings.Cut(e, ":"); ok {
			m[v] = tok
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// lineageRedis turns a durable lineage (jsonb text, or empty) back into casScript's form,
// oldest first.
func lineageRedis(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	m := map[string]string{}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	type ent struct {
		v   int64
		tok string
	}
	ents := make([]ent, 0, len(m))
	for k, tok := range m {
		v, err := strconv.ParseInt(k, 10, 64)
		if err != nil || tok == "" || strings.ContainsAny(tok, ": ") {
			return ""
		}
		ents = append(ents, ent{v, tok})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].v < ents[j].v })
	var b strings.Builder
	for i, e := range ents {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(e.v, 10) + ":" + e.tok)
	}
	return b.String()
}

// isStaleVersion reports whether err is persistSQL refusing a write whose version does not
// follow the durable one.
func isStaleVersion(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgNotNullViolation && pe.TableName == "working_sessions" && pe.ColumnName == "version"
}

// pgNotNullViolation is SQLSTATE not_null_violation.
const pgNotNullViolation = "23502"

// Statement is the upsert.
func (p *Persist) Statement() pg.Statement { return p.stmt }

// Send runs the upsert on tx (dropping the Redis copy when it fails).
func (p *Persist) Send(ctx context.Context, tx pg.DBTX) error {
	if _, err := tx.Exec(ctx, p.stmt.SQL, p.stmt.Args...); err != nil {
		return p.Failed(ctx, fmt.Errorf("writing durable state of session %s: %w", p.session, err))
	}
	return nil
}

// Failed handles the failure of the upsert's transaction (err: its error): it drops the
// Redis copy (Abandon) and returns the error to answer — a version conflict when Postgres
// refused the version (the write is not acknowledged; the client re-reads and retries).
func (p *Persist) Failed(ctx context.Context, err error) error {
	p.Abandon(ctx)
	if isStaleVersion(err) {
		return durableConflict()
	}
	return pg.Interpret(err)
}

// durableConflict is the answer to a write whose Redis half was applied on a copy that
// Postgres does not confirm. The current version is not named: the copy that offered one
// was wrong, and the next read restores the durable one.
func durableConflict() error {
	return strata.Conflict("version mismatch: the state was changed concurrently (or the cache lost writes) and this write was not stored; re-read and retry", nil)
}

// Abandon drops the Redis copy of the write, if it is still the current version: its durable
// half did not commit.
func (p *Persist) Abandon(ctx context.Context) {
	k := p.s.sessionKeys(p.org, p.session)
	_ = dropIfScript.Run(context.WithoutCancel(ctx), p.s.rdb, []string{k.meta, k.turns}, p.version).Err()
}

// sendPrepared finishes Put or Patch from its Prepare method's results: the upsert sent on tx.
func sendPrepared(ctx context.Context, tx pg.DBTX) func(State, bool, *Persist, error) (State, bool, error) {
	return func(st State, created bool, p *Persist, err error) (State, bool, error) {
		if err != nil {
			return State{}, false, err
		}
		if err := p.Send(ctx, tx); err != nil {
			return State{}, false, err
		}
		return st, created, nil
	}
}

// Delete removes the session — state document, turn buffer, and their durable copies
// (the turn log included) — keeping only a tombstone with its turn counter and a version
// one above the deleted one, with a fresh lineage token (in Redis and in Postgres): a
// write built on a copy from before the delete (Redis rolled back to it) does not descend
// from the tombstone, so the durable upsert refuses it, and a stale ETag never matches.
// ifMatch, when set, must be the current version, in Redis and in Postgres (otherwise a
// conflict, nothing deleted). A session that does not exist is strata.ErrNotFound.
func (s *Store) Delete(ctx context.Context, tx pg.DBTX, org, session string, ifMatch *int64) error {
	if err := checkIDs(org, session); err != nil {
		return err
	}
	k := s.sessionKeys(org, session)
	expected := int64(-1)
	if ifMatch != nil {
		expected = *ifMatch
	}
	for range 3 {
		now := s.opt.Now()
		token := newToken()
		res, err := tombstoneScript.Run(ctx, s.rdb, []string{k.meta, k.turns}, expected, now.UnixMilli(), token).Slice()
		if err != nil {
			return redisErr("deleting session", err)
		}
		switch replyStr(res[0]) {
		case "MISSING":
			if err := s.restore(ctx, tx, org, session, false); err != nil {
				return err
			}
			continue
		case "CONFLICT":
			return versionConflict(replyInt(res[1]))
		case "OK":
		default:
			return fmt.Errorf("working: unexpected delete reply %v", res)
		}
		if len(res) < 5 {
			return fmt.Errorf("working: unexpected delete reply %v", res)
		}
		uid, existed, seq, tombV := replyStr(res[1]), replyInt(res[2]) == 1, replyInt(res[3]), replyInt(res[4])
		// With If-Match, Postgres decides too: the durable row must be at the matched
		// version (the Redis copy may be one that missed writes). The tombstone's version
		// is above the durable one and the Redis tombstone's, with the delete's token.
		var durV int64
		var durTok string
		deleted := true
		err = tx.QueryRow(ctx, `UPDATE working_sessions SET state = NULL, user_id = NULL, agent_id = NULL,
				deleted_at = $3, updated_at = $3, turn_seq = greatest(turn_seq, $4),
				version = greatest(version + 1, $6), write_lineage = jsonb_build_object(greatest(version + 1, $6)::text, $7::text)
			WHERE org_id = $1 AND session_id = $2 AND deleted_at IS NULL AND ($5::bigint < 0 OR version = $5)
			RETURNING version, $7::text`,
			org, session, now, seq, expected, tombV, token).Scan(&durV, &durTok)
		if errors.Is(err, pgx.ErrNoRows) {
			deleted, err = false, nil
		}
		if err == nil && expected >= 0 && existed && !deleted {
			// Drop the Redis tombstone: the next access restores the durable session.
			_ = s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()
			return durableConflict()
		}
		if err == nil && !deleted {
			// Already a tombstone in Postgres (or no row at all): the Redis tombstone
			// takes the durable one's head.
			var lin []byte
			err = tx.QueryRow(ctx, `SELECT version, write_lineage::text FROM working_sessions WHERE org_id = $1 AND session_id = $2`,
				org, session).Scan(&durV, &lin)
			if errors.Is(err, pgx.ErrNoRows) {
				durV, durTok, err = tombV, token, nil
			} else if err == nil {
				durTok = lineageHead(lin, durV)
			}
		}
		if err == nil {
			_, err = tx.Exec(ctx, `DELETE FROM working_turns WHERE org_id = $1 AND session_id = $2`, org, session)
		}
		if err != nil {
			// Compensate: drop the Redis tombstone so the next access restores the durable
			// copy, which the rolled-back transaction left as it was.
			_ = s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()
			return pg.Interpret(fmt.Errorf("deleting durable session %s: %w", session, err))
		}
		if !existed || durV != tombV || durTok != token {
			_ = alignTombstoneScript.Run(context.WithoutCancel(ctx), s.rdb, []string{k.meta}, tombV, durV, durTok).Err()
		}
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SRem(ctx, s.orgIndexKey(org), session)
			if uid != "" {
				p.SRem(ctx, s.userIndexKey(org, uid), session)
			}
			return nil
		})
		if !existed && !deleted {
			return strata.ErrNotFound
		}
		return nil
	}
	return fmt.Errorf("working: session %s kept vanishing from Redis while deleting", session)
}

// lineageHead is the token a durable lineage (jsonb text) records for version v, or "".
func lineageHead(raw []byte, v int64) string {
	m := map[string]string{}
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return ""
	}
	tok := m[strconv.FormatInt(v, 10)]
	if strings.ContainsAny(tok, ": ") {
		return ""
	}
	return tok
}
