package semantic

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Retrieval is one memory served to one request.
type Retrieval struct {
	ID        int64     `json:"id"`
	MemoryID  uuid.UUID `json:"memory_id"`
	RequestID string    `json:"request_id"`
	Operation string    `json:"operation" doc:"search or similar_jobs."`
	KeyID     string    `json:"key_id,omitempty"`
	UserID    string    `json:"user_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	JobID     string    `json:"job_id,omitempty"`
	Rank      int       `json:"rank"`
	Score     float64   `json:"score"`
	ServedAt  time.Time `json:"served_at"`
}

// Served describes the request that was served results.
type Served struct {
	Scope     strata.Scope
	RequestID string
	Operation string
	KeyID     string
	JobID     string
}

// RecordServed logs which memories a request was served (one row each, in rank order)
// and counts the access on each (access_count, last_accessed_at: ranking features) that
// no concurrent request holds.
func (s *Store) RecordServed(ctx context.Context, tx pgx.Tx, sv Served, results []Result) error {
	for _, st := range s.ServedStatements(sv, results) {
		if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
			return pg.Interpret(err)
		}
	}
	return nil
}

// Statement is a statement and its arguments, for a caller that sends it in a pipeline of
// its own.
type Statement struct {
	SQL  string
	Args []any
}

// ServedStatements are RecordServed's statements, for a caller that queues them to run
// with its COMMIT (the request path: pg.Session.AtCommit), so the response does not wait a
// round trip for a log it does not read: the retrieval log and the access bump. None when
// nothing was served. A server with an AccessLog queues only ServedLog and hands the
// accesses to the AccessLog after the commit.
func (s *Store) ServedStatements(sv Served, results []Result) []Statement {
	if len(results) == 0 {
		return nil
	}
	now := s.now().UTC()
	return []Statement{s.servedLog(sv, results, now), accessBump(sv.Scope.OrgID, ServedIDs(results), now)}
}

// ServedLog is the retrieval-log statement of RecordServed alone (nil results: ok false).
func (s *Store) ServedLog(sv Served, results []Result) (st Statement, now time.Time, ok bool) {
	if len(results) == 0 {
		return Statement{}, time.Time{}, false
	}
	now = s.now().UTC()
	return s.servedLog(sv, results, now), now, true
}

// ServedIDs are the ids of results, in rank order.
func ServedIDs(results []Result) []uuid.UUID {
	ids := make([]uuid.UUID, len(results))
	for i, r := range results {
		ids[i] = r.Memory.ID
	}
	return ids
}

// CommitHooks is what QueueServed needs of a request's unit of work (pg.Session).
type CommitHooks interface {
	AtCommit(sql string, args ...any)
	AfterCommit(f func())
}

// QueueServed queues the retrieval log of what a request was served to run with the
// request's COMMIT (one round trip fewer on the response path: search, similar jobs,
// context), and counts the accesses: once the request has committed, in access (batched
// writes), or with the COMMIT when access is nil (STRATA_ACCESS_FLUSH=0). Nothing served:
// nothing queued.
func (s *Store) QueueServed(h CommitHooks, access *AccessLog, sv Served, results []Result) {
	if access == nil {
		for _, st := range s.ServedStatements(sv, results) {
			h.AtCommit(st.SQL, st.Args...)
		}
		return
	}
	st, now, ok := s.ServedLog(sv, results)
	if !ok {
		return
	}
	h.AtCommit(st.SQL, st.Args...)
	org, ids := sv.Scope.OrgID, ServedIDs(results)
	h.AfterCommit(func() { access.Add(org, ids, now) })
}

func (s *Store) servedLog(sv Served, results []Result, now time.Time) Statement {
	ids := ServedIDs(results)
	ranks := make([]int32, len(results))
	scores := make([]float64, len(results))
	for i, r := range results {
		ranks[i], scores[i] = int32(i+1), r.Score.Score
	}
	sc := sv.Scope
	return Statement{`INSERT INTO memory_retrievals (org_id, memory_id, request_id, operation, key_id,
		user_id, agent_id, session_id, job_id, rank, score, served_at)
		SELECT $1, m, $4, $5, $6, $7, $8, $9, $10, r, s, $11
		FROM unnest($2::uuid[], $3::int[], $12::float8[]) AS u(m, r, s)`,
		[]any{sc.OrgID, ids, ranks, sv.RequestID, sv.Operation, sv.KeyID, sc.UserID, sc.AgentID, sc.SessionID,
			sv.JobID, now, scores}}
}

// accessBump counts one access of each of ids in the request's own transaction (servers
// without an AccessLog, and RecordServed). It skips rows another request holds (SKIP
// LOCKED): concurrent searches of one scope are served the same memories, and waiting for
// each other's row locks until commit made them a convoy (lock timeouts under load). A
// skipped bump is one access not counted in a ranking feature; the retrieval log records
// every serve.
func accessBump(org string, ids []uuid.UUID, now time.Time) Statement {
	return Statement{`UPDATE memories m SET access_count = m.access_count + 1, last_accessed_at = $3
		FROM (SELECT id FROM memories WHERE org_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE SKIP LOCKED) l
		WHERE m.org_id = $1 AND m.id = l.id`, []any{org, ids, now}}
}

// Retrievals lists the requests that were served memory id, oldest first, after cursor
// (the previous page's last retrieval id; "": from the first).
func (s *Store) Retrievals(ctx context.Context, q pg.DBTX, org string, id uuid.UUID, cursor string, limit int) ([]Retrieval, error) {
	var after int64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil || after < 0 {
			return nil, badCursor()
		}
	}
	rows, err := q.Query(ctx, `SELECT id, memory_id, request_id, operation, key_id, user_id, agent_id, session_id,
		job_id, rank, score, served_at FROM memory_retrievals
		WHERE org_id = $1 AND memory_id = $2 AND id > $3 ORDER BY id LIMIT $4`, org, id, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Retrieval, error) {
		var x Retrieval
		var score float32
		err := r.Scan(&x.ID, &x.MemoryID, &x.RequestID, &x.Operation, &x.KeyID, &x.UserID, &x.AgentID,
			&x.SessionID, &x.JobID, &x.Rank, &score, &x.ServedAt)
		x.Score, x.ServedAt = float64(score), x.ServedAt.UTC()
		return x, err
	})
	return out, pg.Interpret(err)
}
