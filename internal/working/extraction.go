package working

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// AppendMany appends several turns to one session in order, in one transaction: every
// turn is validated before any is written, and when one fails the turns already pushed to
// Redis are taken back, so a failed batch writes nothing. Call Confirm on every result
// after tx commits.
func (s *Store) AppendMany(ctx context.Context, tx pg.DBTX, org, session string, in []NewTurn) ([]*Appended, error) {
	if err := checkIDs(org, session); err != nil {
		return nil, err
	}
	for i, t := range in {
		if err := s.checkTurn(t); err != nil {
			var fe *strata.FieldError
			if errors.As(err, &fe) {
				return nil, prefixed(fe, "messages["+itoa(i)+"]")
			}
			return nil, err
		}
	}
	out := make([]*Appended, 0, len(in))
	for i, t := range in {
		a, err := s.Append(ctx, tx, org, session, t)
		if err != nil {
			k := s.sessionKeys(org, session)
			redone := false
			for _, done := range out {
				redone = redone || done.redone
				entry, _ := encodeEntry(done.Turn)
				_ = dropTurnScript.Run(context.WithoutCancel(ctx), s.rdb, []string{k.meta, k.turns}, entry).Err()
			}
			if redone {
				// The Redis copy was restored on tx, with this batch's first turns, which the
				// rollback takes back: drop it, the next access restores the durable one.
				_ = s.rdb.Del(context.WithoutCancel(ctx), k.meta, k.turns).Err()
			}
			var fe *strata.FieldError
			if errors.As(err, &fe) {
				return nil, prefixed(fe, "messages["+itoa(i)+"]")
			}
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// prefixed puts a field error under prefix ("messages[2]" + "role" → "messages[2].role").
func prefixed(fe *strata.FieldError, prefix string) error {
	c := *fe
	c.Field = prefix + "." + fe.Field
	return &c
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// WrittenTurn is a durable turn with the API key that appended it ("" for turns written
// before that was recorded).
type WrittenTurn struct {
	Turn
	WrittenBy string
}

// SessionInfo is what extraction needs of a session: its scope, its newest turn and when
// it was last written.
type SessionInfo struct {
	UserID, AgentID string
	TurnSeq         int64
	UpdatedAt       time.Time
}

// Session reads the durable session row (strata.ErrNotFound when there is none or it was
// deleted). forUpdate locks it until tx ends, which serialises with appends (they write the
// same row first).
func (s *Store) Session(ctx context.Context, db pg.DBTX, org, session string, forUpdate bool) (SessionInfo, error) {
	if err := checkIDs(org, session); err != nil {
		return SessionInfo{}, err
	}
	q := `SELECT coalesce(user_id, ''), coalesce(agent_id, ''), turn_seq, updated_at FROM working_sessions
		WHERE org_id = $1 AND session_id = $2 AND deleted_at IS NULL`
	if forUpdate {
		q += ` FOR UPDATE`
	}
	var si SessionInfo
	err := db.QueryRow(ctx, q, org, session).Scan(&si.UserID, &si.AgentID, &si.TurnSeq, &si.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, strata.ErrNotFound
	}
	si.UpdatedAt = si.UpdatedAt.UTC()
	return si, pg.Interpret(err)
}

// TurnsAfter returns up to limit durable turns of the session with seq > after, oldest
// first, with who wrote each.
func (s *Store) TurnsAfter(ctx context.Context, db pg.DBTX, org, session string, after int64, limit int) ([]WrittenTurn, error) {
	return s.writtenTurns(ctx, db, `SELECT seq, role, content, metadata::text, created_at, coalesce(written_by, '')
		FROM working_turns WHERE org_id = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`,
		org, session, after, limit)
}

// TurnsBySeq returns the durable turns of the session with the given seqs (those that still
// exist), oldest first.
func (s *Store) TurnsBySeq(ctx context.Context, db pg.DBTX, org, session string, seqs []int64) ([]WrittenTurn, error) {
	return s.writtenTurns(ctx, db, `SELECT seq, role, content, metadata::text, created_at, coalesce(written_by, '')
		FROM working_turns WHERE org_id = $1 AND session_id = $2 AND seq = ANY($3) ORDER BY seq`,
		org, session, seqs)
}

func (s *Store) writtenTurns(ctx context.Context, db pg.DBTX, q string, args ...any) ([]WrittenTurn, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []WrittenTurn
	for rows.Next() {
		var t WrittenTurn
		var md *string
		if err := rows.Scan(&t.Seq, &t.Role, &t.Content, &md, &t.CreatedAt, &t.WrittenBy); err != nil {
			return nil, pg.Interpret(err)
		}
		if md != nil {
			t.Metadata = []byte(*md)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		out = append(out, t)
	}
	return out, pg.Interpret(rows.Err())
}
