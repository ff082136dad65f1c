package working

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Roles a turn may have.
var Roles = []string{"user", "assistant", "system", "tool"}

// Turn is one message of a session's conversation.
type Turn struct {
	Seq       int64           `json:"seq" doc:"Position in the session, assigned by the server: unique and increasing."`
	Role      string          `json:"role" enum:"user,assistant,system,tool"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata,omitempty" doc:"Free-form JSON object."`
	CreatedAt time.Time       `json:"created_at"`
}

// NewTurn is a turn to append, with the session scope and TTL of the write.
type NewTurn struct {
	Role     string
	Content  string
	Metadata json.RawMessage
	UserID   string
	AgentID  string
	TTL      time.Duration
	KeyID    string // the API key appending it (working_turns.written_by; extraction's provenance)
}

// entryBody is what the Redis list stores after "<seq>\n".
type entryBody struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

func encodeBody(t Turn) (string, error) {
	b, err := json.Marshal(entryBody{Role: t.Role, Content: t.Content, Metadata: t.Metadata, CreatedAt: t.CreatedAt})
	return string(b), err
}

func encodeEntry(t Turn) (string, error) {
	b, err := encodeBody(t)
	return strconv.FormatInt(t.Seq, 10) + "\n" + b, err
}

func decodeEntry(e string) (Turn, error) {
	head, body, ok := strings.Cut(e, "\n")
	seq, err := strconv.ParseInt(head, 10, 64)
	if !ok || err != nil {
		return Turn{}, fmt.Errorf("working: malformed buffer entry %.40q", e)
	}
	var b entryBody
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		return Turn{}, fmt.Errorf("working: malformed buffer entry %d: %w", seq, err)
	}
	return Turn{Seq: seq, Role: b.Role, Content: b.Content, Metadata: b.Metadata, CreatedAt: b.CreatedAt.UTC()}, nil
}

// Appended is the result of Append. Call Confirm once the request's transaction has
// committed (pg.Session.AfterCommit): it marks the turns durable and trims the buffer.
type Appended struct {
	Turn      Turn
	ExpiresAt time.Time
	UserID    string // the session's user and agent (fixed when it was created)
	AgentID   string
	store     *Store
	org, sess string
	durable   int64 // every turn <= durable is in Postgres once the transaction commits
	trimTo    int64 // overflow through this seq may leave Redis once committed
	redone    bool  // the Redis copy was dropped and restored (on the transaction) to append it
}

// Confirm records the commit in Redis and trims the spilled overflow. If it never runs
// (crash), the next append re-spills the same turns idempotently and trims then.
func (a *Appended) Confirm(ctx context.Context) error {
	if a.store.beforeConfirm != nil {
		if err := a.store.beforeConfirm(); err != nil {
			return err
		}
	}
	k := a.store.sessionKeys(a.org, a.sess)
	return redisErr("confirming turns", confirmScript.Run(ctx, a.store.rdb, []string{k.meta, k.turns}, a.durable, a.trimTo).Err())
}

func (s *Store) checkTurn(t NewTurn) error {
	ok := false
	for _, r := range Roles {
		ok = ok || t.Role == r
	}
	if !ok {
		return strata.Invalid("role", "must be one of %s", strings.Join(Roles, ", "))
	}
	if err := strata.CheckText("content", t.Content); err != nil {
		return err
	}
	if len(t.Content) > s.opt.MaxStateBytes {
		return strata.TooLarge("content", "is %d bytes; the limit is %d (the server's STRATA_MAX_STATE_BYTES): split it into several turns", len(t.Content), s.opt.MaxStateBytes)
	}
	if len(bytes.TrimSpace(t.Metadata)) > 0 && string(bytes.TrimSpace(t.Metadata)) != "null" {
		if _, err := s.checkDoc("metadata", t.Metadata); err != nil {
			return err
		}
	}
	return s.checkTTL(t.TTL)
}

