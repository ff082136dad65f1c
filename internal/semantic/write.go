package semantic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// memCols are the columns scanMemory reads, in order.
const memCols = `id, root_id, version, kind, text, user_id, agent_id, session_id, metadata,
	importance, pinned, trust, created_by_key, source_agent_id, source_job_id, source_event_seq,
	embedder, model, dims, valid_from, valid_to, superseded_by, access_count, last_accessed_at,
	dedup_count, last_verified_at, coalesce(last_verified_by, '') AS last_verified_by, updated_at`

// scanMemory scans a row of memCols; extra are the destinations of columns selected after
// them (a search leg's distance or rank).
func scanMemory(r pgx.Row, extra ...any) (Memory, error) {
	m, meta, err := scanMemoryRaw(r, extra...)
	if err != nil {
		return m, err
	}
	return m, decodeMetadata(&m, meta)
}

// scanMemoryRaw is scanMemory with the metadata left undecoded (decodeMetadata decodes it):
// a search reads every candidate's row and decodes only those it returns.
func scanMemoryRaw(r pgx.Row, extra ...any) (Memory, []byte, error) {
	var m Memory
	var imp float32
	var meta []byte
	err := r.Scan(append([]any{&m.ID, &m.RootID, &m.Version, &m.Kind, &m.Text, &m.UserID, &m.AgentID, &m.SessionID, &meta,
		&imp, &m.Pinned, &m.Trust, &m.Provenance.KeyID, &m.Provenance.AgentID, &m.Provenance.JobID, &m.Provenance.EventSeq,
		&m.Embedding.Embedder, &m.Embedding.Model, &m.Embedding.Dims, &m.ValidFrom, &m.ValidTo, &m.SupersededBy,
		&m.AccessCount, &m.LastAccessed, &m.DedupCount, &m.LastVerified, &m.VerifiedBy, &m.UpdatedAt}, extra...)...)
	if err != nil {
		return m, nil, err
	}
	m.Importance = float64(imp)
	utc(&m.ValidFrom, &m.UpdatedAt)
	utcp(m.ValidTo, m.LastAccessed, m.LastVerified)
	return m, meta, nil
}

// decodeMetadata sets m's metadata from its stored JSON ({} when there is none).
func decodeMetadata(m *Memory, meta []byte) error {
	if err := json.Unmarshal(meta, &m.Metadata); err != nil {
		return err
	}
	if m.Metadata == nil {
		m.Metadata = map[string]any{}
	}
	return nil
}

func utc(ts ...*time.Time) {
	for _, t := range ts {
		*t = t.UTC()
	}
}

func utcp(ts ...*time.Time) {
	for _, t := range ts {
		if t != nil {
			*t = t.UTC()
		}
	}
}

// NewMemory is a write. Scope.OrgID is required; Vector must be of Space.Dims.
type NewMemory struct {
	Scope      strata.Scope
	Kind       string
	Text       string
	Metadata   map[string]any
	Importance float64
	Pinned     bool
	Trust      string
	Provenance Provenance
	Vector     []float32
	Space      Space
	// Rider, when set, is a data-modifying statement that rides in Create's one statement
	// as a CTE of its own (the write's audit record: audit.InsertSelect): it may read the
	// CTE ins, the inserted row (empty when the write found a duplicate). It adds its
	// parameters with arg. Create only (CreateBatch ignores it).
	Rider func(arg func(any) string) string
}

// Dedup says why a write created no row.
type Dedup struct {
	Reason     string  `json:"reason" enum:"exact,near" doc:"exact: same normalised text in the same scope; near: cosine similarity at or above the threshold."`
	Similarity float64 `json:"similarity"`
}

// lockScope serialises writes to one scope of one org until the transaction ends, so the
// duplicate checks of concurrent writes see each other.
func lockScope(ctx context.Context, tx pgx.Tx, sc strata.Scope) error {
	_, err := tx.Exec(ctx, lockScopeSQL, scopeLockKey(sc))
	return pg.Interpret(err)
}

const lockScopeSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

func scopeLockKey(sc strata.Scope) string {
	return strings.Join([]string{"strata.semantic", sc.OrgID, sc.UserID, sc.AgentID, sc.SessionID}, "\x1f")
}

