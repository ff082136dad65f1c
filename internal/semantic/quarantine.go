package semantic

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Poisoning controls (OWASP LLM Top 10: data and model poisoning, applied to agent
// memory). Every memory version records its provenance (the API key that wrote it, the
// agent, job and event it came from) and a trust level. Search filters on both
// (ProvenanceFilter, Query.Trust), and a quarantine takes everything one key or one agent
// wrote since a time out of retrieval at once, until it is released, and can remove it in
// one operation (Purge). Schema: migrations/0011_quarantine.sql.

// ProvenanceFilter narrows a search by who wrote a memory version. Empty lists do not
// filter. The agent of a version is its provenance agent_id.
type ProvenanceFilter struct {
	KeyIDs          []string // only versions written by one of these API keys
	AgentIDs        []string // only versions whose provenance agent is one of these
	JobIDs          []string // only versions that came from one of these jobs
	ExcludeKeyIDs   []string // never versions written by these keys
	ExcludeAgentIDs []string // never versions whose provenance agent is one of these
}

// applyPoisoningFilters adds the provenance and quarantine conditions of q to f.
func applyPoisoningFilters(f *filter, q Query) {
	p := q.Provenance
	if len(p.KeyIDs) > 0 {
		f.add("created_by_key = ANY(?)", p.KeyIDs)
	}
	if len(p.AgentIDs) > 0 {
		f.add("source_agent_id = ANY(?)", p.AgentIDs)
	}
	if len(p.JobIDs) > 0 {
		f.add("source_job_id = ANY(?)", p.JobIDs)
	}
	if len(p.ExcludeKeyIDs) > 0 {
		f.add("NOT (created_by_key = ANY(?))", p.ExcludeKeyIDs)
	}
	if len(p.ExcludeAgentIDs) > 0 {
		f.add("NOT (source_agent_id = ANY(?))", p.ExcludeAgentIDs)
	}
	if !q.IncludeQuarantined {
		f.conds = append(f.conds, "NOT quarantined")
	}
}

// Quarantine statuses.
const (
	QuarantineActive   = "active"
	QuarantineReleased = "released"
)

// Quarantine holds the memory versions one API key or one agent wrote since a time.
type Quarantine struct {
	ID         uuid.UUID  `json:"id"`
	KeyID      string     `json:"key_id,omitempty" doc:"The API key whose writes are held."`
	AgentID    string     `json:"agent_id,omitempty" doc:"The agent whose writes are held (provenance agent_id, or the scope agent_id of writes that named none)."`
	Since      time.Time  `json:"since" doc:"Versions written at or after this time are held."`
	Reason     string     `json:"reason,omitempty"`
	Status     string     `json:"status" enum:"active,released" doc:"active: held versions are excluded from retrieval and new writes by the key/agent join; released: ended, versions still held are visible again."`
	CreatedBy  string     `json:"created_by" doc:"The key that created the quarantine."`
	CreatedAt  time.Time  `json:"created_at"`
	ReleasedBy string     `json:"released_by,omitempty"`
	ReleasedAt *time.Time `json:"released_at,omitempty"`
	PurgedBy   string     `json:"purged_by,omitempty" doc:"The key that ran the last purge."`
	PurgedAt   *time.Time `json:"purged_at,omitempty"`
	Held       int        `json:"held" doc:"Memory versions the quarantine holds now (that still exist)."`
	Purged     int        `json:"purged" doc:"Memory versions removed by purges."`
	Restored   int        `json:"restored" doc:"Earlier versions made current again by purges (a purged version had superseded them)."`
	Restricted int        `json:"restricted" doc:"Held versions whose data subject is restricted (GDPR Art. 18): counted in held, but not listed, purged or released; they stay held, as they are, until the restriction is lifted."`
}

// NewQuarantine is a quarantine request: exactly one of KeyID and AgentID.
type NewQuarantine struct {
	KeyID, AgentID string
	Since          time.Time
	Reason         string
	CreatedBy      string
}

const quarantineCols = `q.id, q.key_id, q.agent_id, q.since, q.reason, q.status, q.created_by, q.created_at,
	coalesce(q.released_by, ''), q.released_at, coalesce(q.purged_by, ''), q.purged_at, q.purged, q.restored,
	(SELECT count(*) FROM memory_quarantine_items i JOIN memories m ON m.org_id = i.org_id AND m.id = i.memory_id
	  WHERE i.org_id = q.org_id AND i.quarantine_id = q.id),
	(SELECT count(*) FROM memory_quarantine_items i JOIN memories m ON m.org_id = i.org_id AND m.id = i.memory_id
	  WHERE i.org_id = q.org_id AND i.quarantine_id = q.id AND NOT ` + unrestrictedM + `)`

// unrestrictedM is the SQL condition "memory m's data subject is not restricted" (GDPR
// Art. 18, issue 57): a quarantine neither serves, purges nor releases such a version.
const unrestrictedM = `NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = m.org_id AND r.user_id = m.user_id)`

func scanQuarantine(r pgx.Row) (Quarantine, error) {
	var q Quarantine
	err := r.Scan(&q.ID, &q.KeyID, &q.AgentID, &q.Since, &q.Reason, &q.Status, &q.CreatedBy, &q.CreatedAt,
		&q.ReleasedBy, &q.ReleasedAt, &q.PurgedBy, &q.PurgedAt, &q.Purged, &q.Restored, &q.Held, &q.Restricted)
	utc(&q.Since, &q.CreatedAt)
	utcp(q.ReleasedAt, q.PurgedAt)
	return q, err
}

// lockQuarantines takes the org's quarantine lock exclusively: memory inserts take it
// shared (the trigger of migration 0011), so a write racing a quarantine change either
// committed before it (and is seen) or waits for it (and sees it).
func lockQuarantines(ctx context.Context, tx pgx.Tx, org string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('strata.quarantine' || chr(31) || $1, 0))`, org)
	return pg.Interpret(err)
}

// matchWriter is the SQL condition "memory m was written by the quarantine's key or agent
// since its time", with $2 = key_id, $3 = agent_id, $4 = since. An extracted memory was
// written by every writer of the turns it was extracted from (metadata.extraction.writers,
// issue 57), not only by the key it is attributed to.
const matchWriter = `m.valid_from >= $4 AND (($2 <> '' AND (m.created_by_key = $2
		OR (m.trust = 'extracted' AND jsonb_exists(m.metadata->'extraction'->'writers', $2))))
	OR ($3 <> '' AND coalesce(nullif(m.source_agent_id, ''), m.agent_id) = $3))`

// CreateQuarantine quarantines every memory version (current or superseded) that n's key
// or agent wrote at or after n.Since, and every version they write while it is active.
func (s *Store) CreateQuarantine(ctx context.Context, tx pgx.Tx, org string, n NewQuarantine) (Quarantine, error) {
	if (n.KeyID == "") == (n.AgentID == "") {
		return Quarantine{}, strata.Invalid("", "name exactly one of key_id and agent_id")
	}
	if err := n.Validate(); err != nil {
		return Quarantine{}, err
	}
	if err := lockQuarantines(ctx, tx, org); err != nil {
		return Quarantine{}, err
	}
	id := uuid.Must(uuid.NewV7())
	now := s.now().UTC()
	if _, err := tx.Exec(ctx, `INSERT INTO memory_quarantines (org_id, id, key_id, agent_id, since, reason, created_by, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, org, id, n.KeyID, n.AgentID, n.Since.UTC(), n.Reason, n.CreatedBy, now); err != nil {
		return Quarantine{}, pg.Interpret(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO memory_quarantine_items (org_id, quarantine_id, memory_id)
		SELECT $1, $5, m.id FROM memories m WHERE m.org_id = $1 AND `+matchWriter,
		org, n.KeyID, n.AgentID, n.Since.UTC(), id); err != nil {
		return Quarantine{}, pg.Interpret(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE memories m SET quarantined = true
		FROM memory_quarantine_items i
		WHERE i.org_id = $1 AND i.quarantine_id = $2 AND m.org_id = $1 AND m.id = i.memory_id AND NOT m.quarantined`,
		org, id); err != nil {
		return Quarantine{}, pg.Interpret(err)
	}
	return s.GetQuarantine(ctx, tx, org, id)
}

// GetQuarantine returns one quarantine with its live count.
func (s *Store) GetQuarantine(ctx context.Context, q pg.DBTX, org string, id uuid.UUID) (Quarantine, error) {
	out, err := scanQuarantine(q.QueryRow(ctx, `SELECT `+quarantineCols+` FROM memory_quarantines q
		WHERE q.org_id = $1 AND q.id = $2`, org, id))
	return out, pg.Interpret(err)
}

// ListQuarantines lists the org's quarantines by id (creation order) after cursor (the
// previous page's last id; "": from the first), optionally only those of one status.
func (s *Store) ListQuarantines(ctx context.Context, q pg.DBTX, org, status, cursor string, limit int) ([]Quarantine, error) {
	after, err := parseIDCursor(cursor)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT `+quarantineCols+` FROM memory_quarantines q
		WHERE q.org_id = $1 AND ($2 = '' OR q.status = $2) AND q.id > $3 ORDER BY q.id LIMIT $4`, org, status, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Quarantine, error) { return scanQuarantine(r) })
	return out, pg.Interpret(err)
}

// QuarantinedMemories lists the memory versions quarantine id holds, by id after cursor
// (as ListQuarantines), leaving out those of restricted data subjects (Quarantine.Restricted
// counts them). The quarantine must exist (ErrNotFound otherwise).
func (s *Store) QuarantinedMemories(ctx context.Context, q pg.DBTX, org string, id uuid.UUID, cursor string, limit int) ([]Memory, error) {
	after, err := parseIDCursor(cursor)
	if err != nil {
		return nil, err
	}
	if _, err := s.GetQuarantine(ctx, q, org, id); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT `+memCols+` FROM memories m WHERE org_id = $1 AND id IN
		(SELECT memory_id FROM memory_quarantine_items WHERE org_id = $1 AND quarantine_id = $2) AND id > $3
		AND `+unrestrictedM+`
		ORDER BY id LIMIT $4`, org, id, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Memory, error) { return scanMemory(r) })
	return out, pg.Interpret(err)
}

