package semantic

// Lifecycle queries for the consolidation and eviction workers (internal/consolidation,
// internal/eviction): candidates for eviction by rule, deletion of lineages and of
// superseded versions, near-duplicate pairs, session facts for promotion, and the writes
// that merge and promote. Every function takes the caller's org-bound transaction; pinned
// memories are never eviction candidates.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Ref identifies a memory version for lifecycle work (no content).
type Ref struct {
	ID     uuid.UUID
	RootID uuid.UUID
	Kind   string
}

// unrestricted is the SQL condition "memory m's data subject is not restricted" (GDPR
// Art. 18, issue 57): no eviction rule lists (and so deletes) such a memory; it is kept
// until the restriction is lifted or compliance erases it.
const unrestricted = `NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = m.org_id AND r.user_id = m.user_id)`

// KindCutoffs gives a cutoff time per memory kind: Kinds[i] uses Cutoffs[i], every other
// kind Default. The zero time means "rule off" (nothing is older than year 1).
type KindCutoffs struct {
	Kinds   []string
	Cutoffs []time.Time
	Default time.Time
}

func collectRefs(rows pgx.Rows, err error) ([]Ref, error) {
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Ref, error) {
		var x Ref
		err := r.Scan(&x.ID, &x.RootID, &x.Kind)
		return x, err
	})
	return out, pg.Interpret(err)
}

const kindCutoffsCTE = `WITH k(kind, cutoff) AS (SELECT * FROM unnest($2::text[], $3::timestamptz[]))`

// SupersededBefore lists superseded versions whose valid_to is older than their kind's
// cutoff, oldest first. Versions of a lineage whose current version is pinned are kept.
func (s *Store) SupersededBefore(ctx context.Context, q pg.DBTX, org string, c KindCutoffs, limit int) ([]Ref, error) {
	return collectRefs(q.Query(ctx, kindCutoffsCTE+`
		SELECT m.id, m.root_id, m.kind FROM memories m LEFT JOIN k ON k.kind = m.kind
		WHERE m.org_id = $1 AND m.valid_to IS NOT NULL AND m.valid_to < coalesce(k.cutoff, $4) AND NOT m.pinned
		  AND `+unrestricted+`
		  AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.org_id = m.org_id AND c.root_id = m.root_id
		                  AND c.valid_to IS NULL AND c.pinned)
		ORDER BY m.valid_to, m.id LIMIT $5`, org, c.Kinds, c.Cutoffs, c.Default, limit))
}

// CurrentWrittenBefore lists current, unpinned memories whose current version was written
// before their kind's cutoff (max age), oldest first, skipping exclude.
func (s *Store) CurrentWrittenBefore(ctx context.Context, q pg.DBTX, org string, c KindCutoffs, exclude []uuid.UUID, limit int) ([]Ref, error) {
	return collectRefs(q.Query(ctx, kindCutoffsCTE+`
		SELECT m.id, m.root_id, m.kind FROM memories m LEFT JOIN k ON k.kind = m.kind
		WHERE m.org_id = $1 AND m.valid_to IS NULL AND NOT m.pinned AND m.valid_from < coalesce(k.cutoff, $4)
		  AND `+unrestricted+`
		  AND NOT (m.id = ANY(coalesce($5::uuid[], '{}')))
		ORDER BY m.valid_from, m.id LIMIT $6`, org, c.Kinds, c.Cutoffs, c.Default, exclude, limit))
}

// lastActive is when a memory was last written, served or verified.
const lastActive = `greatest(m.valid_from, coalesce(m.last_accessed_at, m.valid_from), coalesce(m.last_verified_at, m.valid_from))`

// CurrentInactiveBefore lists current, unpinned memories last written, served or verified
// before their kind's cutoff (max inactivity), least recently active first.
func (s *Store) CurrentInactiveBefore(ctx context.Context, q pg.DBTX, org string, c KindCutoffs, exclude []uuid.UUID, limit int) ([]Ref, error) {
	return collectRefs(q.Query(ctx, kindCutoffsCTE+`
		SELECT m.id, m.root_id, m.kind FROM memories m LEFT JOIN k ON k.kind = m.kind
		WHERE m.org_id = $1 AND m.valid_to IS NULL AND NOT m.pinned AND `+lastActive+` < coalesce(k.cutoff, $4)
		  AND `+unrestricted+`
		  AND NOT (m.id = ANY(coalesce($5::uuid[], '{}')))
		ORDER BY `+lastActive+`, m.id LIMIT $6`, org, c.Kinds, c.Cutoffs, c.Default, exclude, limit))
}