// Append adds a turn to the session's buffer (creating the session if needed) and writes
// it, with any overflow and any turn not yet confirmed durable, to working_turns on tx.
// The caller must call Confirm after tx commits.
func (s *Store) Append(ctx context.Context, tx pg.DBTX, org, session string, in NewTurn) (*Appended, error) {
	if err := checkIDs(org, session); err != nil {
		return nil, err
	}
	if err := s.checkTurn(in); err != nil {
		return nil, err
	}
	var md json.RawMessage
	if m := bytes.TrimSpace(in.Metadata); len(m) > 0 && string(m) != "null" {
		md, _ = s.checkDoc("metadata", m)
	}
	redone := false
	for range maxAppendAttempts {
		now := s.opt.Now()
		t := Turn{Role: in.Role, Content: in.Content, Metadata: md, CreatedAt: now.UTC().Truncate(time.Millisecond)}
		body, err := encodeBody(t)
		if err != nil {
			return nil, err
		}
		res, err := s.runScript(ctx, appendScript, org, session, in.UserID,
			s.opt.BufferSize, in.UserID, in.AgentID, in.TTL.Milliseconds(), now.UnixMilli(), body)
		if err != nil {
			return nil, err
		}
		switch replyStr(res[0]) {
		case "MISSING":
			if err := s.restore(ctx, tx, org, session, true); err != nil {
				return nil, err
			}
			continue
		case "SCOPE":
			return nil, scopeConflict(replyStr(res[1]))
		case "OK":
		default:
			return nil, fmt.Errorf("working: unexpected append reply %v", res)
		}
		t.Seq = replyInt(res[1])
		uid, aid := replyStr(res[2]), replyStr(res[3])
		ttl := time.Duration(replyInt(res[4])) * time.Millisecond
		ca := replyInt(res[5])
		spill := map[int64]Turn{}
		var trimTo int64
		over, _ := res[6].([]any)
		pend, _ := res[7].([]any)
		for i, list := range [][]any{over, pend} {
			for _, e := range list {
				es, _ := e.(string)
				tt, err := decodeEntry(es)
				if err != nil {
					return nil, err
				}
				spill[tt.Seq] = tt
				if i == 0 && tt.Seq > trimTo {
					trimTo = tt.Seq
				}
			}
		}
		spill[t.Seq] = t
		if len(res) < 10 {
			return nil, fmt.Errorf("working: unexpected append reply %v", res)
		}
		written := replyInt(res[8]) == 0
		lineage := lineageJSON(replyStr(res[9]))
		a := &Appended{Turn: t, ExpiresAt: now.Add(ttl).UTC().Truncate(time.Millisecond), UserID: uid, AgentID: aid,
			store: s, org: org, sess: session, durable: t.Seq, trimTo: trimTo}
		stored, err := s.persistTurns(ctx, tx, org, session, uid, aid, ttl, ca, now, spill, t.Seq, in.KeyID, written, lineage)
		k := s.sessionKeys(org, session)
		if err != nil {
			if redone { // the copy was restored on tx, whose rollback takes back what it read
				_ = s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()
			} else {
				entry, _ := encodeEntry(t)
				_ = dropTurnScript.Run(context.WithoutCancel(ctx), s.rdb, []string{k.meta, k.turns}, entry).Err()
			}
			return nil, err
		}
		if !stored {
			// Postgres already holds a turn under the seq Redis gave this one: the Redis copy
			// was behind the durable log (it lost turns, or was restored while another
			// append was committing); or the Redis copy is from before a delete or erasure
			// Postgres holds. Drop it and append again: the restore reads the durable
			// counter (and tombstone) on tx, which holds the session row's lock, so the next
			// seq is free.
			if err := redisErr("dropping a stale session", s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()); err != nil {
				return nil, err
			}
			redone = true
			continue
		}
		a.redone = redone
		return a, nil
	}
	if redone {
		k := s.sessionKeys(org, session)
		_ = s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()
		return nil, strata.Conflict("the session's turns kept changing under this append; retry", nil)
	}
	return nil, fmt.Errorf("working: session %s kept vanishing from Redis while appending", session)
}

// maxAppendAttempts bounds Append's retries (the session vanishing from Redis, or a seq
// Postgres already holds).
const maxAppendAttempts = 7