func checkVector(v []float32, sp Space) error {
	if sp.Dims <= 0 || len(v) != sp.Dims {
		return fmt.Errorf("semantic: vector has %d dimensions, space %s/%s says %d", len(v), sp.Embedder, sp.Model, sp.Dims)
	}
	return nil
}

// Create stores a memory unless the same scope already holds its exact duplicate
// (normalised text) or a near duplicate (cosine ≥ DedupThreshold, same embedding space).
// On a duplicate it returns the existing memory and a non-nil Dedup, after recording the
// write on it: dedup_count and last_accessed_at, the newer provenance, the higher
// importance, pinned if either was. Concurrent writes to one scope are serialised by an
// advisory lock, so 20 identical writes at once leave one row.
//
// It costs one round trip (with the transaction's BEGIN when it is its first statement):
// the scope lock, then — under it — one statement that checks both duplicates and inserts
// the memory or records the write on its duplicate (createSQL), and the restoration of the
// plan choice. A scope not counted in the last few seconds is counted first, in a round
// trip of its own, to choose the near-duplicate check's strategy (planVector).
func (s *Store) Create(ctx context.Context, tx pgx.Tx, n NewMemory) (Memory, *Dedup, error) {
	op, err := s.PrepareCreate(ctx, tx, n, false)
	if err != nil {
		return Memory{}, nil, err
	}
	if err := tx.SendBatch(ctx, op.Batch()).Close(); err != nil {
		return Memory{}, nil, pg.Interpret(err)
	}
	m, d := op.Result()
	return m, d, nil
}

// CreateOp is a Create prepared and not yet sent: its pipeline (Batch), to be sent on the
// transaction it was prepared on, and once that ran, its answer (Result).
type CreateOp struct {
	b      *pgx.Batch
	m      Memory
	reason *string
	sim    *float64
}

// Batch is the write's pipeline: the scope lock with the plan choice, then the one
// statement (createSQL), then — unless COMMIT follows it — the plan choice restored.
func (op *CreateOp) Batch() *pgx.Batch { return op.b }

// Result is the memory written, or its duplicate and why, once Batch ran.
func (op *CreateOp) Result() (Memory, *Dedup) {
	if op.reason == nil {
		return op.m, nil
	}
	return op.m, &Dedup{Reason: *op.reason, Similarity: *op.sim}
}

// PrepareCreate is Create up to sending its pipeline, for a caller that sends it itself: in
// the round trip that also commits (pg.Session.CommitInTrip), with endsTx set, which leaves
// out the restoration of the plan choice (COMMIT ends it). n.Rider rides in the statement.
// A scope not counted in the last few seconds is counted here, on tx (planVector).
func (s *Store) PrepareCreate(ctx context.Context, tx pgx.Tx, n NewMemory, endsTx bool) (*CreateOp, error) {
	if err := checkVector(n.Vector, n.Space); err != nil {
		return nil, err
	}
	if n.Trust == "" {
		n.Trust = DefaultTrust
	}
	if n.Metadata == nil {
		n.Metadata = map[string]any{}
	}
	meta, err := json.Marshal(n.Metadata)
	if err != nil {
		return nil, err
	}
	sc := n.Scope
	f := newFilter(sc.OrgID)
	f.exactScope(sc)
	f.current()
	p, err := s.planVector(ctx, tx, f, n.Space, StrategyAuto)
	if err != nil {
		return nil, err
	}
	sql, args, settings := s.createSQL(f, p, n, meta, uuid.Must(uuid.NewV7()), s.now().UTC())
	op := &CreateOp{b: &pgx.Batch{}}
	// The plan choice (or the HNSW scan's settings) and the scope lock in one statement:
	// the duplicate checks run under the lock, in a statement of their own, so their
	// snapshot sees every write that held it before.
	op.b.Queue(settings.SQL, append(settings.Args, scopeLockKey(sc))...)
	op.b.Queue(sql, args...).QueryRow(func(r pgx.Row) error {
		var err error
		op.m, err = scanMemory(r, &op.reason, &op.sim)
		return err
	})
	if !endsTx {
		op.b.Queue(pg.DefaultPlansSQL)
	}
	return op, nil
}

