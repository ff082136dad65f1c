package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Checkpoint is one version of a job's task state.
type Checkpoint struct {
	JobID        string          `json:"job_id" doc:"The job it was read for."`
	Version      int64           `json:"version"`
	StoredIn     string          `json:"stored_in" doc:"The job whose history holds this version: the job itself, or for a fork an ancestor (versions up to the fork point are shared, not copied)."`
	Goal         string          `json:"goal"`
	CurrentStep  string          `json:"current_step"`
	Done         json.RawMessage `json:"done" doc:"Items done (a JSON array)."`
	Pending      json.RawMessage `json:"pending" doc:"Items pending (a JSON array)."`
	NextAction   string          `json:"next_action"`
	State        json.RawMessage `json:"state" doc:"Free-form task state (a JSON object)."`
	WorkingState json.RawMessage `json:"working_state,omitempty" doc:"Snapshot of the session's working state when the checkpoint was written."`
	EventSeq     int64           `json:"event_seq" doc:"The job's last episodic event seq when the checkpoint was written."`
	AgentID      string          `json:"agent_id,omitempty"`
	UserID       string          `json:"user_id,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
}

// CheckpointSummary is a checkpoint in a list (without its state documents).
type CheckpointSummary struct {
	Version     int64     `json:"version"`
	StoredIn    string    `json:"stored_in"`
	Goal        string    `json:"goal"`
	CurrentStep string    `json:"current_step"`
	NextAction  string    `json:"next_action"`
	EventSeq    int64     `json:"event_seq"`
	AgentID     string    `json:"agent_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// CheckpointInput is what PUT /v1/jobs/{job}/checkpoint writes.
type CheckpointInput struct {
	Goal         string
	CurrentStep  string
	Done         json.RawMessage // a JSON array; nil: []
	Pending      json.RawMessage // a JSON array; nil: []
	NextAction   string
	State        json.RawMessage // a JSON object; nil: {}
	WorkingState json.RawMessage // any JSON; nil: none
	EventSeq     int64           // the job's episodic last seq now (the caller reads it)
	AgentID      string
	UserID       string
}

// lineageCTE resolves where each checkpoint version of job $2 lives: one row per job on
// the fork chain with the half-open version range (lo, hi] it contributes (hi NULL: no
// bound). A fork contributes versions after its fork point; each ancestor contributes
// versions up to the lowest fork point below it.
//
// Each step reads the parent by key in a lateral subquery: as a join, the generic plan a
// connection built while jobs held a few rows read every job of the org to find the parent
// (or, for a job that is not a fork, to find none), on every resume; see forkwalk_test.go.
const lineageCTE = `WITH RECURSIVE lineage (job_id, parent_job_id, lo, hi, cap, depth) AS (
		SELECT job_id, parent_job_id, coalesce(parent_version, 0), NULL::bigint, parent_version, 0
		FROM jobs WHERE org_id = $1 AND job_id = $2
		UNION ALL
		SELECT p.job_id, p.parent_job_id, coalesce(p.parent_version, 0), l.cap, least(l.cap, p.parent_version), l.depth + 1
		FROM lineage l CROSS JOIN LATERAL (SELECT job_id, parent_job_id, parent_version FROM jobs
			WHERE org_id = $1 AND job_id = l.parent_job_id OFFSET 0) p
		WHERE l.depth < 1000)
	`

const checkpointCols = `c.version, c.job_id, c.goal, c.current_step, c.done, c.pending, c.next_action, c.state,
	c.working_state, c.event_seq, coalesce(c.agent_id, ''), coalesce(c.user_id, ''), c.created_at`

func scanCheckpoint(row pgx.Row, jobID string) (Checkpoint, error) {
	c := Checkpoint{JobID: jobID}
	err := row.Scan(&c.Version, &c.StoredIn, &c.Goal, &c.CurrentStep, &c.Done, &c.Pending, &c.NextAction, &c.State,
		&c.WorkingState, &c.EventSeq, &c.AgentID, &c.UserID, &c.CreatedAt)
	if err != nil {
		return Checkpoint{}, pg.Interpret(err)
	}
	c.CreatedAt = c.CreatedAt.UTC()
	return c, nil
}

// inLineage is the join of lineage rows to their checkpoint rows.
const inLineage = `FROM lineage l JOIN job_checkpoints c ON c.org_id = $1 AND c.job_id = l.job_id
		AND c.version > l.lo AND (l.hi IS NULL OR c.version <= l.hi)`

// Check refuses text and JSON Postgres cannot store (NUL characters, \u0000) and a state
// that is not a JSON object. PutCheckpoint runs it first; a caller that reads another store
// before PutCheckpoint runs it before that read, so bad input costs no round trip.
func (in CheckpointInput) Check() error {
	for _, f := range []struct{ name, v string }{{"goal", in.Goal}, {"current_step", in.CurrentStep}, {"next_action", in.NextAction}} {
		if err := strata.CheckText(f.name, f.v); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"done", in.Done}, {"pending", in.Pending}, {"state", in.State}, {"working_state", in.WorkingState}} {
		if err := strata.CheckJSON(f.name, f.raw); err != nil {
			return err
		}
	}
	if len(in.State) > 0 && in.State[0] != '{' {
		return strata.Invalid("state", "must be a JSON object")
	}
	return nil
}

