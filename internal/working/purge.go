package working

// Purging idle sessions, for the eviction worker's working-state TTL.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/pg"
)

// tombstoneHeadSQL is the SET clause that moves a row being reduced to a tombstone (by
// an erasure or a purge, which drop the Redis copy) to a new head: the next version, with a
// fresh random token as its whole lineage. restore loads both into the next incarnation,
// whose first write descends from them; a write built on a copy from before (Redis rolled
// back to it) claims a version the tombstone holds, under another token, and persistSQL
// refuses it. Only Postgres is touched, so the token is made in SQL.
const tombstoneHeadSQL = `version = version + 1,
	write_lineage = jsonb_build_object((version + 1)::text, replace(gen_random_uuid()::text, '-', ''))`

// lastActiveSQL is when a session was last written or read: reads slide expires_at (the
// durable copy follows the Redis TTL), so expires_at − ttl is the last read or write.
const lastActiveSQL = `greatest(updated_at, expires_at - ttl_ms * interval '1 millisecond')`

// IdleSessions lists org's live sessions (not deleted) whose last read or write is before
// cutoff, least recently active first, leaving out sessions of restricted data subjects
// (GDPR Art. 18: kept until the restriction is lifted).
func (s *Store) IdleSessions(ctx context.Context, q pg.DBTX, org string, cutoff time.Time, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT session_id FROM working_sessions w
		WHERE org_id = $1 AND deleted_at IS NULL AND `+lastActiveSQL+` < $2
		  AND NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = w.org_id AND r.user_id = w.user_id)
		ORDER BY `+lastActiveSQL+`, session_id LIMIT $3`, org, cutoff, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, pg.Interpret(err)
}

// PurgedSession is a session PurgeIdle removed.
type PurgedSession struct {
	SessionID string
	UserID    string
	Turns     int64
}

// PurgeIdle removes the durable copy of the given sessions that are still idle since
// cutoff (re-checked under the row lock, so a session written meanwhile survives): the
// state is cleared to a tombstone that keeps its turn counter and moves its version one up
// with a fresh lineage token (tombstoneHeadSQL), and its turn log is deleted. Call DropLive with the result after the transaction commits.
func (s *Store) PurgeIdle(ctx context.Context, tx pg.DBTX, org string, sessions []string, cutoff time.Time) ([]PurgedSession, error) {
	if len(sessions) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `UPDATE working_sessions w SET state = NULL, user_id = NULL, agent_id = NULL,
			deleted_at = $4, updated_at = $4, `+tombstoneHeadSQL+`
		FROM (SELECT session_id, coalesce(user_id, '') AS uid FROM working_sessions
		      WHERE org_id = $1 AND session_id = ANY($2::text[]) AND deleted_at IS NULL AND `+lastActiveSQL+` < $3
		      FOR UPDATE) old
		WHERE w.org_id = $1 AND w.session_id = old.session_id
		RETURNING w.session_id, old.uid`, org, sessions, cutoff, s.opt.Now().UTC())
	if err != nil {
		return nil, pg.Interpret(fmt.Errorf("purging idle sessions: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PurgedSession, error) {
		var p PurgedSession
		err := r.Scan(&p.SessionID, &p.UserID)
		return p, err
	})
	if err != nil {
		return nil, pg.Interpret(err)
	}
	for i := range out {
		tag, err := tx.Exec(ctx, `DELETE FROM working_turns WHERE org_id = $1 AND session_id = $2`, org, out[i].SessionID)
		if err != nil {
			return nil, pg.Interpret(fmt.Errorf("purging turns: %w", err))
		}
		out[i].Turns = tag.RowsAffected()
	}
	return out, nil
}

// DropLive deletes the Redis copies (state, turn buffer, index entries) of purged
// sessions. Run it after the purge committed: if it fails, the live copies still expire
// by their own TTL, and a session read before that is served from Redis as it was.
func (s *Store) DropLive(ctx context.Context, org string, purged []PurgedSession) error {
	if len(purged) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, x := range purged {
			k := s.sessionKeys(org, x.SessionID)
			p.Del(ctx, k.meta, k.turns)
			p.SRem(ctx, s.orgIndexKey(org), x.SessionID)
			if x.UserID != "" {
				p.SRem(ctx, s.userIndexKey(org, x.UserID), x.SessionID)
			}
		}
		return nil
	})
	if err != nil {
		return redisErr("dropping purged sessions", err)
	}
	return nil
}