// persistTurns is the Postgres half of an append: the session row (scope, expiry, turn
// counter) first — it serialises appends to one session — then the turns, idempotently.
// stored reports whether the appended turn (newSeq) itself was inserted: false when
// Postgres already held that seq (another turn's), and then it must not be acknowledged.
// It is false too, with nothing written, when the durable row is a tombstone the Redis
// copy does not descend from: the copy was written (written) and its write lineage does
// not contain the tombstone's head, so it is a copy from before a delete, erasure or purge
// (Redis rolled back), and appending to it would bring the deleted session, and its
// subject, back. A tombstone whose head is unknown (previous release) is not checked.
func (s *Store) persistTurns(ctx context.Context, tx pg.DBTX, org, session, uid, aid string, ttl time.Duration,
	ca int64, now time.Time, spill map[int64]Turn, newSeq int64, keyID string, written bool, lineage string) (stored bool, err error) {
	if s.afterRedisWrite != nil {
		if err := s.afterRedisWrite(); err != nil {
			return false, err
		}
	}
	seqs := make([]int64, 0, len(spill))
	for q := range spill {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	roles := make([]string, len(seqs))
	contents := make([]string, len(seqs))
	mds := make([]*string, len(seqs))
	created := make([]time.Time, len(seqs))
	for i, q := range seqs {
		t := spill[q]
		roles[i], contents[i], created[i] = t.Role, t.Content, t.CreatedAt
		if len(t.Metadata) > 0 {
			m := string(t.Metadata)
			mds[i] = &m
		}
	}
	var one int
	err = tx.QueryRow(ctx, `INSERT INTO working_sessions AS w (org_id, session_id, user_id, agent_id, version, turn_seq,
			ttl_ms, created_at, updated_at, expires_at)
		VALUES ($1, $2, nullif($3, ''), nullif($4, ''), 0, $5, $6, $7, $8, $9)
		ON CONFLICT (org_id, session_id) DO UPDATE SET user_id = excluded.user_id, agent_id = excluded.agent_id,
			turn_seq = greatest(w.turn_seq, excluded.turn_seq), ttl_ms = excluded.ttl_ms,
			created_at = excluded.created_at,
			updated_at = excluded.updated_at, expires_at = greatest(w.expires_at, excluded.expires_at), deleted_at = NULL
		WHERE w.deleted_at IS NULL OR NOT $10 OR (w.write_lineage -> w.version::text) IS NULL
			OR $11::jsonb @> jsonb_build_object(w.version::text, w.write_lineage -> w.version::text)
		RETURNING 1`,
		org, session, uid, aid, seqs[len(seqs)-1], ttl.Milliseconds(), msTime(ca), now, now.Add(ttl), written, lineage).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // a copy from before the tombstone: append again on a fresh one
	}
	if err != nil {
		return false, pg.Interpret(fmt.Errorf("writing durable session %s: %w", session, err))
	}
	// The turns go in one statement; it answers whether the appended one was inserted (the
	// others are re-spills that may well be there already).
	err = tx.QueryRow(ctx, `WITH ins AS (INSERT INTO working_turns (org_id, session_id, seq, user_id, role, content, metadata, created_at, written_by)
		SELECT $1, $2, u.seq, nullif($3, ''), u.role, u.content, u.metadata::jsonb, u.created_at,
			CASE WHEN u.seq = $9 THEN nullif($10, '') END
		FROM unnest($4::bigint[], $5::text[], $6::text[], $7::text[], $8::timestamptz[]) AS u(seq, role, content, metadata, created_at)
		ON CONFLICT (org_id, session_id, seq) DO NOTHING
		RETURNING seq)
		SELECT EXISTS (SELECT 1 FROM ins WHERE seq = $9)`,
		org, session, uid, seqs, roles, contents, mds, created, newSeq, keyID).Scan(&stored)
	if err != nil {
		return false, pg.Interpret(fmt.Errorf("spilling turns of session %s: %w", session, err))
	}
	return stored, nil
}

// Buffer is the newest turns of a session.
type Buffer struct {
	Turns     []Turn
	ExpiresAt time.Time
	Restored  bool
}

// Turns returns the session's buffer (the newest BufferSize turns, oldest first), sliding
// its TTL. Like Get, it restores from or falls back to Postgres.
func (s *Store) Turns(ctx context.Context, db pg.DBTX, org, session string) (Buffer, error) {
	if err := checkIDs(org, session); err != nil {
		return Buffer{}, err
	}
	m, turns, err := s.load(ctx, db, org, session, s.opt.BufferSize)
	if err != nil {
		return Buffer{}, err
	}
	if turns == nil {
		turns = []Turn{}
	}
	return Buffer{Turns: turns, ExpiresAt: s.opt.Now().Add(m.ttl).UTC().Truncate(time.Millisecond), Restored: m.restored}, nil
}

// Log pages through the session's durable turn log (every acknowledged turn, including
// those that left the buffer), after seq afterSeq, oldest first. An unknown session is
// strata.ErrNotFound.
func (s *Store) Log(ctx context.Context, db pg.DBTX, org, session string, afterSeq int64, limit int) ([]Turn, error) {
	if err := checkIDs(org, session); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT seq, role, content, metadata::text, created_at FROM working_turns
		WHERE org_id = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, org, session, afterSeq, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	turns, err := collectTurns(rows)
	if err != nil || len(turns) > 0 {
		return turns, err
	}
	r, err := s.durable(ctx, db, org, session)
	if err != nil {
		return nil, err
	}
	if !r.found || r.deleted {
		return nil, strata.ErrNotFound
	}
	return turns, nil
}
