package keyvalue

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

const entryCols = `namespace, key, level, scope_id, user_id, agent_id, session_id, value, version, deleted,
	expires_at, created_at, updated_at, updated_by`

type rowEntry struct {
	KVEntry
	scopeID string
}

func scanEntry(row pgx.Row) (*rowEntry, error) {
	var e rowEntry
	var user, agent, session *string
	var value []byte
	var level string
	if err := row.Scan(&e.Namespace, &e.Key, &level, &e.scopeID, &user, &agent, &session, &value, &e.Version,
		&e.Deleted, &e.ExpiresAt, &e.CreatedAt, &e.UpdatedAt, &e.UpdatedBy); err != nil {
		return nil, err
	}
	e.Level = Level(level)
	e.UserID, e.AgentID, e.SessionID = deref(user), deref(agent), deref(session)
	if value != nil {
		e.Value = json.RawMessage(value)
	}
	if e.ExpiresAt != nil {
		t := e.ExpiresAt.UTC()
		e.ExpiresAt = &t
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return &e, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// read runs one query for org on a pooled connection in a single round trip: the org
// setting and the query go in one pipeline, which Postgres runs as one implicit
// transaction, so row-level security binds without BEGIN/COMMIT round trips.
func (s *Store) read(ctx context.Context, org, sql string, args []any, each func(pgx.Rows) error) (err error) {
	return s.readOn(ctx, nil, org, sql, args, each)
}

// readOn is read on db when it is set (a transaction bound to org already).
func (s *Store) readOn(ctx context.Context, db pg.DBTX, org, sql string, args []any, each func(pgx.Rows) error) (err error) {
	if db != nil {
		rows, err := db.Query(ctx, sql, args...)
		return eachRow(rows, err, each)
	}
	if org == "" {
		return errors.New("keyvalue: empty org")
	}
	b := &pgx.Batch{}
	pg.QueueSetOrg(b, org)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = pg.Interpret(cerr)
		}
	}()
	if _, err := br.Exec(); err != nil {
		return pg.Interpret(err)
	}
	rows, err := br.Query()
	return eachRow(rows, err, each)
}

// eachRow calls each for every row of a query's result (err: the query's own error).
func eachRow(rows pgx.Rows, err error, each func(pgx.Rows) error) error {
	if err != nil {
		return pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return pg.Interpret(err)
		}
	}
	return pg.Interpret(rows.Err())
}

func loadKey(key string, sl slot) string {
	return key + "\x00" + string(sl.Level) + "\x00" + sl.ScopeID
}

// load reads the given slots of keys from Postgres. Every (key, slot) gets an answer:
// absent ones get version 0 (or their tombstone's version).
func (s *Store) load(ctx context.Context, org, ns string, keys []string, slots []slot) (map[string]*cached, error) {
	if s.hooks.load != nil {
		s.hooks.load()
	}
	n := len(keys) * len(slots)
	ks, ls, ids := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	out := make(map[string]*cached, n)
	for _, k := range keys {
		for _, sl := range slots {
			ks, ls, ids = append(ks, k), append(ls, string(sl.Level)), append(ids, sl.ScopeID)
			out[loadKey(k, sl)] = &cached{}
		}
	}
	err := s.read(ctx, org, `SELECT `+entryCols+` FROM kv_entries
		WHERE org_id = $1 AND namespace = $2
		  AND (key, level, scope_id) IN (SELECT * FROM unnest($3::text[], $4::text[], $5::text[]))`,
		[]any{org, ns, ks, ls, ids}, func(r pgx.Rows) error {
			e, err := scanEntry(r)
			if err != nil {
				return err
			}
			c := &cached{version: e.Version}
			if !e.Deleted {
				c.entry = &e.KVEntry
			}
			out[loadKey(e.Key, slot{e.Level, e.scopeID})] = c
			return nil
		})
	return out, err
}

// WriteInput is a PUT or a restore.
type WriteInput struct {
	Namespace, Key string
	Scope          strata.Scope
	Value          json.RawMessage // PUT
	RestoreVersion int64           // restore: the version whose value to write again
	TTL            time.Duration   // 0: no expiry
	IfMatch        *int64          // the live version the caller expects
	IfNoneMatch    bool            // create only: conflict when a live entry exists
	Actor          string          // API key id
}

