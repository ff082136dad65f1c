package semantic

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
)

// A search runs as one statement (fusedSQL): the vector and full-text legs return ids,
// distances or ranks, and the few columns the ranking reads (rankCols); the statement fuses
// them and reads the other columns (restCols) only for the candidates its own estimate of
// the final score puts in the top k, give or take topSlack. Go then ranks every candidate
// exactly (Store.rank, as before) and, should a result of that exact ranking lack its
// columns (a score within rounding of the cut that the estimate placed past topSlack: not
// seen), reads them in a statement of its own. Before, each leg returned up to 40 whole
// rows — text, metadata, provenance — of which at most k were served.

// rankCols are the columns a candidate's rank and staleness need.
const rankCols = `id, kind, pinned, importance, access_count, valid_from, last_verified_at`

// restCols are memCols without rankCols, in memCols' order otherwise.
const restCols = `root_id, version, text, user_id, agent_id, session_id, metadata, trust, created_by_key,
	source_agent_id, source_job_id, source_event_seq, embedder, model, dims, valid_to, superseded_by,
	last_accessed_at, dedup_count, coalesce(last_verified_by, '') AS last_verified_by, updated_at`

// topSlack is how far below the k-th best estimated score a candidate still has its columns
// read. The estimate is the exact ranking's formula in float8 before rounding to 1e-6; the
// two differ by far less.
const topSlack = 1e-4

// candidate is one fused candidate: its legs' ranks and the memory (with rest: every column).
type candidate struct {
	bd   Breakdown
	mem  Memory
	meta []byte
	rest bool
}

// fusedQuery is what fusedSQL needs beyond the filters.
type fusedQuery struct {
	vec        pgvector.Vector
	dims, n    int
	text       string // "": no full-text leg
	smallScope bool   // the full-text leg reads the scope first (see textScopeFirstAtMost)
	topK       int
	now        time.Time
}