// RetentionScoreSQL is the retention score eviction ranks by (docs/workers.md):
// 0.4·importance + 0.4·recency + 0.2·access, recency = 0.5^(days since last active / 30),
// access = min(1, ln(1+access_count)/ln(101)). $N is the clock.
func retentionScoreSQL(nowParam string) string {
	return `(0.4 * m.importance + 0.4 * power(0.5, greatest(0, extract(epoch FROM (` + nowParam + ` - ` + lastActive + `))) / 2592000.0)
		+ 0.2 * least(1.0, ln(1 + m.access_count) / ln(101)))`
}

// OverCap lists, per exact scope (user, agent, session) and kind, the current unpinned
// memories beyond the kind's cap by retention score (lowest first), not counting exclude
// (already chosen by another rule). caps[i] applies to kinds[i], defCap to other kinds;
// 0 means no cap.
func (s *Store) OverCap(ctx context.Context, q pg.DBTX, org string, kinds []string, caps []int32, defCap int32, now time.Time, exclude []uuid.UUID, limit int) ([]Ref, error) {
	return collectRefs(q.Query(ctx, `WITH k(kind, cap) AS (SELECT * FROM unnest($2::text[], $3::int[])),
		ranked AS (
			SELECT m.id, m.root_id, m.kind, coalesce(k.cap, $4) AS cap, `+retentionScoreSQL("$5::timestamptz")+` AS score,
				row_number() OVER (PARTITION BY m.user_id, m.agent_id, m.session_id, m.kind
					ORDER BY `+retentionScoreSQL("$5::timestamptz")+` DESC, m.id DESC) AS rn
			FROM memories m LEFT JOIN k ON k.kind = m.kind
			WHERE m.org_id = $1 AND m.valid_to IS NULL AND NOT m.pinned AND NOT (m.id = ANY(coalesce($6::uuid[], '{}')))
			  AND `+unrestricted+`)
		SELECT id, root_id, kind FROM ranked WHERE cap > 0 AND rn > cap ORDER BY score, id LIMIT $7`,
		org, kinds, caps, defCap, now, exclude, limit))
}