// activeForUpdate locks the quarantine row and checks it is active.
func (s *Store) activeForUpdate(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID) error {
	if err := lockQuarantines(ctx, tx, org); err != nil {
		return err
	}
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM memory_quarantines WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id).Scan(&status)
	if err != nil {
		return pg.Interpret(err)
	}
	if status != QuarantineActive {
		return strata.Conflict("this quarantine was released", map[string]any{"status": status})
	}
	return nil
}

// ReleaseQuarantine ends quarantine id: the versions it still holds are visible again
// (unless another active quarantine holds them too), and new writes no longer join it.
// Versions of restricted data subjects are left as they are (still held; Art. 18: not
// changed): Quarantine.Restricted counts them.
func (s *Store) ReleaseQuarantine(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID, by string) (Quarantine, error) {
	if err := s.activeForUpdate(ctx, tx, org, id); err != nil {
		return Quarantine{}, err
	}
	now := s.now().UTC()
	if _, err := tx.Exec(ctx, `UPDATE memory_quarantines SET status = 'released', released_by = $3, released_at = $4
		WHERE org_id = $1 AND id = $2`, org, id, by, now); err != nil {
		return Quarantine{}, pg.Interpret(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE memories m SET quarantined = EXISTS (
			SELECT 1 FROM memory_quarantine_items o JOIN memory_quarantines oq ON oq.org_id = o.org_id AND oq.id = o.quarantine_id
			WHERE o.org_id = m.org_id AND o.memory_id = m.id AND oq.status = 'active')
		FROM memory_quarantine_items i
		WHERE i.org_id = $1 AND i.quarantine_id = $2 AND m.org_id = $1 AND m.id = i.memory_id AND `+unrestrictedM, org, id); err != nil {
		return Quarantine{}, pg.Interpret(err)
	}
	return s.GetQuarantine(ctx, tx, org, id)
}

// PurgeResult says what a purge removed.
type PurgeResult struct {
	Deleted        []uuid.UUID `json:"deleted_versions" doc:"Memory versions removed (text, vector)."`
	Restored       []uuid.UUID `json:"restored_versions" doc:"Earlier versions made current again: each had been superseded by a purged version, and nothing unquarantined superseded it since."`
	KeptRestricted int         `json:"kept_restricted" doc:"Held versions kept because their data subject is restricted (GDPR Art. 18: stored, not otherwise processed); they stay held."`
}

// PurgeQuarantine deletes every memory version quarantine id holds, in one transaction,
// with the stored idempotent responses that quoted them. Where a purged version had
// superseded an earlier one (a compromised agent rewrote a good memory) and the lineage has
// no other current version, the earlier version becomes current again. The quarantine
// stays active (new writes of the key/agent keep joining it) until it is released.
// Versions of restricted data subjects are kept, held (res.KeptRestricted counts them).
func (s *Store) PurgeQuarantine(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID, by string) (Quarantine, PurgeResult, error) {
	res := PurgeResult{Deleted: []uuid.UUID{}, Restored: []uuid.UUID{}}
	if err := s.activeForUpdate(ctx, tx, org, id); err != nil {
		return Quarantine{}, res, err
	}
	rows, err := tx.Query(ctx, `SELECT m.id FROM memories m JOIN memory_quarantine_items i
		ON i.org_id = m.org_id AND i.memory_id = m.id WHERE i.org_id = $1 AND i.quarantine_id = $2 AND `+unrestrictedM+`
		FOR UPDATE OF m`, org, id)
	if err != nil {
		return Quarantine{}, res, pg.Interpret(err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return Quarantine{}, res, pg.Interpret(err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM memories m JOIN memory_quarantine_items i
		ON i.org_id = m.org_id AND i.memory_id = m.id WHERE i.org_id = $1 AND i.quarantine_id = $2 AND NOT `+unrestrictedM,
		org, id).Scan(&res.KeptRestricted); err != nil {
		return Quarantine{}, res, pg.Interpret(err)
	}
	if len(held) > 0 {
		// Versions to bring back: superseded by a purged version, not purged themselves,
		// and their lineage keeps no current version outside the purge.
		rows, err = tx.Query(ctx, `SELECT p.id FROM memories p WHERE p.org_id = $1 AND p.superseded_by = ANY($2)
			AND NOT (p.id = ANY($2))
			AND NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = p.org_id AND r.user_id = p.user_id)
			AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.org_id = $1 AND c.root_id = p.root_id
				AND c.valid_to IS NULL AND NOT (c.id = ANY($2)))`, org, held)
		if err != nil {
			return Quarantine{}, res, pg.Interpret(err)
		}
		restore, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return Quarantine{}, res, pg.Interpret(err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memories WHERE org_id = $1 AND id = ANY($2)`, org, held); err != nil {
			return Quarantine{}, res, pg.Interpret(err)
		}
		strs := make([]string, len(held))
		for i, x := range held {
			strs[i] = x.String()
		}
		if _, err := tx.Exec(ctx, `DELETE FROM idempotency_keys k WHERE org_id = $1
			AND EXISTS (SELECT 1 FROM unnest($2::text[]) i WHERE position(convert_to(i, 'UTF8') IN k.response_body) > 0)`,
			org, strs); err != nil {
			return Quarantine{}, res, pg.Interpret(err)
		}
		if len(restore) > 0 {
			// Skip a version whose text is meanwhile current elsewhere in its scope (the
			// one-current-text-per-scope rule); it stays in the history.
			rows, err = tx.Query(ctx, `UPDATE memories p SET valid_to = NULL, superseded_by = NULL, updated_at = $3
				WHERE p.org_id = $1 AND p.id = ANY($2) AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.org_id = $1
					AND c.user_id = p.user_id AND c.agent_id = p.agent_id AND c.session_id = p.session_id
					AND c.text_hash = p.text_hash AND c.valid_to IS NULL)
				RETURNING p.id`, org, restore, s.now().UTC())
			if err != nil {
				return Quarantine{}, res, pg.Interpret(err)
			}
			if res.Restored, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
				return Quarantine{}, res, pg.Interpret(err)
			}
		}
		res.Deleted = held
	}
	if _, err := tx.Exec(ctx, `UPDATE memory_quarantines SET purged = purged + $3, restored = restored + $4,
		purged_by = $5, purged_at = $6 WHERE org_id = $1 AND id = $2`,
		org, id, len(res.Deleted), len(res.Restored), by, s.now().UTC()); err != nil {
		return Quarantine{}, res, pg.Interpret(err)
	}
	q, err := s.GetQuarantine(ctx, tx, org, id)
	return q, res, err
}

// IsQuarantined reports whether memory version id is held by an active quarantine.
func (s *Store) IsQuarantined(ctx context.Context, q pg.DBTX, org string, id uuid.UUID) (bool, error) {
	var b bool
	err := q.QueryRow(ctx, `SELECT quarantined FROM memories WHERE org_id = $1 AND id = $2`, org, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, strata.ErrNotFound
	}
	return b, pg.Interpret(err)
}

// WritersQuarantined reports whether an active quarantine holds what any of keyIDs or
// agentIDs writes at time at (the rule the insert trigger of migration 0011 applies to
// memories). It takes the org's quarantine lock shared, as memory inserts do, so a
// quarantine created concurrently either is seen here or waits for the caller's
// transaction. Other tiers' writers (extraction's graph relations) ask it before writing
// what they cannot hold.
func (s *Store) WritersQuarantined(ctx context.Context, q pg.DBTX, org string, keyIDs, agentIDs []string, at time.Time) (bool, error) {
	if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtextextended('strata.quarantine' || chr(31) || $1, 0))`, org); err != nil {
		return false, pg.Interpret(err)
	}
	if keyIDs == nil {
		keyIDs = []string{}
	}
	if agentIDs == nil {
		agentIDs = []string{}
	}
	var b bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM memory_quarantines WHERE org_id = $1 AND status = 'active'
		AND since <= $4 AND ((key_id <> '' AND key_id = ANY($2::text[])) OR (agent_id <> '' AND agent_id = ANY($3::text[]))))`,
		org, keyIDs, agentIDs, at).Scan(&b)
	return b, pg.Interpret(err)
}
