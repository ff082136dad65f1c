package working

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/pg"
)

// SessionsOfUser returns the ids of org's sessions that hold data of user: those in the
// user's Redis index set (verified, stale entries pruned) and those whose durable row or
// turns name the user. It never scans the keyspace.
func (s *Store) SessionsOfUser(ctx context.Context, db pg.DBTX, org, user string) ([]string, error) {
	idx := s.userIndexKey(org, user)
	live, err := s.verifiedMembers(ctx, idx, org, func(uid string) bool { return uid == user })
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT session_id FROM working_sessions WHERE org_id = $1 AND user_id = $2
		UNION SELECT DISTINCT session_id FROM working_turns WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	durable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return union(live, durable), nil
}

// SessionsOfOrg returns the ids of every session of org, from the org's Redis index set
// (verified) and the durable table (rows not deleted).
func (s *Store) SessionsOfOrg(ctx context.Context, db pg.DBTX, org string) ([]string, error) {
	live, err := s.verifiedMembers(ctx, s.orgIndexKey(org), org, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT session_id FROM working_sessions WHERE org_id = $1 AND deleted_at IS NULL`, org)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	durable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return union(live, durable), nil
}

// verifiedMembers reads an index set and keeps the sessions whose meta exists and whose
// user_id satisfies keep; the others are removed from the set.
func (s *Store) verifiedMembers(ctx context.Context, idx, org string, keep func(uid string) bool) ([]string, error) {
	members, err := s.rdb.SMembers(ctx, idx).Result()
	if err != nil {
		return nil, redisErr("reading index", err)
	}
	if len(members) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(members))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			cmds[i] = p.HMGet(ctx, s.sessionKeys(org, m).meta, "v", "uid")
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, redisErr("verifying index", err)
	}
	var out, stale []string
	for i, c := range cmds {
		vals := c.Val()
		uid, _ := vals[1].(string)
		if vals[0] != nil && keep(uid) {
			out = append(out, members[i])
		} else {
			stale = append(stale, members[i])
		}
	}
	if len(stale) > 0 {
		_ = s.rdb.SRem(ctx, idx, stale).Err()
	}
	return out, nil
}

func union(a, b []string) []string {
	set := map[string]bool{}
	for _, x := range a {
		set[x] = true
	}
	for _, x := range b {
		set[x] = true
	}
	out := make([]string, 0, len(set))
	for x := range set {
		out = append(out, x)
	}
	sort.Strings(out)
	return out
}

// Erasure counts what EraseUser removed.
type Erasure struct {
	Sessions  int   `json:"sessions"`   // sessions that held the subject's data
	RedisKeys int64 `json:"redis_keys"` // Redis keys deleted
	States    int64 `json:"states"`     // durable session rows cleared (kept as tombstones without the subject)
	Turns     int64 `json:"turns"`      // durable turns deleted
}

// EraseUser removes everything working memory holds about user in org: the Redis copies
// of the user's sessions, the user's index set, the durable state rows (reduced to
// tombstones that name no one, whose version moves one up with a fresh lineage token, so
// that a write built on a Redis copy from before the erasure — a failover or a restored
// backup — is refused by the durable upsert) and every turn the user's sessions recorded. The Postgres
// half runs on tx; run it with the GDPR request's transaction.
func (s *Store) EraseUser(ctx context.Context, tx pg.DBTX, org, user string) (Erasure, error) {
	var e Erasure
	sessions, err := s.SessionsOfUser(ctx, tx, org, user)
	if err != nil {
		return e, err
	}
	e.Sessions = len(sessions)
	for _, sess := range sessions {
		k := s.sessionKeys(org, sess)
		n, err := eraseIfUserScript.Run(ctx, s.rdb, []string{k.meta, k.turns}, user).Int64()
		if err != nil {
			return e, redisErr("erasing session", err)
		}
		e.RedisKeys += n
	}
	n, err := s.rdb.Del(ctx, s.userIndexKey(org, user)).Result()
	if err != nil {
		return e, redisErr("erasing index", err)
	}
	e.RedisKeys += n
	tag, err := tx.Exec(ctx, `UPDATE working_sessions SET state = NULL, user_id = NULL, agent_id = NULL,
			deleted_at = coalesce(deleted_at, $3), updated_at = $3, `+tombstoneHeadSQL+`
		WHERE org_id = $1 AND user_id = $2`, org, user, s.opt.Now())
	if err != nil {
		return e, pg.Interpret(fmt.Errorf("erasing durable sessions: %w", err))
	}
	e.States = tag.RowsAffected()
	tag, err = tx.Exec(ctx, `DELETE FROM working_turns WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return e, pg.Interpret(fmt.Errorf("erasing durable turns: %w", err))
	}
	e.Turns = tag.RowsAffected()
	return e, nil
}

// SessionExport is one session's data about a subject.
type SessionExport struct {
	SessionID string          `json:"session_id"`
	UserID    string          `json:"user_id"`
	AgentID   string          `json:"agent_id,omitempty"`
	State     json.RawMessage `json:"state,omitempty"`
	Version   int64           `json:"version"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Turns     []Turn          `json:"turns"`
}

// ExportUser returns everything working memory holds about user in org: for each of the
// user's sessions, the current state (Redis when it has the session, else the durable
// copy) and every turn recorded under the user.
func (s *Store) ExportUser(ctx context.Context, db pg.DBTX, org, user string) ([]SessionExport, error) {
	sessions, err := s.SessionsOfUser(ctx, db, org, user)
	if err != nil {
		return nil, err
	}
	out := []SessionExport{}
	for _, sess := range sessions {
		x := SessionExport{SessionID: sess, UserID: user, Turns: []Turn{}}
		k := s.sessionKeys(org, sess)
		f, err := s.rdb.HMGet(ctx, k.meta, "uid", "aid", "doc", "v", "ca", "ua").Result()
		if err != nil {
			return nil, redisErr("exporting session", err)
		}
		if uid, _ := f[0].(string); uid == user {
			x.AgentID, _ = f[1].(string)
			if d, ok := f[2].(string); ok {
				x.State = json.RawMessage(d)
			}
			x.Version, x.CreatedAt, x.UpdatedAt = replyInt(f[3]), msTime(replyInt(f[4])), msTime(replyInt(f[5]))
		} else if r, err := s.durable(ctx, db, org, sess); err != nil {
			return nil, err
		} else if r.found && r.uid == user {
			x.AgentID, x.State, x.Version, x.CreatedAt, x.UpdatedAt = r.aid, r.state, r.version, r.created.UTC(), r.updated.UTC()
		}
		rows, err := db.Query(ctx, `SELECT seq, role, content, metadata::text, created_at FROM working_turns
			WHERE org_id = $1 AND session_id = $2 AND user_id = $3 ORDER BY seq`, org, sess, user)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		if x.Turns, err = collectTurns(rows); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}