// CountStaleFacts counts current facts past the verification age (cutoff): what search
// flags stale.
func (s *Store) CountStaleFacts(ctx context.Context, q pg.DBTX, org string, cutoff time.Time) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM memories m WHERE m.org_id = $1 AND m.valid_to IS NULL AND m.kind = 'fact'
		AND greatest(m.valid_from, coalesce(m.last_verified_at, m.valid_from)) < $2`, org, cutoff).Scan(&n)
	return n, pg.Interpret(err)
}

// purgeResponses deletes stored idempotent responses that quote any of ids, so no copy of
// a removed memory's text survives there.
func purgeResponses(ctx context.Context, tx pgx.Tx, org string, ids []uuid.UUID) error {
	strs := make([]string, len(ids))
	for i, x := range ids {
		strs[i] = x.String()
	}
	_, err := tx.Exec(ctx, `DELETE FROM idempotency_keys k WHERE org_id = $1
		AND EXISTS (SELECT 1 FROM unnest($2::text[]) i WHERE position(convert_to(i, 'UTF8') IN k.response_body) > 0)`, org, strs)
	return pg.Interpret(err)
}

// DeleteLineages removes every version of the memories rooted at roots (as DELETE
// /v1/memories/{id} does), and stored responses quoting them. Lineages whose current
// version is pinned are skipped (pinned is re-checked under the row locks). It returns
// the version ids removed.
func (s *Store) DeleteLineages(ctx context.Context, tx pgx.Tx, org string, roots []uuid.UUID) ([]uuid.UUID, error) {
	if len(roots) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `DELETE FROM memories m WHERE m.org_id = $1 AND m.root_id = ANY($2::uuid[])
		AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.org_id = m.org_id AND c.root_id = m.root_id
		                AND c.valid_to IS NULL AND c.pinned)
		RETURNING m.id`, org, roots)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	if len(ids) > 0 {
		err = purgeResponses(ctx, tx, org, ids)
	}
	return ids, err
}

// DeleteVersions removes the given superseded, unpinned versions (never a current one)
// and stored responses quoting them.
func (s *Store) DeleteVersions(ctx context.Context, tx pgx.Tx, org string, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `DELETE FROM memories WHERE org_id = $1 AND id = ANY($2::uuid[])
		AND valid_to IS NOT NULL AND NOT pinned RETURNING id`, org, ids)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, pg.Interpret(err)
	}
	if len(out) > 0 {
		err = purgeResponses(ctx, tx, org, out)
	}
	return out, err
}

// GetMany reads the given versions, in id order.
func (s *Store) GetMany(ctx context.Context, q pg.DBTX, org string, ids []uuid.UUID) ([]Memory, error) {
	rows, err := q.Query(ctx, `SELECT `+memCols+` FROM memories WHERE org_id = $1 AND id = ANY($2::uuid[]) ORDER BY id`, org, ids)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Memory, error) { return scanMemory(r) })
	return ms, pg.Interpret(err)
}

// Vector returns a version's stored vector.
func (s *Store) Vector(ctx context.Context, q pg.DBTX, org string, id uuid.UUID) ([]float32, error) {
	var v pgvector.Vector
	err := q.QueryRow(ctx, `SELECT embedding FROM memories WHERE org_id = $1 AND id = $2`, org, id).Scan(&v)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return v.Slice(), nil
}

// Insert stores a memory without the near-duplicate check (consolidation's own writes: a
// job summary must not be folded into another job's summary). An exact duplicate (same
// normalised text in the same scope) returns the existing memory and true.
func (s *Store) Insert(ctx context.Context, tx pgx.Tx, n NewMemory) (Memory, bool, error) {
	if err := checkVector(n.Vector, n.Space); err != nil {
		return Memory{}, false, err
	}
	if n.Trust == "" {
		n.Trust = DefaultTrust
	}
	if n.Metadata == nil {
		n.Metadata = map[string]any{}
	}
	sc := n.Scope
	if err := lockScope(ctx, tx, sc); err != nil {
		return Memory{}, false, err
	}
	hash := TextHash(n.Text)
	m, err := scanMemory(tx.QueryRow(ctx, `SELECT `+memCols+` FROM memories WHERE org_id = $1 AND user_id = $2
		AND agent_id = $3 AND session_id = $4 AND text_hash = $5 AND valid_to IS NULL`,
		sc.OrgID, sc.UserID, sc.AgentID, sc.SessionID, hash))
	if err == nil {
		return m, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Memory{}, false, pg.Interpret(err)
	}
	meta, err := json.Marshal(n.Metadata)
	if err != nil {
		return Memory{}, false, err
	}
	now := s.now().UTC()
	m, err = scanMemory(tx.QueryRow(ctx, `INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id,
		session_id, kind, text, text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id,
		source_job_id, source_event_seq, embedding, embedder, model, dims, valid_from, updated_at)
		VALUES ($1, $2, $2, 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $21)
		RETURNING `+memCols,
		sc.OrgID, uuid.Must(uuid.NewV7()), sc.UserID, sc.AgentID, sc.SessionID, n.Kind, n.Text, hash, meta, n.Importance,
		n.Pinned, n.Trust, n.Provenance.KeyID, n.Provenance.AgentID, n.Provenance.JobID, n.Provenance.EventSeq,
		pgvector.NewVector(n.Vector), n.Space.Embedder, n.Space.Model, n.Space.Dims, now))
	return m, false, pg.Interpret(err)
}

// Pair is two current memories of one scope and kind and their cosine similarity.
type Pair struct {
	A, B       uuid.UUID
	Similarity float64
}

func collectPairs(rows pgx.Rows, err error) ([]Pair, error) {
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pair, error) {
		var p Pair
		err := r.Scan(&p.A, &p.B, &p.Similarity)
		return p, err
	})
	return out, pg.Interpret(err)
}

// Quarantined versions (quarantine.go) are never merged or promoted.
//
// NearDuplicatePairs finds, for each current memory written or changed at or after since
// (at most limit of them), its nearest current neighbours (up to 8) in the same exact scope,
// kind and embedding space with cosine similarity ≥ threshold. Each pair is (older id,
// newer id) once.
func (s *Store) NearDuplicatePairs(ctx context.Context, q pg.DBTX, org string, since time.Time, threshold float64, limit int) ([]Pair, error) {
	return collectPairs(q.Query(ctx, `SELECT DISTINCT least(m.id, n.id), greatest(m.id, n.id), n.sim
		FROM (SELECT * FROM memories WHERE org_id = $1 AND valid_to IS NULL AND updated_at >= $2 AND NOT quarantined
		      ORDER BY updated_at, id LIMIT $4) m
		CROSS JOIN LATERAL (
			SELECT o.id, 1 - (o.embedding <=> m.embedding) AS sim FROM memories o
			WHERE o.org_id = m.org_id AND o.user_id = m.user_id AND o.agent_id = m.agent_id
			  AND o.session_id = m.session_id AND o.kind = m.kind AND o.valid_to IS NULL AND o.id <> m.id AND NOT o.quarantined
			  AND o.dims = m.dims AND o.model = m.model AND o.embedder = m.embedder
			ORDER BY (o.embedding <=> m.embedding) + 0 LIMIT 8) n
		WHERE n.sim >= $3`, org, since, threshold, limit))
}

// SessionFactPairs finds pairs of current session-level memories of the same user and
// kind (kinds) in different sessions with cosine similarity ≥ threshold: one fact stated
// in several sessions.
func (s *Store) SessionFactPairs(ctx context.Context, q pg.DBTX, org string, kinds []string, threshold float64, limit int) ([]Pair, error) {
	return collectPairs(q.Query(ctx, `SELECT DISTINCT least(m.id, n.id), greatest(m.id, n.id), n.sim
		FROM (SELECT * FROM memories WHERE org_id = $1 AND valid_to IS NULL AND session_id <> '' AND user_id <> ''
		      AND NOT pinned AND NOT quarantined AND kind = ANY($2::text[]) ORDER BY id LIMIT $4) m
		CROSS JOIN LATERAL (
			SELECT o.id, 1 - (o.embedding <=> m.embedding) AS sim FROM memories o
			WHERE o.org_id = m.org_id AND o.user_id = m.user_id AND o.session_id <> '' AND o.session_id <> m.session_id
			  AND o.kind = m.kind AND o.valid_to IS NULL AND NOT o.pinned AND NOT o.quarantined
			  AND o.dims = m.dims AND o.model = m.model AND o.embedder = m.embedder
			ORDER BY (o.embedding <=> m.embedding) + 0 LIMIT 8) n
		WHERE n.sim >= $3`, org, kinds, threshold, limit))
}

// SessionFacts lists current, unpinned session-level memories that name a user (kinds),
// in id order: the promotion candidates.
func (s *Store) SessionFacts(ctx context.Context, q pg.DBTX, org string, kinds []string, limit int) ([]Memory, error) {
	rows, err := q.Query(ctx, `SELECT `+memCols+` FROM memories WHERE org_id = $1 AND valid_to IS NULL
		AND session_id <> '' AND user_id <> '' AND NOT pinned AND NOT quarantined AND kind = ANY($2::text[]) ORDER BY id LIMIT $3`, org, kinds, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Memory, error) { return scanMemory(r) })
	return ms, pg.Interpret(err)
}

// ReadStats is what the retrieval log says about a set of memory versions.
type ReadStats struct {
	Reads    int
	Sessions []string // distinct non-empty session ids of the requests served
	LastRead *time.Time
}

// RetrievalStats summarises the retrieval log of ids.
func (s *Store) RetrievalStats(ctx context.Context, q pg.DBTX, org string, ids []uuid.UUID) (ReadStats, error) {
	var st ReadStats
	err := q.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(DISTINCT session_id) FILTER (WHERE session_id <> ''), '{}'),
		max(served_at) FROM memory_retrievals WHERE org_id = $1 AND memory_id = ANY($2::uuid[])`, org, ids).
		Scan(&st.Reads, &st.Sessions, &st.LastRead)
	if st.LastRead != nil {
		t := st.LastRead.UTC()
		st.LastRead = &t
	}
	return st, pg.Interpret(err)
}

// SupersedeInto closes the current versions ids (valid_to = now, superseded_by = by):
// they stay readable in their history and to as_of searches, but search no longer serves
// them. Pinned versions are left alone. It returns the ids closed.
func (s *Store) SupersedeInto(ctx context.Context, tx pgx.Tx, org string, ids []uuid.UUID, by uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `UPDATE memories SET valid_to = $3, superseded_by = $4, updated_at = $3
		WHERE org_id = $1 AND id = ANY($2::uuid[]) AND valid_to IS NULL AND NOT pinned AND id <> $4 RETURNING id`,
		org, ids, s.now().UTC(), by)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return out, pg.Interpret(err)
}

// AddAccess adds to a version's access and dedup counters (a merged memory keeps the
// reads of what it absorbed, so its retention score does not drop).
func (s *Store) AddAccess(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID, accesses int64, dedups int) error {
	tag, err := tx.Exec(ctx, `UPDATE memories SET access_count = access_count + $3, dedup_count = dedup_count + $4
		WHERE org_id = $1 AND id = $2`, org, id, accesses, dedups)
	if err == nil && tag.RowsAffected() == 0 {
		return strata.ErrNotFound
	}
	return pg.Interpret(err)
}