// createSQL is Create's one statement and its arguments: the exact duplicate (same
// normalised text in the scope), else the nearest current memory of the scope if it is at
// least DedupThreshold similar (by plan p's strategy; after an HNSW scan that found none,
// by the exact sort, as nearest falls back), then the dedup hit recorded on the duplicate
// (dedupHitSQL's changes) or the new memory inserted (insertMemorySQL's row) — each
// returning memCols and the duplicate's reason and similarity (NULL for a new row). The
// near check does not run when the exact one answered. settings is the statement that must
// run before it, with the scope lock's key to be appended to its arguments: the plan
// choice, or the HNSW scan's settings.
func (s *Store) createSQL(f *filter, p vectorPlan, n NewMemory, meta []byte, id uuid.UUID, now time.Time) (string, []any, Statement) {
	pr := n.Provenance
	qf := p.f.clone()
	vec := qf.arg(pgvector.NewVector(n.Vector))
	qv := vec + "::vector(" + strconv.Itoa(n.Space.Dims) + ")"
	lim := qf.arg(1)
	hash := qf.arg(TextHash(n.Text))
	var checks string // the exact and near CTEs
	var settings Statement
	if p.strategy == StrategyExact {
		// One read of the scope for both checks (through its b-tree, filter.rows): each
		// current row's hash compared, and its distance when it is in the write's embedding
		// space (the exact check spans every space, the near one the write's). Two reads
		// before: the exact check's through the scope's rows cost as much as the near one's
		// (0.39 and 0.23 ms of a 1.8 ms write in a 152-row scope, auto_explain).
		checks = `scan AS MATERIALIZED (SELECT id, text_hash = ` + hash + ` AS same,
			` + spaceDistance(p.f, f, n.Space.Dims, qv) + ` AS d FROM ` + f.rows() + ` WHERE ` + f.sql() + `),
	exact AS (SELECT id FROM scan WHERE same),
	near AS (SELECT id, d FROM scan WHERE d IS NOT NULL ORDER BY d, id LIMIT ` + lim + `)`
	} else {
		var near string
		near, settings = s.vectorLeg(qf, qv, lim, n.Space.Dims, 1, p.strategy, p.ownIndex, false)
		if p.strategy == StrategyHNSW {
			exact, _ := s.vectorLeg(qf, qv, lim, n.Space.Dims, 1, StrategyExact, false, false)
			near = `WITH h AS (` + near + `) SELECT * FROM h UNION ALL
			SELECT * FROM (` + exact + `) e WHERE NOT EXISTS (SELECT 1 FROM h)`
		}
		// A large scope's exact check is the unique (org, scope, text_hash) index's.
		checks = `exact AS (SELECT id FROM memories WHERE ` + f.sql() + ` AND text_hash = ` + hash + `),
	near AS (` + near + `)`
	}
	a := qf.arg
	thr := a(s.o.DedupThreshold)
	now_, imp, pin := a(now), a(n.Importance), a(n.Pinned)
	key, agent, job, seq := a(pr.KeyID), a(pr.AgentID), a(pr.JobID), a(pr.EventSeq)
	mid := a(id)
	// The rider's CTE, written first so that the statement is one concatenation (its
	// parameters take the numbers after mid's: their order is free).
	tail := `
	SELECT * FROM hit UNION ALL SELECT * FROM ins`
	if n.Rider != nil {
		tail = `,
	rider AS (` + n.Rider(a) + `)` + tail
	}
	sql := `WITH ` + checks + `,
	dup AS (SELECT id AS dup_id, 'exact'::text AS reason, 1::float8 AS sim FROM exact
		UNION ALL
		SELECT id, 'near', 1 - d FROM near WHERE 1 - d >= ` + thr + ` AND NOT EXISTS (SELECT 1 FROM exact)
		LIMIT 1),
	hit AS (UPDATE memories SET ` + dedupHitSet(now_, imp, pin, key, agent, job, seq) + `
		FROM dup WHERE org_id = $1 AND id = dup.dup_id
		RETURNING ` + memCols + `, dup.reason, dup.sim),
	ins AS (INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id,
		session_id, kind, text, text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id,
		source_job_id, source_event_seq, embedding, embedder, model, dims, valid_from, updated_at)
		SELECT $1, ` + mid + `::uuid, ` + mid + `::uuid, 1, $2, $3, $4, ` + a(n.Kind) + `, ` + a(n.Text) + `, ` + hash + `, ` +
		a(meta) + `::jsonb, ` + imp + `, ` + pin + `, ` + a(n.Trust) + `, ` + key + `, ` + agent + `, ` + job + `, ` + seq + `, ` +
		vec + `, ` + a(n.Space.Embedder) + `, ` + a(n.Space.Model) + `, ` + a(n.Space.Dims) + `::int, ` + now_ + `, ` + now_ + `
		WHERE NOT EXISTS (SELECT 1 FROM dup)
		RETURNING ` + memCols + `, NULL::text, NULL::float8)` + tail
	if settings.SQL == "" {
		settings = Statement{SQL: `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), ` + lockCall(1)}
	} else {
		settings.SQL += `, ` + lockCall(len(settings.Args)+1)
	}
	return sql, qf.args, settings
}

