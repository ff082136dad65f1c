package gdpr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Erasure is an erasure request and, once it ran, its receipt.
type Erasure struct {
	ID           string                      `json:"id"`
	Subject      string                      `json:"subject" doc:"The audit pseudonym of the data subject (keyed HMAC); the raw user_id is kept only while the erasure runs."`
	UserID       string                      `json:"user_id,omitempty" doc:"The data subject, until the erasure completes."`
	Status       string                      `json:"status" enum:"pending,running,completed,failed"`
	Reason       string                      `json:"reason,omitempty"`
	RequestedBy  string                      `json:"requested_by" doc:"The API key that asked."`
	RequestedAt  time.Time                   `json:"requested_at"`
	Deadline     time.Time                   `json:"deadline" doc:"requested_at + 30 days (Art. 12(3): one month)."`
	StartedAt    *time.Time                  `json:"started_at,omitempty"`
	FinishedAt   *time.Time                  `json:"finished_at,omitempty"`
	Counts       map[string]map[string]int64 `json:"counts" doc:"What committed steps removed, per tier (rows, Redis keys, River jobs, stored responses)."`
	PhasesDone   []string                    `json:"phases_done"`
	Phases       []string                    `json:"phases"`
	Rounds       int                         `json:"rounds" doc:"Passes over the phases (another starts when verification finds data written meanwhile)."`
	Attempts     int                         `json:"attempts" doc:"Times a worker took the erasure on (more than one after a crash or restart)."`
	Verification *Verification               `json:"verification,omitempty" doc:"The re-query of every tier after the last pass."`
	LastError    string                      `json:"last_error,omitempty"`
	DeadlineNear bool                        `json:"deadline_near,omitempty" doc:"Not completed and past 80 % of the time to its deadline."`
	Overdue      bool                        `json:"overdue,omitempty" doc:"Not completed and past its deadline."`
}

const erasureCols = `id, subject, coalesce(user_id, ''), status, reason, requested_by, requested_at, deadline, started_at,
	finished_at, progress, phases_done, rounds, attempts, verification, coalesce(last_error, '')`

