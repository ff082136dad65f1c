package working

import (
	"context"
	"encoding/json"
	"time"

	"github.com/strata-mem/strata/internal/pg"
)

// SessionUser returns the data subject a session belongs to ("" when none, or when the
// session does not exist): the live copy's user when Redis has the session, else the
// durable row's. Restriction checks (GDPR Art. 18) use it on read paths that do not
// otherwise load the session's scope.
func (s *Store) SessionUser(ctx context.Context, db pg.DBTX, org, session string) (string, error) {
	if err := checkIDs(org, session); err != nil {
		return "", err
	}
	uid, err := s.rdb.HGet(ctx, s.sessionKeys(org, session).meta, "uid").Result()
	if err == nil {
		return uid, nil
	}
	// Not in Redis (or Redis unreachable): the durable copy answers, as reads do.
	r, err := s.durable(ctx, db, org, session)
	if err != nil {
		return "", err
	}
	return r.uid, nil
}

// ExportSession is one session of a data subject, without its turns (StreamUserTurns
// streams those).
type ExportSession struct {
	SessionID string          `json:"session_id"`
	AgentID   string          `json:"agent_id,omitempty"`
	State     json.RawMessage `json:"state,omitempty"`
	Version   int64           `json:"version"`
	Source    string          `json:"source" doc:"redis (the live copy) or postgres (the durable copy)."`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// StreamUserSessions calls emit for each session of user in org, with its current state
// (Redis when it has the session, else the durable copy). It never scans the keyspace.
func (s *Store) StreamUserSessions(ctx context.Context, db pg.DBTX, org, user string, emit func(ExportSession) error) error {
	sessions, err := s.SessionsOfUser(ctx, db, org, user)
	if err != nil {
		return err
	}
	for _, sess := range sessions {
		x := ExportSession{SessionID: sess}
		f, err := s.rdb.HMGet(ctx, s.sessionKeys(org, sess).meta, "uid", "aid", "doc", "v", "ca", "ua").Result()
		if err != nil {
			return redisErr("exporting session", err)
		}
		if uid, _ := f[0].(string); uid == user {
			x.AgentID, _ = f[1].(string)
			if d, ok := f[2].(string); ok {
				x.State = json.RawMessage(d)
			}
			x.Version, x.CreatedAt, x.UpdatedAt, x.Source = replyInt(f[3]), msTime(replyInt(f[4])), msTime(replyInt(f[5])), "redis"
		} else if r, err := s.durable(ctx, db, org, sess); err != nil {
			return err
		} else if r.found && r.uid == user {
			x.AgentID, x.State, x.Version, x.CreatedAt, x.UpdatedAt = r.aid, r.state, r.version, r.created.UTC(), r.updated.UTC()
			x.Source = "postgres"
		} else {
			continue // only turns of this session name the user; they are streamed on their own
		}
		if err := emit(x); err != nil {
			return err
		}
	}
	return nil
}

// StreamUserTurns calls emit for every durable turn recorded for user in org (every turn is
// written through to Postgres before it is acknowledged), in (session, seq) order, reading
// rows as they arrive: memory stays bounded however many turns there are.
func StreamUserTurns(ctx context.Context, db pg.DBTX, org, user string, emit func(session string, t Turn) error) error {
	rows, err := db.Query(ctx, `SELECT session_id, seq, role, content, metadata::text, created_at FROM working_turns
		WHERE org_id = $1 AND user_id = $2 ORDER BY session_id, seq`, org, user)
	if err != nil {
		return pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var sess string
		var t Turn
		var md *string
		if err := rows.Scan(&sess, &t.Seq, &t.Role, &t.Content, &md, &t.CreatedAt); err != nil {
			return pg.Interpret(err)
		}
		if md != nil {
			t.Metadata = json.RawMessage(*md)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		if err := emit(sess, t); err != nil {
			return err
		}
	}
	return pg.Interpret(rows.Err())
}