// AfterCommit registers a function to run once the caller's transaction has committed
// (pg.Session.AfterCommit): writes update the cache only then.
type AfterCommit func(func())

// Put writes a value at the most specific level the scope names, on db (the request's
// transaction, bound to the scope's org); the cache is updated through afterCommit once
// it has committed. created is true when no live entry existed before.
func (s *Store) Put(ctx context.Context, db pg.DBTX, afterCommit AfterCommit, in WriteInput) (e KVEntry, created bool, err error) {
	if err := s.checkTarget(in.Namespace, in.Key, in.Scope); err != nil {
		return KVEntry{}, false, err
	}
	if err := s.CheckValue("value", in.Value); err != nil {
		return KVEntry{}, false, err
	}
	return s.write(ctx, db, afterCommit, in, "put")
}

// Restore writes the value of an earlier version again, as a new version (op "restore").
func (s *Store) Restore(ctx context.Context, db pg.DBTX, afterCommit AfterCommit, in WriteInput) (KVEntry, bool, error) {
	if err := s.checkTarget(in.Namespace, in.Key, in.Scope); err != nil {
		return KVEntry{}, false, err
	}
	if in.RestoreVersion < 1 {
		return KVEntry{}, false, strata.Invalid("version", "must be a version of this entry (1 or more)")
	}
	return s.write(ctx, db, afterCommit, in, "restore")
}

// CheckValue validates a value: present, not null, within the size and depth limits, no
// NUL characters.
func (s *Store) CheckValue(field string, v json.RawMessage) error {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return strata.Invalid(field, "is required and must not be null (DELETE removes an entry)")
	}
	if len(v) > s.opt.MaxValueBytes {
		return strata.TooLarge(field, "is %d bytes of JSON; the limit is %d (the server's STRATA_KV_MAX_VALUE_BYTES): keep large documents elsewhere (an asset) and store their reference", len(v), s.opt.MaxValueBytes)
	}
	if err := strata.CheckJSON(field, v); err != nil {
		return err
	}
	if !json.Valid(v) {
		return strata.Invalid(field, "must be valid JSON")
	}
	if d := strata.JSONDepth(v); d > s.opt.MaxJSONDepth {
		return strata.Invalid(field, "nests %d levels deep; the limit is %d", d, s.opt.MaxJSONDepth)
	}
	return nil
}

func (s *Store) checkTarget(ns, key string, sc strata.Scope) error {
	if sc.OrgID == "" {
		return errors.New("keyvalue: empty org")
	}
	if err := strata.CheckID("namespace", ns, false); err != nil {
		return err
	}
	if err := strata.CheckID("key", key, false); err != nil {
		return err
	}
	for f, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID} {
		if err := strata.CheckID(f, v, true); err != nil {
			return err
		}
	}
	return nil
}

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type current struct {
	exists  bool
	version int64
	live    bool
}

// lock reads and row-locks the entry's current state.
func lockEntry(ctx context.Context, tx pg.DBTX, org, ns, key string, sl slot, now time.Time) (current, error) {
	var c current
	var deleted bool
	var expires *time.Time
	err := tx.QueryRow(ctx, `SELECT version, deleted, expires_at FROM kv_entries
		WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5 FOR UPDATE`,
		org, ns, key, string(sl.Level), sl.ScopeID).Scan(&c.version, &deleted, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, pg.Interpret(err)
	}
	c.exists = true
	c.live = !deleted && (expires == nil || expires.After(now))
	return c, nil
}

func checkPreconditions(cur current, ifMatch *int64, ifNoneMatch bool) error {
	if ifMatch != nil && (!cur.live || cur.version != *ifMatch) {
		details := map[string]any{"expected_version": *ifMatch}
		if cur.live {
			details["current_version"] = cur.version
			return strata.Conflict(fmt.Sprintf("version mismatch: the entry is at version %d, If-Match named %d; read it again and retry", cur.version, *ifMatch), details)
		}
		return strata.Conflict("version mismatch: the entry does not exist at this scope", details)
	}
	if ifNoneMatch && cur.live {
		return strata.Conflict("the entry already exists (If-None-Match: *)", map[string]any{"current_version": cur.version})
	}
	return nil
}

