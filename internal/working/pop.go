package working

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Popped is a turn Pop removed from the durable log. Invalidate must run after the
// transaction commits: it drops the session's Redis copy, so the next access restores the
// buffer from Postgres without the turn (a rolled-back pop left both copies as they were).
// One window remains: a reader that restores the session from Postgres, having read it
// before the pop committed, and writes Redis after Invalidate, brings the popped turn back
// into the buffer (not into the log) until the session's next restore. Writers of a
// session are expected to be one client (the Agents SDK's), which pops between its own
// calls; a pop concurrent with another client's reads of the same session can see it.
type Popped struct {
	Turn  Turn
	store *Store
	org   string
	sess  string
}

// Invalidate drops the session's Redis copy (state and buffer, both durable in Postgres).
func (p *Popped) Invalidate(ctx context.Context) error {
	k := p.store.sessionKeys(p.org, p.sess)
	return redisErr("invalidating a popped session", p.store.rdb.Del(ctx, k.meta, k.turns).Err())
}

// Pop removes the session's newest turn from the durable log in tx and answers it (the
// OpenAI Agents SDK's popItem; a turn written by mistake). The session row is locked
// first, so a pop serialises with appends (each persists its turn under that row's lock
// in the request's transaction, so every acknowledged turn is in the log). Seqs are not
// reused. A session that does not exist, was deleted or has no turn is strata.ErrNotFound.
func (s *Store) Pop(ctx context.Context, tx pg.DBTX, org, session string) (*Popped, error) {
	if err := checkIDs(org, session); err != nil {
		return nil, err
	}
	var deleted bool
	if err := tx.QueryRow(ctx, `SELECT deleted_at IS NOT NULL FROM working_sessions
		WHERE org_id = $1 AND session_id = $2 FOR UPDATE`, org, session).Scan(&deleted); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, strata.ErrNotFound
		}
		return nil, pg.Interpret(err)
	}
	if deleted {
		return nil, strata.ErrNotFound
	}
	rows, err := tx.Query(ctx, `DELETE FROM working_turns WHERE org_id = $1 AND session_id = $2 AND seq = (
			SELECT max(seq) FROM working_turns WHERE org_id = $1 AND session_id = $2)
		RETURNING seq, role, content, metadata::text, created_at`, org, session)
	if err != nil {
		return nil, pg.Interpret(fmt.Errorf("popping a turn of session %s: %w", session, err))
	}
	turns, err := collectTurns(rows)
	if err != nil {
		return nil, err
	}
	if len(turns) == 0 {
		return nil, strata.ErrNotFound
	}
	return &Popped{Turn: turns[0], store: s, org: org, sess: session}, nil
}