func checkArray(field string, raw json.RawMessage) (json.RawMessage, error) {
	raw = orEmpty(raw, "[]")
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, strata.Invalid(field, "must be a JSON array")
	}
	return raw, nil
}

// PutCheckpoint writes the next checkpoint version of a running job. ifMatch, when set,
// must equal the job's latest checkpoint version (0: none yet); otherwise nothing is
// written and the conflict names the current version. Concurrent writers with the same
// ifMatch: exactly one wins (the job row lock serialises them).
func (s *Store) PutCheckpoint(ctx context.Context, db pg.DBTX, org, jobID string, in CheckpointInput, ifMatch *int64) (Checkpoint, error) {
	if err := in.Check(); err != nil {
		return Checkpoint{}, err
	}
	done, err := checkArray("done", in.Done)
	if err != nil {
		return Checkpoint{}, err
	}
	pending, err := checkArray("pending", in.Pending)
	if err != nil {
		return Checkpoint{}, err
	}
	j, err := s.lockRunningJob(ctx, db, org, jobID)
	if err != nil {
		return Checkpoint{}, err
	}
	if ifMatch != nil && *ifMatch != j.CheckpointVersion {
		return Checkpoint{}, strata.Conflict("checkpoint version "+itoa(*ifMatch)+" is stale: job "+jobID+" is at checkpoint version "+
			itoa(j.CheckpointVersion)+"; read it, merge, and write again with If-Match: \""+itoa(j.CheckpointVersion)+"\"",
			map[string]any{"current_version": j.CheckpointVersion})
	}
	now := s.Now()
	v := j.CheckpointVersion + 1
	c, err := scanCheckpoint(db.QueryRow(ctx, `INSERT INTO job_checkpoints AS c (org_id, job_id, version, goal, current_step,
			done, pending, next_action, state, working_state, event_seq, agent_id, user_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8, $9::jsonb, $10::jsonb, $11, $12, $13, $14)
		RETURNING `+checkpointCols,
		org, jobID, v, in.Goal, in.CurrentStep, string(done), string(pending), in.NextAction,
		string(orEmpty(in.State, "{}")), jsonOrNull(in.WorkingState), in.EventSeq, nullable(in.AgentID), nullable(in.UserID), now), jobID)
	if err != nil {
		return Checkpoint{}, err
	}
	if _, err := db.Exec(ctx, `UPDATE jobs SET checkpoint_version = $3, progress_at = greatest(progress_at, $4)
		WHERE org_id = $1 AND job_id = $2`, org, jobID, v, now); err != nil {
		return Checkpoint{}, pg.Interpret(err)
	}
	return c, nil
}

// GetCheckpoint reads one version of a job's checkpoint history (0: the latest), walking up
// a fork's lineage for versions it shares with its parent. ErrNotFound when the job or the
// version does not exist.
func (s *Store) GetCheckpoint(ctx context.Context, db pg.DBTX, org, jobID string, version int64) (Checkpoint, error) {
	q := lineageCTE + `SELECT ` + checkpointCols + ` ` + inLineage + ` WHERE c.version = `
	if version == 0 {
		q += `(SELECT checkpoint_version FROM jobs WHERE org_id = $1 AND job_id = $2)`
		return scanCheckpoint(db.QueryRow(ctx, q, org, jobID), jobID)
	}
	return scanCheckpoint(db.QueryRow(ctx, q+`$3`, org, jobID, version), jobID)
}

// ListCheckpoints lists a job's checkpoint versions after the cursor version (ascending), or
// before it (descending) when desc is set; limit rows at most. The cursor is a next_cursor
// of the previous page ("": from the start); another one is a FieldError for "cursor".
func (s *Store) ListCheckpoints(ctx context.Context, db pg.DBTX, org, jobID, after string, desc bool, limit int) ([]CheckpointSummary, error) {
	var cursor int64
	if after != "" {
		var err error
		if cursor, err = strconv.ParseInt(after, 10, 64); err != nil || cursor < 0 {
			return nil, strata.Invalid("cursor", "must be a next_cursor this endpoint returned")
		}
	}
	if _, err := s.GetJob(ctx, db, org, jobID); err != nil {
		return nil, err
	}
	q := lineageCTE + `SELECT c.version, c.job_id, c.goal, c.current_step, c.next_action, c.event_seq,
		coalesce(c.agent_id, ''), c.created_at ` + inLineage
	if desc {
		if cursor == 0 {
			cursor = 1<<63 - 1
		}
		q += ` WHERE c.version < $3 ORDER BY c.version DESC LIMIT $4`
	} else {
		q += ` WHERE c.version > $3 ORDER BY c.version LIMIT $4`
	}
	rows, err := db.Query(ctx, q, org, jobID, cursor, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CheckpointSummary, error) {
		var c CheckpointSummary
		err := r.Scan(&c.Version, &c.StoredIn, &c.Goal, &c.CurrentStep, &c.NextAction, &c.EventSeq, &c.AgentID, &c.CreatedAt)
		c.CreatedAt = c.CreatedAt.UTC()
		return c, err
	})
	return out, pg.Interpret(err)
}