// forgetIfStale drops the cached entry when a write's If-Match named a version older than
// Postgres holds (cacheForget).
func (s *Store) forgetIfStale(ctx context.Context, org, ns, key string, sl slot, cur current, ifMatch *int64) {
	if ifMatch != nil && cur.exists && *ifMatch < cur.version {
		s.cacheForget(ctx, org, ns, key, sl)
	}
}

func (s *Store) write(ctx context.Context, tx pg.DBTX, afterCommit AfterCommit, in WriteInput, op string) (_ KVEntry, _ bool, err error) {
	org, ns, key := in.Scope.OrgID, in.Namespace, in.Key
	sl := writeSlot(in.Scope)
	now := s.opt.Now().UTC()
	var expires *time.Time
	if in.TTL > 0 {
		t := now.Add(in.TTL)
		expires = &t
	}
	token, begun := newToken(), false
	defer func() {
		if err != nil && begun { // the request fails and rolls back: nothing to protect
			s.cacheAbort(ctx, org, ns, key, sl, token)
		}
	}()
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := lockEntry(ctx, tx, org, ns, key, sl, now)
		if err != nil {
			return KVEntry{}, false, err
		}
		if err := checkPreconditions(cur, in.IfMatch, in.IfNoneMatch); err != nil {
			s.forgetIfStale(ctx, org, ns, key, sl, cur, in.IfMatch)
			return KVEntry{}, false, err
		}
		value := in.Value
		var restoredFrom *int64
		if op == "restore" {
			var v []byte
			err := tx.QueryRow(ctx, `SELECT value FROM kv_versions
				WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5 AND version = $6`,
				org, ns, key, string(sl.Level), sl.ScopeID, in.RestoreVersion).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return KVEntry{}, false, strata.Invalid("version", "this entry has no version %d", in.RestoreVersion)
			}
			if err != nil {
				return KVEntry{}, false, pg.Interpret(err)
			}
			if v == nil {
				return KVEntry{}, false, strata.Invalid("version", "version %d is a delete; it has no value to restore", in.RestoreVersion)
			}
			value, restoredFrom = v, &in.RestoreVersion
		}

		s.cacheBegin(ctx, org, ns, key, sl, token)
		begun = true

		var row pgx.Row
		if cur.exists {
			row = tx.QueryRow(ctx, `UPDATE kv_entries SET value = $6, version = version + 1, deleted = false,
					expires_at = $7, user_id = $8, agent_id = $9, session_id = $10,
					created_at = CASE WHEN $11 THEN created_at ELSE $12 END, updated_at = $12, updated_by = $13
				WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5
				RETURNING `+entryCols,
				org, ns, key, string(sl.Level), sl.ScopeID, []byte(value), expires,
				nullable(in.Scope.UserID), nullable(in.Scope.AgentID), nullable(in.Scope.SessionID),
				cur.live, now, in.Actor)
		} else {
			row = tx.QueryRow(ctx, `INSERT INTO kv_entries (org_id, namespace, key, level, scope_id, user_id, agent_id,
					session_id, value, version, expires_at, created_at, updated_at, updated_by)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1, $10, $11, $11, $12)
				ON CONFLICT DO NOTHING
				RETURNING `+entryCols,
				org, ns, key, string(sl.Level), sl.ScopeID, nullable(in.Scope.UserID), nullable(in.Scope.AgentID),
				nullable(in.Scope.SessionID), []byte(value), expires, now, in.Actor)
		}
		e, err := scanEntry(row)
		if errors.Is(err, pgx.ErrNoRows) && !cur.exists {
			// A concurrent request created it between our read and our insert; its row lock
			// is released by now (it committed), so lock it and decide again. Our pending
			// token stays registered; the retry re-adds it and its end removes it.
			continue
		}
		if err != nil {
			return KVEntry{}, false, pg.Interpret(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO kv_versions (org_id, namespace, key, level, scope_id, version, op,
				value, user_id, agent_id, session_id, expires_at, restored_from, written_by, written_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
			org, ns, key, string(sl.Level), sl.ScopeID, e.Version, op, []byte(value),
			nullable(in.Scope.UserID), nullable(in.Scope.AgentID), nullable(in.Scope.SessionID),
			expires, restoredFrom, in.Actor, now); err != nil {
			return KVEntry{}, false, pg.Interpret(err)
		}
		committed := &cached{version: e.Version, entry: &e.KVEntry}
		afterCommit(func() { s.cacheEnd(ctx, org, ns, key, sl, token, committed, false) })
		return e.KVEntry, !cur.live, nil
	}
	return KVEntry{}, false, strata.Conflict("concurrent update; retry", nil)
}