// lockCall is the scope lock's call on parameter $i (lockScopeSQL's, in a select list).
func lockCall(i int) string {
	return `pg_advisory_xact_lock(hashtextextended($` + strconv.Itoa(i) + `, 0))`
}

// dedupHitSQL records a write that found its duplicate (Create's and CreateBatch's): the
// count and access time, the newer provenance, the higher importance, pinned if either was.
//
// A writer under an active quarantine (its key, or its agent: the provenance agent, else
// the memory's scope agent) changes nothing on a memory that is not held (issue 57 item 2
// follow-up): no provenance, count, importance or pin of a trusted memory comes from it,
// so it cannot take the memory over (provenance.exclude_key_ids of it would hide it).
var dedupHitSQL = `UPDATE memories SET ` + dedupHitSet("$3", "$4", "$5", "$6", "$7", "$8", "$9") + `
	WHERE org_id = $1 AND id = $2 RETURNING ` + memCols

// dedupHitSet is the SET list of a dedup hit on memories, from the write's parameters.
func dedupHitSet(now, imp, pin, key, agent, job, seq string) string {
	frozen := `(NOT memories.quarantined AND EXISTS (SELECT 1 FROM memory_quarantines qq
		WHERE qq.org_id = memories.org_id AND qq.status = 'active' AND qq.since <= ` + now + `
		  AND ((qq.key_id <> '' AND qq.key_id = ` + key + `)
		    OR (qq.agent_id <> '' AND qq.agent_id = coalesce(nullif(` + agent + `, ''), memories.agent_id)))))`
	return `dedup_count = dedup_count + CASE WHEN ` + frozen + ` THEN 0 ELSE 1 END,
	last_accessed_at = ` + now + `, updated_at = ` + now + `,
	importance = CASE WHEN ` + frozen + ` THEN importance ELSE greatest(importance, ` + imp + `) END,
	pinned = pinned OR (` + pin + ` AND NOT ` + frozen + `),
	created_by_key = CASE WHEN ` + frozen + ` THEN created_by_key WHEN ` + key + ` <> '' THEN ` + key + ` ELSE created_by_key END,
	source_agent_id = CASE WHEN ` + frozen + ` THEN source_agent_id WHEN ` + agent + ` <> '' THEN ` + agent + ` ELSE source_agent_id END,
	source_job_id = CASE WHEN ` + frozen + ` THEN source_job_id WHEN ` + job + ` <> '' THEN ` + job + ` ELSE source_job_id END,
	source_event_seq = CASE WHEN ` + frozen + ` THEN source_event_seq ELSE coalesce(` + seq + `, source_event_seq) END`
}

func dedupHitArgs(n NewMemory, dupID uuid.UUID, now time.Time) []any {
	return []any{n.Scope.OrgID, dupID, now, n.Importance, n.Pinned, n.Provenance.KeyID, n.Provenance.AgentID,
		n.Provenance.JobID, n.Provenance.EventSeq}
}