// ForkInput names the new job of a fork.
type ForkInput struct {
	NewJobID string
	Owner    string // "" keeps the parent's owner
}

// Fork creates newJobID as a branch of jobID at checkpoint version: a running job whose
// checkpoint history is the parent's up to version (shared, not copied) and whose own writes
// continue at version+1, invisible to the parent. It copies the parent's step rows that
// were completed when that checkpoint was written (so a resumed fork does not re-run them)
// and nothing else. The caller forks the episodic log at the returned job's ParentEventSeq.
func (s *Store) Fork(ctx context.Context, db pg.DBTX, org, jobID string, version int64, in ForkInput) (Job, Checkpoint, error) {
	if version < 1 {
		return Job{}, Checkpoint{}, strata.Invalid("version", "must be a checkpoint version (1 or more)")
	}
	parent, err := s.GetJob(ctx, db, org, jobID)
	if err != nil {
		return Job{}, Checkpoint{}, err
	}
	cp, err := s.GetCheckpoint(ctx, db, org, jobID, version)
	if errors.Is(err, strata.ErrNotFound) {
		return Job{}, Checkpoint{}, strata.NoSuch("version", "job %s has no checkpoint version %d (latest is %d)",
			jobID, version, parent.CheckpointVersion)
	}
	if err != nil {
		return Job{}, Checkpoint{}, err
	}
	owner := in.Owner
	if owner == "" {
		owner = parent.Owner
	}
	now := s.Now()
	j, err := scanJob(db.QueryRow(ctx, `INSERT INTO jobs (org_id, job_id, goal, status, owner, user_id, agent_id, session_id,
			metadata, checkpoint_version, parent_job_id, parent_version, parent_event_seq, progress_at, created_at, updated_at)
		SELECT org_id, $3, goal, 'running', $4, user_id, agent_id, session_id, metadata, $5, job_id, $5, $6, $7, $7, $7
		FROM jobs WHERE org_id = $1 AND job_id = $2
		ON CONFLICT (org_id, job_id) DO NOTHING
		RETURNING `+jobCols, org, jobID, in.NewJobID, owner, version, cp.EventSeq, now))
	if errors.Is(err, strata.ErrNotFound) {
		return Job{}, Checkpoint{}, strata.Conflict("job "+in.NewJobID+" already exists; choose another new_job_id",
			map[string]any{"job_id": in.NewJobID})
	}
	if err != nil {
		return Job{}, Checkpoint{}, err
	}
	// The copied steps bring their attempts (how each was done), in the same statement.
	if _, err := db.Exec(ctx, `WITH st AS (INSERT INTO job_steps (org_id, job_id, step_id, status, owner, fencing_token,
			attempts, lease_seconds, lease_expires_at, input, result, started_at, heartbeat_at, finished_at, first_started_at)
		SELECT org_id, $3, step_id, status, owner, fencing_token, attempts, lease_seconds, lease_expires_at, input, result,
			started_at, heartbeat_at, finished_at, first_started_at
		FROM job_steps WHERE org_id = $1 AND job_id = $2 AND status = 'completed' AND finished_at <= $4
		RETURNING step_id)
		INSERT INTO job_step_attempts (org_id, job_id, step_id, fencing_token, attempt, claim, owner, input, lease_seconds,
			acquired_at, lease_expires_at, heartbeats, last_heartbeat_at, released_at, outcome, error, disposition)
		SELECT org_id, $3, step_id, fencing_token, attempt, claim, owner, input, lease_seconds, acquired_at,
			lease_expires_at, heartbeats, last_heartbeat_at, released_at, outcome, error, disposition
		FROM job_step_attempts WHERE org_id = $1 AND job_id = $2 AND step_id IN (SELECT step_id FROM st)`,
		org, jobID, in.NewJobID, cp.CreatedAt); err != nil {
		return Job{}, Checkpoint{}, pg.Interpret(err)
	}
	cp.JobID = j.JobID
	return j, cp, nil
}