// fusedSQL is the search as one statement over vf (the vector leg's filter: f with the
// space's conditions) and f (the full-text leg's, whose placeholders are a prefix of vf's).
// Its rows: id, vector rank and distance, text rank and score, the rest of rankCols, the
// top flag, restCols (NULL unless top).
func (s *Store) fusedSQL(vf, f *filter, fq fusedQuery, strategy Strategy, ownIndex bool) (string, []any, Statement) {
	qf := vf.clone()
	qv := qf.arg(fq.vec) + "::vector(" + strconv.Itoa(fq.dims) + ")"
	lim := qf.arg(fq.n)
	var sm, t, vsql string // sm: the scope's rows, when the legs share them
	var settings Statement
	if fq.text == "" {
		t = `t AS (SELECT NULL::uuid AS id, NULL::text AS kind, NULL::boolean AS pinned, NULL::real AS importance,
			NULL::bigint AS access_count, NULL::timestamptz AS valid_from, NULL::timestamptz AS last_verified_at,
			NULL::tid AS tid, NULL::real AS r WHERE false)`
	} else {
		tq := qf.arg(fq.text)
		from, where, tid := `memories`, f.sql()+` AND `, `ctid AS tid`
		if fq.smallScope { // smallScope: the exact strategy
			// The scope's rows first, read once for both legs: each row's words, and its
			// distance when it is in the query's embedding space (the vector leg's further
			// conditions); then the words, one right plan, and the nearest of the distances.
			// The vector leg read the same rows a second time before (0.33 of a 1.7 ms search
			// in a 152-row scope, auto_explain).
			sm = `sm AS MATERIALIZED (SELECT ` + rankCols + `, ` + f.tid() + `, tsv, ` + spaceDistance(vf, f, fq.dims, qv) + ` AS d
				FROM ` + f.rows() + ` WHERE ` + f.sql() + `), `
			vsql = `SELECT ` + rankCols + `, tid, d FROM sm WHERE d IS NOT NULL ORDER BY d, id LIMIT ` + lim
			from, where, tid = `sm`, ``, `tid`
		}
		// OFFSET 0 keeps the query's words parsed once: flattened, tq's expression was
		// evaluated for every row, in the match and again in the rank (3.2 ms against 0.9
		// for a 152-row scope whose rows all match).
		t += `t AS MATERIALIZED (SELECT ` + rankCols + `, ` + tid + `, ts_rank_cd(tsv, q) AS r
			FROM ` + from + `, (SELECT replace(plainto_tsquery('simple', ` + tq + `)::text, ' & ', ' | ')::tsquery AS q OFFSET 0) tq
			WHERE ` + where + `q <> ''::tsquery AND tsv @@ q ORDER BY r DESC, id LIMIT ` + lim + `)`
	}
	if sm == "" {
		vsql, settings = s.vectorLegOf(qf, qv, lim, fq.dims, fq.n, strategy, ownIndex, rankCols, true)
	}
	k := qf.arg(s.o.RRFK) + "::float8"
	score := `(coalesce(1 / (` + k + ` + vrk), 0) + coalesce(1 / (` + k + ` + trk), 0)) / (2 / (` + k + ` + 1))
		* (1 + ` + qf.arg(s.o.WRecency) + `::float8 * CASE WHEN pinned THEN 1 ELSE power(0.5::float8,
			greatest(extract(epoch FROM ` + qf.arg(fq.now) + `::timestamptz - greatest(valid_from, coalesce(last_verified_at, valid_from)))::float8 / 3600, 0)
			/ ` + qf.arg(s.o.HalfLife.Hours()) + `::float8) END
		+ ` + qf.arg(s.o.WImportance) + `::float8 * importance
		+ ` + qf.arg(s.o.WAccess) + `::float8 * least(ln(1 + access_count) / ln(101), 1))`
	sql := `WITH ` + sm + `v AS MATERIALIZED (` + vsql + `), ` + t + `,
	c AS (SELECT coalesce(v.id, t.id) AS id, v.vrk, v.d, t.trk, t.r, coalesce(v.kind, t.kind) AS kind,
		coalesce(v.pinned, t.pinned) AS pinned, coalesce(v.importance, t.importance) AS importance,
		coalesce(v.access_count, t.access_count) AS access_count, coalesce(v.valid_from, t.valid_from) AS valid_from,
		coalesce(v.last_verified_at, t.last_verified_at) AS last_verified_at, coalesce(v.tid, t.tid) AS tid
		FROM (SELECT *, row_number() OVER (ORDER BY d, id) AS vrk FROM v) v
		FULL JOIN (SELECT *, row_number() OVER (ORDER BY r DESC, id) AS trk FROM t) t ON v.id = t.id),
	e AS (SELECT c.*, ` + score + ` AS s FROM c),
	x AS (SELECT e.*, s >= coalesce(nth_value(s, ` + qf.arg(fq.topK) + `) OVER (ORDER BY s DESC
		ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING), '-Infinity') - ` + strconv.FormatFloat(s.restSlack, 'g', -1, 64) + ` AS top FROM e)
	SELECT x.id, x.vrk, x.d, x.trk, x.r, x.kind, x.pinned, x.importance, x.access_count, x.valid_from,
		x.last_verified_at, x.top, m.* FROM x
	LEFT JOIN LATERAL (SELECT ` + restCols + ` FROM memories m WHERE m.org_id = $1 AND m.ctid = x.tid AND x.top OFFSET 0) m ON true`
	// OFFSET 0 keeps the lateral subquery from being flattened into the join, where x.top
	// became a join filter applied after reading every candidate's row; in the subquery it
	// is a one-time filter: a candidate outside the top reads nothing.
	//
	// A top candidate's row is read by its ctid (tid), which its leg read under the same
	// snapshot: a TID scan of the org's partition, whatever the partition's statistics. By
	// (org_id, id), a partition Postgres had not analysed got a generic plan that read the
	// org through the scope b-tree for each of the top rows and filtered on id: 1,520 rows
	// ten times in a 10-user org, 6.4 ms of an 8.1 ms search (auto_explain, the mem0 peer
	// bench on a server with autovacuum off).
	return sql, qf.args, settings
}

// candidateScanner scans fusedSQL's rows into candidates through one set of destinations
// for every row: a row outside the top costs the allocation of its kind alone.
type candidateScanner struct {
	id, rootID pgtype.UUID
	vrk, trk   pgtype.Int8
	d, r       pgtype.Float8
	imp        float32
	verified   pgtype.Timestamptz
	c          candidate
	// light scans the rank columns, rest the others (nil skips a column).
	light, rest []any
}

func newCandidateScanner() *candidateScanner {
	cs := &candidateScanner{}
	m := &cs.c.mem
	cs.light = append([]any{&cs.id, &cs.vrk, &cs.d, &cs.trk, &cs.r, &m.Kind, &m.Pinned, &cs.imp, &m.AccessCount,
		&m.ValidFrom, &cs.verified, &cs.c.rest}, make([]any, 21)...)
	cs.rest = append(make([]any, 12), &cs.rootID, &m.Version, &m.Text, &m.UserID, &m.AgentID, &m.SessionID, &cs.c.meta,
		&m.Trust, &m.Provenance.KeyID, &m.Provenance.AgentID, &m.Provenance.JobID, &m.Provenance.EventSeq,
		&m.Embedding.Embedder, &m.Embedding.Model, &m.Embedding.Dims, &m.ValidTo, &m.SupersededBy,
		&m.LastAccessed, &m.DedupCount, &m.VerifiedBy, &m.UpdatedAt)
	return cs
}