// insertMemorySQL inserts version 1 of a new memory.
const insertMemorySQL = `INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id,
	session_id, kind, text, text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id,
	source_job_id, source_event_seq, embedding, embedder, model, dims, valid_from, updated_at)
	VALUES ($1, $2, $2, 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $21)
	RETURNING ` + memCols

func insertMemoryArgs(n NewMemory, id uuid.UUID, hash []byte, now time.Time) ([]any, error) {
	meta, err := json.Marshal(n.Metadata)
	if err != nil {
		return nil, err
	}
	sc := n.Scope
	return []any{sc.OrgID, id, sc.UserID, sc.AgentID, sc.SessionID, n.Kind, n.Text, hash, meta, n.Importance, n.Pinned,
		n.Trust, n.Provenance.KeyID, n.Provenance.AgentID, n.Provenance.JobID, n.Provenance.EventSeq,
		pgvector.NewVector(n.Vector), n.Space.Embedder, n.Space.Model, n.Space.Dims, now}, nil
}

// Get returns one version of a memory (current or superseded).
func (s *Store) Get(ctx context.Context, q pg.DBTX, org string, id uuid.UUID) (Memory, error) {
	m, err := scanMemory(q.QueryRow(ctx, `SELECT `+memCols+` FROM memories WHERE org_id = $1 AND id = $2`, org, id))
	return m, pg.Interpret(err)
}

// History returns every version of the memory that id is a version of, oldest first.
func (s *Store) History(ctx context.Context, q pg.DBTX, org string, id uuid.UUID) ([]Memory, error) {
	rows, err := q.Query(ctx, `SELECT `+memCols+` FROM memories
		WHERE org_id = $1 AND root_id = (SELECT root_id FROM memories WHERE org_id = $1 AND id = $2)
		ORDER BY version`, org, id)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Memory, error) { return scanMemory(r) })
	if err != nil {
		return nil, pg.Interpret(err)
	}
	if len(ms) == 0 {
		return nil, strata.ErrNotFound
	}
	return ms, nil
}

// Patch changes a memory. Nil fields keep their value. Vector/Space are required when
// Text changes (the caller embeds the new text) and ignored otherwise.
type Patch struct {
	Text       *string
	Metadata   map[string]any // replaces the whole object when non-nil
	Importance *float64
	Pinned     *bool
	Trust      *string
	Provenance Provenance
	Vector     []float32
	Space      Space
	// IfVersion, when set, must equal the current version (If-Match).
	IfVersion *int64
}

// TextChanged reports whether p changes m's text (beyond normalisation-insensitive
// differences such as case and spacing, which still count as a change of wording).
func (p Patch) TextChanged(m Memory) bool { return p.Text != nil && *p.Text != m.Text }

