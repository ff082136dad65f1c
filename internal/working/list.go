package working

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// SessionSummary is one session of a list: its scope, turn count and times (from the
// durable copy; the state document is read with Get).
type SessionSummary struct {
	SessionID string    `json:"session_id"`
	UserID    string    `json:"user_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	Version   int64     `json:"version" doc:"The state document's version (0: no state written)."`
	Turns     int64     `json:"turns" doc:"The newest turn's seq: how many turns the session has had."`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// SessionCursor is the keyset cursor after s (created_at, session_id; newest first).
func SessionCursor(s SessionSummary) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(s.CreatedAt.UnixMicro(), 10) + "_" + s.SessionID))
}

// ListSessions pages through the org's live sessions (user "": every user's), newest
// first by creation, then session id. A cursor this list did not give out is a field error
// on "cursor".
func (s *Store) ListSessions(ctx context.Context, db pg.DBTX, org, user, cursor string, limit int) ([]SessionSummary, error) {
	if err := strata.CheckID("user_id", user, true); err != nil {
		return nil, err
	}
	ts, after := time.Unix(1<<40, 0), ""
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		t, id, ok := strings.Cut(string(raw), "_")
		us, perr := strconv.ParseInt(t, 10, 64)
		if err != nil || !ok || perr != nil || !strata.ValidID(id) {
			return nil, strata.Invalid("cursor", "is not a cursor this list gave out")
		}
		ts, after = time.UnixMicro(us).UTC(), id
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, `SELECT session_id, coalesce(user_id, ''), coalesce(agent_id, ''), version, turn_seq,
			created_at, updated_at, expires_at
		FROM working_sessions WHERE org_id = $1 AND deleted_at IS NULL AND expires_at > $2
		  AND ($3 = '' OR user_id = $3) AND (created_at, session_id) < ($4, $5)
		ORDER BY created_at DESC, session_id DESC LIMIT $6`, org, s.opt.Now(), user, ts, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionSummary, error) {
		var x SessionSummary
		err := r.Scan(&x.SessionID, &x.UserID, &x.AgentID, &x.Version, &x.Turns, &x.CreatedAt, &x.UpdatedAt, &x.ExpiresAt)
		x.CreatedAt, x.UpdatedAt, x.ExpiresAt = x.CreatedAt.UTC(), x.UpdatedAt.UTC(), x.ExpiresAt.UTC()
		return x, err
	})
	if out == nil {
		out = []SessionSummary{}
	}
	return out, pg.Interpret(err)
}

// LongSession is a session whose turn count is past a threshold (rolling summaries).
type LongSession struct {
	SessionID string
	UserID    string
	TurnSeq   int64
}

// LongSessions lists up to limit of org's live sessions with more than minTurns turns that
// were written at or after since, by session id after after.
func (s *Store) LongSessions(ctx context.Context, db pg.DBTX, org string, minTurns int64, since time.Time, after string, limit int) ([]LongSession, error) {
	rows, err := db.Query(ctx, `SELECT session_id, coalesce(user_id, ''), turn_seq FROM working_sessions
		WHERE org_id = $1 AND deleted_at IS NULL AND turn_seq > $2 AND updated_at >= $3 AND session_id > $4
		ORDER BY session_id LIMIT $5`, org, minTurns, since, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LongSession, error) {
		var l LongSession
		return l, r.Scan(&l.SessionID, &l.UserID, &l.TurnSeq)
	})
	return out, pg.Interpret(err)
}