// scan scans the current row of rs: its restCols only when the row is flagged top.
func (cs *candidateScanner) scan(rs pgx.Rows) (candidate, error) {
	cs.c = candidate{}
	if err := rs.Scan(cs.light...); err != nil {
		return candidate{}, err
	}
	if cs.c.rest {
		if err := rs.Scan(cs.rest...); err != nil {
			return candidate{}, err
		}
	}
	c := cs.c
	m := &c.mem
	m.ID = cs.id.Bytes
	m.Importance = float64(cs.imp)
	m.ValidFrom = m.ValidFrom.UTC()
	if cs.verified.Valid {
		t := cs.verified.Time.UTC()
		m.LastVerified = &t
	}
	if cs.vrk.Valid {
		c.bd.VectorRank, c.bd.VectorSimilarity = int(cs.vrk.Int64), 1-cs.d.Float64
	}
	if cs.trk.Valid {
		c.bd.TextRank, c.bd.TextScore = int(cs.trk.Int64), cs.r.Float64
	}
	if c.rest {
		m.RootID = cs.rootID.Bytes
		m.UpdatedAt = m.UpdatedAt.UTC()
		utcp(m.ValidTo, m.LastAccessed)
	}
	return c, nil
}

// fusedResult is what searchFused found.
type fusedResult struct {
	cands          []candidate
	strategy       Strategy
	scopeSize      int
	fallback       bool
	vectorN, textN int
}

// searchFused runs the search statement in one round trip with before's statements (the
// org's policy) queued in front of it, choosing the vector leg's strategy as nearest does.
func (s *Store) searchFused(ctx context.Context, tx pgx.Tx, vfBase, f *filter, sp Space, strategy Strategy,
	fq fusedQuery, before []func(*pgx.Batch)) (fusedResult, error) {
	res := fusedResult{strategy: strategy, scopeSize: -1}
	p, err := s.planVector(ctx, tx, vfBase, sp, strategy)
	if err != nil {
		return res, err
	}
	res.strategy, res.scopeSize = p.strategy, p.scopeSize
	run := func(strategy Strategy) ([]candidate, error) {
		q := fq
		q.smallScope = smallScope(strategy, res.scopeSize)
		sql, args, settings := s.fusedSQL(p.f, f, q, strategy, p.ownIndex)
		b := &pgx.Batch{}
		// The policy read and the exact vector leg read by key or through the scope's b-tree,
		// as does a small scope's full-text leg: generic plans (pg.GenericPlansSQL). An HNSW
		// scan (its settings) or a large scope's full-text leg asks for custom ones.
		b.Queue(pg.GenericPlansSQL)
		for _, add := range before {
			add(b)
		}
		before = nil // once: an exact fallback does not repeat them
		if settings.SQL != "" {
			b.Queue(settings.SQL, settings.Args...)
		} else if q.text != "" && !q.smallScope {
			b.Queue(pg.CustomPlansSQL)
		}
		var cands []candidate
		b.Queue(sql, args...).Query(func(rs pgx.Rows) error {
			defer rs.Close()
			cs := newCandidateScanner()
			for rs.Next() {
				c, err := cs.scan(rs)
				if err != nil {
					return err
				}
				cands = append(cands, c)
			}
			return rs.Err()
		})
		b.Queue(pg.DefaultPlansSQL)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, pg.Interpret(err)
		}
		return cands, nil
	}
	count := func(cands []candidate) (v, t int) {
		for i := range cands {
			if cands[i].bd.VectorRank > 0 {
				v++
			}
			if cands[i].bd.TextRank > 0 {
				t++
			}
		}
		return v, t
	}
	cands, err := run(res.strategy)
	if err != nil {
		return res, err
	}
	res.vectorN, res.textN = count(cands)
	if res.strategy == StrategyHNSW && res.vectorN < fq.n && strategy == StrategyAuto {
		// As in nearest: the iterative scan gave up before n rows passed the filters.
		res.fallback = true
		if cands, err = run(StrategyExact); err != nil {
			return res, err
		}
		res.vectorN, res.textN = count(cands)
	}
	res.cands = cands
	return res, nil
}

// fillRest reads the columns of the results that the statement did not (see topSlack).
func (s *Store) fillRest(ctx context.Context, tx pgx.Tx, org string, out []Result, cands map[uuid.UUID]*candidate) error {
	var ids []uuid.UUID
	for _, r := range out {
		if !cands[r.Memory.ID].rest {
			ids = append(ids, r.Memory.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ms, err := s.GetMany(ctx, tx, org, ids)
	if err != nil {
		return err
	}
	byID := make(map[uuid.UUID]Memory, len(ms))
	for _, m := range ms {
		byID[m.ID] = m
	}
	for i := range out {
		if m, ok := byID[out[i].Memory.ID]; ok {
			out[i].Memory = m
		}
	}
	return nil
}