// Delete removes the entry at the most specific level the scope names (exactly that
// level; nothing is resolved). The row stays as a tombstone so versions keep growing; the
// answer carries the tombstone's version and deleted: true. A missing or expired entry is
// ErrNotFound.
func (s *Store) Delete(ctx context.Context, tx pg.DBTX, afterCommit AfterCommit, ns, key string, sc strata.Scope, ifMatch *int64, actor string) (_ KVEntry, err error) {
	if err := s.checkTarget(ns, key, sc); err != nil {
		return KVEntry{}, err
	}
	org, sl, now := sc.OrgID, writeSlot(sc), s.opt.Now().UTC()
	cur, err := lockEntry(ctx, tx, org, ns, key, sl, now)
	if err != nil {
		return KVEntry{}, err
	}
	if !cur.live {
		return KVEntry{}, strata.ErrNotFound
	}
	if err := checkPreconditions(cur, ifMatch, false); err != nil {
		s.forgetIfStale(ctx, org, ns, key, sl, cur, ifMatch)
		return KVEntry{}, err
	}
	token := newToken()
	s.cacheBegin(ctx, org, ns, key, sl, token)
	defer func() {
		if err != nil {
			s.cacheAbort(ctx, org, ns, key, sl, token)
		}
	}()
	e, err := scanEntry(tx.QueryRow(ctx, `UPDATE kv_entries SET value = NULL, deleted = true, version = version + 1,
			expires_at = NULL, updated_at = $6, updated_by = $7
		WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5
		RETURNING `+entryCols, org, ns, key, string(sl.Level), sl.ScopeID, now, actor))
	if err != nil {
		return KVEntry{}, pg.Interpret(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO kv_versions (org_id, namespace, key, level, scope_id, version, op,
			user_id, agent_id, session_id, written_by, written_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'delete', $7, $8, $9, $10, $11)`,
		org, ns, key, string(sl.Level), sl.ScopeID, e.Version,
		nullable(e.UserID), nullable(e.AgentID), nullable(e.SessionID), actor, now); err != nil {
		return KVEntry{}, pg.Interpret(err)
	}
	tomb := &cached{version: e.Version}
	afterCommit(func() { s.cacheEnd(ctx, org, ns, key, sl, token, tomb, false) })
	return e.KVEntry, nil
}

// History lists the versions of the entry at the most specific level the scope names,
// newest first, after cursor (the previous page's last version; "": from the newest), on
// a pooled connection (one round trip; see Get). ErrNotFound when the entry was never
// written.
func (s *Store) History(ctx context.Context, ns, key string, sc strata.Scope, cursor string, limit int) ([]KVVersion, error) {
	var before int64
	if cursor != "" {
		var err error
		if before, err = strconv.ParseInt(cursor, 10, 64); err != nil || before < 1 {
			return nil, strata.Invalid("cursor", "must be a next_cursor this endpoint returned")
		}
	}
	if err := s.checkTarget(ns, key, sc); err != nil {
		return nil, err
	}
	sl := writeSlot(sc)
	var out []KVVersion
	err := s.read(ctx, sc.OrgID, `SELECT version, op, value, user_id, agent_id, session_id, expires_at,
			restored_from, written_by, written_at
		FROM kv_versions
		WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5
		  AND ($6 = 0 OR version < $6)
		ORDER BY version DESC LIMIT $7`,
		[]any{sc.OrgID, ns, key, string(sl.Level), sl.ScopeID, before, limit}, func(r pgx.Rows) error {
			var v KVVersion
			var value []byte
			var user, agent, session *string
			var restored *int64
			if err := r.Scan(&v.Version, &v.Op, &value, &user, &agent, &session, &v.ExpiresAt, &restored,
				&v.WrittenBy, &v.WrittenAt); err != nil {
				return err
			}
			if value != nil {
				v.Value = value
			}
			v.UserID, v.AgentID, v.SessionID = deref(user), deref(agent), deref(session)
			if restored != nil {
				v.RestoredFrom = *restored
			}
			if v.ExpiresAt != nil {
				t := v.ExpiresAt.UTC()
				v.ExpiresAt = &t
			}
			v.WrittenAt = v.WrittenAt.UTC()
			out = append(out, v)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 && before == 0 {
		return nil, strata.ErrNotFound
	}
	return out, nil
}

// List returns the live entries of a namespace in key order after key `after` (a cursor:
// the previous page's last key). Without resolve it lists the one scope level the scope
// names; with resolve it lists, per key, the entry a resolved read would answer (session >
// agent > user > org). It reads on a pooled connection (one round trip; see Get).
func (s *Store) List(ctx context.Context, ns string, sc strata.Scope, resolve bool, after string, limit int) ([]KVEntry, error) {
	if after != "" && !strata.ValidID(after) {
		return nil, strata.Invalid("cursor", "must be a next_cursor this endpoint returned")
	}
	return s.ListOn(ctx, nil, ns, sc, resolve, after, limit)
}

// ParseIfNoneMatch reads a write's create-only precondition: "" (none) or "*" (create
// only: a conflict when a live entry exists at the scope).
func ParseIfNoneMatch(v string) (bool, error) {
	switch strings.TrimSpace(v) {
	case "":
		return false, nil
	case "*":
		return true, nil
	}
	return false, strata.Malformed("If-None-Match", `only "*" (create only) is supported`)
}

// ListOn is List on db, a transaction already bound to sc's org (nil: a pooled connection
// of the store's own, as List).
func (s *Store) ListOn(ctx context.Context, db pg.DBTX, ns string, sc strata.Scope, resolve bool, after string, limit int) ([]KVEntry, error) {
	if err := strata.CheckID("namespace", ns, false); err != nil {
		return nil, err
	}
	var out []KVEntry
	sql, args := s.listQuery(ns, sc, resolve, after, limit, nil)
	err := s.readOn(ctx, db, sc.OrgID, sql, args, appendEntries(&out))
	return out, err
}

// appendEntries scans each row into *out.
func appendEntries(out *[]KVEntry) func(pgx.Rows) error {
	return func(r pgx.Rows) error {
		e, err := scanEntry(r)
		if err != nil {
			return err
		}
		*out = append(*out, e.KVEntry)
		return nil
	}
}

// ListResult is filled in when the batch QueueList queued into is read.
type ListResult struct {
	Entries []KVEntry
	Err     error // a bad namespace, or a failure reading the entries
}

// QueueList queues ListOn's query into b, a batch for a transaction already bound to sc's
// org, so a caller that already sends one (context assembly) lists a namespace without a
// round trip of its own. res is filled in as b's results are read. Entries owned by a user
// in hide (restricted subjects, GDPR Art. 18) are left out before the levels are resolved:
// the next level's entry of the key answers instead.
func (s *Store) QueueList(b *pgx.Batch, ns string, sc strata.Scope, resolve bool, after string, limit int, hide []string, res *ListResult) {
	if err := strata.CheckID("namespace", ns, false); err != nil {
		res.Err = err
		return
	}
	sql, args := s.listQuery(ns, sc, resolve, after, limit, hide)
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		res.Err = eachRow(rows, nil, appendEntries(&res.Entries))
		return nil
	})
}

// listQuery is List's statement: per key, the entry of the most specific level the scope
// reads (one level without resolve), leaving out entries owned by the users in hide (none:
// no condition).
func (s *Store) listQuery(ns string, sc strata.Scope, resolve bool, after string, limit int, hide []string) (string, []any) {
	slots := readSlots(sc, !resolve)
	ls, ids := make([]string, len(slots)), make([]string, len(slots))
	for i, sl := range slots {
		ls[i], ids[i] = string(sl.Level), sl.ScopeID
	}
	args := []any{sc.OrgID, ns, ls, ids, s.opt.Now().UTC(), after, limit}
	hidden := ""
	if len(hide) > 0 {
		hidden = " AND (user_id IS NULL OR NOT (user_id = ANY($8)))"
		args = append(args, hide)
	}
	return `SELECT DISTINCT ON (key) ` + entryCols + ` FROM kv_entries
		WHERE org_id = $1 AND namespace = $2
		  AND (level, scope_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))
		  AND NOT deleted AND (expires_at IS NULL OR expires_at > $5) AND key > $6` + hidden + `
		ORDER BY key, CASE level WHEN 'session' THEN 0 WHEN 'agent' THEN 1 WHEN 'user' THEN 2 ELSE 3 END
		LIMIT $7`, args
}