func scanErasure(r pgx.Row) (Erasure, error) {
	var e Erasure
	var progress, verification []byte
	err := r.Scan(&e.ID, &e.Subject, &e.UserID, &e.Status, &e.Reason, &e.RequestedBy, &e.RequestedAt, &e.Deadline,
		&e.StartedAt, &e.FinishedAt, &progress, &e.PhasesDone, &e.Rounds, &e.Attempts, &verification, &e.LastError)
	if err != nil {
		return e, err
	}
	var flat map[string]int64
	if err := json.Unmarshal(progress, &flat); err != nil {
		return e, err
	}
	e.Counts = map[string]map[string]int64{}
	for k, v := range flat {
		tier, item, ok := strings.Cut(k, ".")
		if !ok {
			tier, item = "other", k
		}
		if e.Counts[tier] == nil {
			e.Counts[tier] = map[string]int64{}
		}
		e.Counts[tier][item] = v
	}
	if verification != nil {
		e.Verification = &Verification{}
		if err := json.Unmarshal(verification, e.Verification); err != nil {
			return e, err
		}
	}
	if e.PhasesDone == nil {
		e.PhasesDone = []string{}
	}
	e.Phases = Phases
	e.RequestedAt, e.Deadline = e.RequestedAt.UTC(), e.Deadline.UTC()
	for _, t := range []*time.Time{e.StartedAt, e.FinishedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return e, nil
}

// NewErasure is a request to record.
type NewErasure struct {
	OrgID, UserID, Subject, RequestedBy, RequestID, Reason string
	At                                                     time.Time
}

// CreateErasure records an erasure request in tx and enqueues its job in the same
// transaction (ins may be nil in tests that run the engine by hand).
func CreateErasure(ctx context.Context, tx pgx.Tx, ins *Inserter, n NewErasure) (Erasure, error) {
	if err := strata.CheckText("reason", n.Reason); err != nil {
		return Erasure{}, err
	}
	// Background writers that hold the subject's lock (HeldOn) finish before the erasure
	// exists; later ones see it and write nothing.
	if _, err := tx.Exec(ctx, fmt.Sprintf(subjectLockSQL, ""), n.OrgID, n.UserID); err != nil {
		return Erasure{}, pg.Interpret(err)
	}
	id := uuid.Must(uuid.NewV7()).String()
	at := n.At.UTC()
	e, err := scanErasure(tx.QueryRow(ctx, `INSERT INTO gdpr_erasures (org_id, id, user_id, subject, requested_by, request_id,
			reason, requested_at, deadline, enqueued_at)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8, $9, $8) RETURNING `+erasureCols,
		n.OrgID, id, n.UserID, n.Subject, n.RequestedBy, n.RequestID, n.Reason, at, at.Add(Deadline)))
	if err != nil {
		return e, pg.Interpret(err)
	}
	if ins != nil {
		if _, err := ins.InsertTx(ctx, tx, ErasureArgs{OrgID: n.OrgID, ErasureID: id}, nil); err != nil {
			return e, err
		}
	}
	return e, nil
}

// GetErasure reads one erasure.
func GetErasure(ctx context.Context, q pg.DBTX, org, id string) (Erasure, error) {
	e, err := scanErasure(q.QueryRow(ctx, `SELECT `+erasureCols+` FROM gdpr_erasures WHERE org_id = $1 AND id = $2`, org, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, strata.ErrNotFound
	}
	return e, pg.Interpret(err)
}

// ListErasures lists org's erasures, newest first, optionally of one subject (pseudonym),
// before id `before` (a cursor: the previous page's last id).
func ListErasures(ctx context.Context, q pg.DBTX, org, subject, before string, limit int) ([]Erasure, error) {
	if before != "" {
		if _, err := uuid.Parse(before); err != nil {
			return nil, strata.Invalid("cursor", "is not a cursor this API returned")
		}
	}
	rows, err := q.Query(ctx, `SELECT `+erasureCols+` FROM gdpr_erasures
		WHERE org_id = $1 AND ($2 = '' OR subject = $2) AND ($3 = '' OR id < $3)
		ORDER BY id DESC LIMIT $4`, org, subject, before, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
	return out, pg.Interpret(err)
}

// Restriction is a restriction of processing (Art. 18).
type Restriction struct {
	UserID       string    `json:"user_id"`
	Restricted   bool      `json:"restricted"`
	RestrictedAt time.Time `json:"restricted_at,omitzero"`
	RestrictedBy string    `json:"restricted_by,omitempty"`
	Reason       string    `json:"reason,omitempty"`
}

// Restrict records a restriction (idempotent: an existing one is answered, created false).
func Restrict(ctx context.Context, tx pgx.Tx, org, user, by, reason string, at time.Time) (Restriction, bool, error) {
	if err := strata.CheckText("reason", reason); err != nil {
		return Restriction{}, false, err
	}
	r := Restriction{UserID: user, Restricted: true}
	var created bool
	err := tx.QueryRow(ctx, `WITH ins AS (
			INSERT INTO gdpr_restrictions (org_id, user_id, restricted_at, restricted_by, reason) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT DO NOTHING RETURNING restricted_at, restricted_by, reason, true)
		SELECT * FROM ins UNION ALL
		SELECT restricted_at, restricted_by, reason, false FROM gdpr_restrictions
		WHERE org_id = $1 AND user_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
		org, user, at.UTC(), by, reason).Scan(&r.RestrictedAt, &r.RestrictedBy, &r.Reason, &created)
	r.RestrictedAt = r.RestrictedAt.UTC()
	return r, created, pg.Interpret(err)
}

// Unrestrict lifts a restriction; ErrNotFound when there was none.
func Unrestrict(ctx context.Context, tx pgx.Tx, org, user string) error {
	tag, err := tx.Exec(ctx, `DELETE FROM gdpr_restrictions WHERE org_id = $1 AND user_id = $2`, org, user)
	if err != nil {
		return pg.Interpret(err)
	}
	if tag.RowsAffected() == 0 {
		return strata.ErrNotFound
	}
	return nil
}

// GetRestriction reads the restriction state of user.
func GetRestriction(ctx context.Context, q pg.DBTX, org, user string) (Restriction, error) {
	r := Restriction{UserID: user}
	err := q.QueryRow(ctx, `SELECT restricted_at, restricted_by, reason FROM gdpr_restrictions WHERE org_id = $1 AND user_id = $2`,
		org, user).Scan(&r.RestrictedAt, &r.RestrictedBy, &r.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	r.Restricted, r.RestrictedAt = err == nil, r.RestrictedAt.UTC()
	return r, pg.Interpret(err)
}