// Supersede writes a new version of the memory id (which must be the current version):
// the old version gets valid_to and superseded_by, the new one version+1 with the same
// root_id. Every change is a new version, so the history shows who changed what and when.
// The vector is copied when the text is unchanged.
func (s *Store) Supersede(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID, p Patch) (Memory, error) {
	old, err := s.Get(ctx, tx, org, id)
	if err != nil {
		return Memory{}, err
	}
	if err := lockScope(ctx, tx, old.Scope(org)); err != nil {
		return Memory{}, err
	}
	// Re-read under the lock, with the row locked.
	old, err = scanMemory(tx.QueryRow(ctx, `SELECT `+memCols+` FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id))
	if err != nil {
		return Memory{}, pg.Interpret(err)
	}
	if old.SupersededBy != nil {
		return Memory{}, strata.Conflict("this memory version was superseded; patch the current version",
			map[string]any{"superseded_by": old.SupersededBy.String()})
	}
	if p.IfVersion != nil && *p.IfVersion != int64(old.Version) {
		return Memory{}, strata.Conflict("version mismatch (If-Match)", map[string]any{"version": old.Version})
	}
	textChanged := p.TextChanged(old)
	if textChanged {
		if err := checkVector(p.Vector, p.Space); err != nil {
			return Memory{}, err
		}
	}
	now := s.now().UTC()
	newID := uuid.Must(uuid.NewV7())
	if _, err := tx.Exec(ctx, `UPDATE memories SET valid_to = $3, superseded_by = $4, updated_at = $3
		WHERE org_id = $1 AND id = $2`, org, id, now, newID); err != nil {
		return Memory{}, pg.Interpret(err)
	}
	text := old.Text
	if p.Text != nil {
		text = *p.Text
	}
	meta := old.Metadata
	if p.Metadata != nil {
		meta = p.Metadata
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return Memory{}, err
	}
	imp := old.Importance
	if p.Importance != nil {
		imp = *p.Importance
	}
	pinned := old.Pinned
	if p.Pinned != nil {
		pinned = *p.Pinned
	}
	trust := old.Trust
	if p.Trust != nil {
		trust = *p.Trust
	} else if textChanged {
		// New wording is a new claim: the old text's trust (verified, user_stated) does not
		// carry over to it unless the writer says so (poisoning control, SECURITY.md).
		trust = DefaultTrust
	}
	// A text change is a new claim: its verification starts again at valid_from.
	vecSQL := `embedding, embedder, model, dims, embedding_next, next_embedder, next_model, next_dims, last_verified_at, last_verified_by`
	args := []any{org, newID, id, text, TextHash(text), metaJSON, imp, pinned, trust,
		p.Provenance.KeyID, p.Provenance.AgentID, p.Provenance.JobID, p.Provenance.EventSeq, now}
	if textChanged {
		vecSQL = `$15::vector, $16, $17, $18::int, NULL::vector, NULL, NULL, NULL::int, NULL::timestamptz, NULL`
		args = append(args, pgvector.NewVector(p.Vector), p.Space.Embedder, p.Space.Model, p.Space.Dims)
	}
	m, err := scanMemory(tx.QueryRow(ctx, `INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id,
		session_id, kind, text, text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id,
		source_job_id, source_event_seq, embedding, embedder, model, dims, embedding_next, next_embedder, next_model,
		next_dims, last_verified_at, last_verified_by, access_count, last_accessed_at, valid_from, updated_at)
		SELECT $1, $2, root_id, version + 1, user_id, agent_id, session_id, kind, $4, $5, $6, $7, $8, $9,
		$10, $11, $12, $13, `+vecSQL+`, access_count, last_accessed_at, $14, $14
		FROM memories WHERE org_id = $1 AND id = $3
		RETURNING `+memCols, args...))
	return m, pg.Interpret(err)
}

// Verify records that someone re-confirmed the current version id now.
func (s *Store) Verify(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID, by string) (Memory, error) {
	m, err := scanMemory(tx.QueryRow(ctx, `UPDATE memories SET last_verified_at = $3, last_verified_by = $4, updated_at = $3
		WHERE org_id = $1 AND id = $2 AND valid_to IS NULL RETURNING `+memCols, org, id, s.now().UTC(), by))
	if errors.Is(err, pgx.ErrNoRows) {
		if cur, gerr := s.Get(ctx, tx, org, id); gerr == nil && cur.SupersededBy != nil {
			return Memory{}, strata.Conflict("this memory version was superseded; verify the current version",
				map[string]any{"superseded_by": cur.SupersededBy.String()})
		}
	}
	return m, pg.Interpret(err)
}

// Delete removes every version of the memory id belongs to — rows, text, vectors, history
// — and the stored idempotent responses that quoted any of them, so no copy of the text
// stays in the database. The retrieval log keeps its rows (ids only, no text). It returns
// the ids removed.
func (s *Store) Delete(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID) ([]uuid.UUID, error) {
	rows, err := tx.Query(ctx, `DELETE FROM memories
		WHERE org_id = $1 AND root_id = (SELECT root_id FROM memories WHERE org_id = $1 AND id = $2)
		RETURNING id`, org, id)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	if len(ids) == 0 {
		return nil, strata.ErrNotFound
	}
	strs := make([]string, len(ids))
	for i, x := range ids {
		strs[i] = x.String()
	}
	_, err = tx.Exec(ctx, `DELETE FROM idempotency_keys k WHERE org_id = $1
		AND EXISTS (SELECT 1 FROM unnest($2::text[]) i WHERE position(convert_to(i, 'UTF8') IN k.response_body) > 0)`, org, strs)
	return ids, pg.Interpret(err)
}
