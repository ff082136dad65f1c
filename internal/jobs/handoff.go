package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Handoff statuses.
const (
	HandoffPending      = "pending"
	HandoffAcknowledged = "acknowledged"
)

// Handoff is an explicit transfer of a job from one agent to another.
type Handoff struct {
	JobID      string          `json:"job_id"`
	ID         string          `json:"id"`
	From       string          `json:"from"`
	To         string          `json:"to"`
	Context    json.RawMessage `json:"context"`
	Status     string          `json:"status" enum:"pending,acknowledged"`
	SentCount  int             `json:"sent_count" doc:"How many times it was sent (re-sends included)."`
	CreatedAt  time.Time       `json:"created_at"`
	LastSentAt time.Time       `json:"last_sent_at"`
	AckedAt    *time.Time      `json:"acked_at,omitempty"`
}

// HandoffInput is what POST /v1/jobs/{job}/handoffs sends.
type HandoffInput struct {
	ID      string // "" : the server assigns one (UUIDv7); the same id again is a re-send
	From    string
	To      string
	Context json.RawMessage
}

const handoffCols = `job_id, handoff_id, from_agent, to_agent, context, status, sent_count, created_at, last_sent_at, acked_at`

func scanHandoff(row pgx.Row) (Handoff, error) {
	var h Handoff
	err := row.Scan(&h.JobID, &h.ID, &h.From, &h.To, &h.Context, &h.Status, &h.SentCount, &h.CreatedAt, &h.LastSentAt, &h.AckedAt)
	if err != nil {
		return Handoff{}, pg.Interpret(err)
	}
	h.CreatedAt, h.LastSentAt = h.CreatedAt.UTC(), h.LastSentAt.UTC()
	if h.AckedAt != nil {
		t := h.AckedAt.UTC()
		h.AckedAt = &t
	}
	return h, nil
}

// CreateHandoff offers a running job to another agent. The job stays with From until To
// acknowledges. Sending the same handoff again (same id, or no id and the same from/to
// while it is pending) is a re-send: sent_count grows, nothing else changes, created is
// false. Another handoff while one is pending is a conflict naming the pending one. When
// the job has an owner, From must be it.
func (s *Store) CreateHandoff(ctx context.Context, db pg.DBTX, org, jobID string, in HandoffInput) (Handoff, bool, error) {
	if err := strata.CheckJSON("context", in.Context); err != nil {
		return Handoff{}, false, err
	}
	if in.From == in.To {
		return Handoff{}, false, strata.Invalid("to", "must differ from body.from")
	}
	j, err := s.lockRunningJob(ctx, db, org, jobID)
	if err != nil {
		return Handoff{}, false, err
	}
	now := s.Now()
	pending, err := scanHandoff(db.QueryRow(ctx, `SELECT `+handoffCols+` FROM job_handoffs
		WHERE org_id = $1 AND job_id = $2 AND status = 'pending'`, org, jobID))
	hasPending := err == nil
	if err != nil && !errors.Is(err, strata.ErrNotFound) {
		return Handoff{}, false, err
	}
	if in.ID != "" {
		prev, err := scanHandoff(db.QueryRow(ctx, `SELECT `+handoffCols+` FROM job_handoffs
			WHERE org_id = $1 AND job_id = $2 AND handoff_id = $3`, org, jobID, in.ID))
		switch {
		case err == nil && (prev.From != in.From || prev.To != in.To):
			return Handoff{}, false, strata.Conflict("handoff "+in.ID+" exists from "+prev.From+" to "+prev.To+"; use another id for another handoff",
				map[string]any{"id": prev.ID, "from": prev.From, "to": prev.To, "status": prev.Status})
		case err == nil && prev.Status == HandoffAcknowledged:
			return prev, false, nil
		case err == nil:
			return s.resend(ctx, db, org, jobID, prev.ID, now)
		case !errors.Is(err, strata.ErrNotFound):
			return Handoff{}, false, err
		}
	} else if hasPending && pending.From == in.From && pending.To == in.To {
		return s.resend(ctx, db, org, jobID, pending.ID, now)
	}
	if hasPending {
		return Handoff{}, false, strata.Conflict("job "+jobID+" already has a pending handoff ("+pending.ID+" from "+pending.From+" to "+
			pending.To+"); it must be acknowledged first",
			map[string]any{"id": pending.ID, "from": pending.From, "to": pending.To})
	}
	if j.Owner != "" && in.From != j.Owner {
		return Handoff{}, false, strata.Conflict("job "+jobID+" is owned by "+quoteOr(j.Owner, "")+", not "+quoteOr(in.From, "")+"; only the owner hands it off",
			map[string]any{"owner": j.Owner})
	}
	id := in.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return Handoff{}, false, err
		}
		id = u.String()
	}
	ctxJSON := orEmpty(in.Context, "{}")
	if !bytes.HasPrefix(bytes.TrimSpace(ctxJSON), []byte("{")) {
		return Handoff{}, false, strata.Invalid("context", "must be a JSON object")
	}
	h, err := scanHandoff(db.QueryRow(ctx, `INSERT INTO job_handoffs (org_id, job_id, handoff_id, from_agent, to_agent, context,
			status, created_at, last_sent_at)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, 'pending', $7, $7) RETURNING `+handoffCols,
		org, jobID, id, in.From, in.To, string(ctxJSON), now))
	if err != nil {
		return Handoff{}, false, err
	}
	return h, true, nil
}

func (s *Store) resend(ctx context.Context, db pg.DBTX, org, jobID, id string, now time.Time) (Handoff, bool, error) {
	h, err := scanHandoff(db.QueryRow(ctx, `UPDATE job_handoffs SET sent_count = sent_count + 1, last_sent_at = $4
		WHERE org_id = $1 AND job_id = $2 AND handoff_id = $3 RETURNING `+handoffCols, org, jobID, id, now))
	return h, false, err
}

// AckHandoff is the receiver's acknowledgement: in one transaction the handoff becomes
// acknowledged, the job's owner becomes To, and every in-flight step lease held by anyone
// else moves to To under a new fencing token (so the previous holder is fenced off and
// nothing is split between two owners). Only To may acknowledge; acknowledging again
// answers the same handoff and job.
func (s *Store) AckHandoff(ctx context.Context, db pg.DBTX, org, jobID, id, agent string) (Handoff, Job, error) {
	j, err := s.lockJob(ctx, db, org, jobID)
	if err != nil {
		return Handoff{}, Job{}, err
	}
	h, err := scanHandoff(db.QueryRow(ctx, `SELECT `+handoffCols+` FROM job_handoffs
		WHERE org_id = $1 AND job_id = $2 AND handoff_id = $3 FOR UPDATE`, org, jobID, id))
	if err != nil {
		return Handoff{}, Job{}, err
	}
	if agent != h.To {
		return Handoff{}, Job{}, strata.Conflict("handoff "+id+" is addressed to "+quoteOr(h.To, "")+"; only the receiver acknowledges it",
			map[string]any{"to": h.To})
	}
	if h.Status == HandoffAcknowledged {
		return h, j, nil
	}
	if j.Status != StatusRunning {
		return Handoff{}, Job{}, notRunning(j)
	}
	now := s.Now()
	h, err = scanHandoff(db.QueryRow(ctx, `UPDATE job_handoffs SET status = 'acknowledged', acked_at = $4
		WHERE org_id = $1 AND job_id = $2 AND handoff_id = $3 RETURNING `+handoffCols, org, jobID, id, now))
	if err != nil {
		return Handoff{}, Job{}, err
	}
	j, err = scanJob(db.QueryRow(ctx, `UPDATE jobs SET owner = $3, version = version + 1, updated_at = $4,
			progress_at = greatest(progress_at, $4)
		WHERE org_id = $1 AND job_id = $2 RETURNING `+jobCols, org, jobID, h.To, now))
	if err != nil {
		return Handoff{}, Job{}, err
	}
	// Each moved lease ends its holder's attempt (taken_over; lease_lost when it had run out
	// already) and opens the receiver's under the new token, in the same statement.
	if _, err := db.Exec(ctx, `WITH st AS (UPDATE job_steps SET owner = $3, fencing_token = fencing_token + 1
			WHERE org_id = $1 AND job_id = $2 AND status = 'running' AND owner <> $3 RETURNING *),
		old AS (UPDATE job_step_attempts a
			SET outcome = CASE WHEN a.lease_expires_at <= $4 THEN 'lease_lost' ELSE 'taken_over' END,
				released_at = least(a.lease_expires_at, $4)
			FROM st WHERE a.org_id = st.org_id AND a.job_id = st.job_id AND a.step_id = st.step_id
			  AND a.fencing_token = st.fencing_token - 1 AND a.outcome IS NULL)
		INSERT INTO job_step_attempts (org_id, job_id, step_id, fencing_token, attempt, claim, owner, input,
			lease_seconds, acquired_at, lease_expires_at)
		SELECT org_id, job_id, step_id, fencing_token, attempts, 'handoff', owner, input, lease_seconds, $4, lease_expires_at
		FROM st`, org, jobID, h.To, now); err != nil {
		return Handoff{}, Job{}, pg.Interpret(err)
	}
	return h, j, nil
}

// ListHandoffs lists a job's handoffs by id (server-assigned ids are UUIDv7, so time order), after the cursor;
// status "" means any.
func (s *Store) ListHandoffs(ctx context.Context, db pg.DBTX, org, jobID, status string, after string, limit int) ([]Handoff, error) {
	if err := strata.CheckID("cursor", after, true); err != nil {
		return nil, err
	}
	if _, err := s.GetJob(ctx, db, org, jobID); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+handoffCols+` FROM job_handoffs
		WHERE org_id = $1 AND job_id = $2 AND ($3 = '' OR status = $3) AND handoff_id > $4
		ORDER BY handoff_id LIMIT $5`, org, jobID, status, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Handoff, error) { return scanHandoff(r) })
	return out, pg.Interpret(err)
}
