package semantic

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Strategy is how the vector leg finds its nearest neighbours.
type Strategy string

// Strategies. Auto picks exact for scopes of at most Options.ExactBelow current
// memories, HNSW otherwise (and falls back to exact when HNSW comes back short).
const (
	StrategyAuto  Strategy = ""
	StrategyExact Strategy = "exact"
	StrategyHNSW  Strategy = "hnsw"
	// StrategyHNSWPlain is an HNSW scan without iterative scanning: the naive query,
	// kept for benchmarks and tests that show why it is not used.
	StrategyHNSWPlain Strategy = "hnsw_plain"
)

// filter builds a WHERE clause with numbered parameters.
type filter struct {
	conds []string
	args  []any
	// org, user and the flags say which scope index (scopeindex.go) the filter's rows fall
	// under: one user level (visibleTo, exactScope) and current memories.
	org, user         string
	scoped, isCurrent bool
	// probes, when set (visibleTo, exactScope), is a FROM item that reads memories one
	// scope at a time: see rows.
	probes string
}

func newFilter(org string) *filter {
	f := &filter{org: org}
	f.add("org_id = ?", org)
	return f
}

// add appends cond, replacing each ? with the next parameter number.
func (f *filter) add(cond string, args ...any) {
	var b strings.Builder
	i := 0
	for _, r := range cond {
		if r == '?' {
			b.WriteString(f.arg(args[i]))
			i++
			continue
		}
		b.WriteRune(r)
	}
	f.conds = append(f.conds, b.String())
}

// arg adds a parameter and returns its placeholder.
func (f *filter) arg(v any) string {
	f.args = append(f.args, v)
	return "$" + strconv.Itoa(len(f.args))
}

func (f *filter) sql() string { return strings.Join(f.conds, " AND ") }

// rows is the FROM item of a statement that reads f's rows through the scope b-tree (the
// exact vector leg, a small scope's full-text leg, the scope's count, a write's duplicate
// checks under the exact strategy): memories itself, or for a scope filter (visibleTo, exactScope)
// the rows of each scope the filter admits, one index probe per (user, agent, session)
// combination, with f's conditions still applied over them.
//
// Why: the scope condition is user_id = ANY(...) AND agent_id = ANY(...) AND session_id =
// ANY(...), and Postgres 15 takes an array condition on a later column of an index as an
// index condition only in a bitmap scan. Without statistics (autovacuum not yet, or never,
// analysed a partition: a new deployment, a new tenant) the generic plan — and the custom
// one — read the whole org through org_id = $1 and filtered: a user's search of a 150-row
// scope in a 10-user org read 1,520 rows per leg, and slowed as the org grew
// (docs/benchmarks.md, the mem0 row). The probes are equality conditions on every column
// of the scope b-tree; OFFSET 0 keeps the planner from flattening them into a join that
// reads the org again.
func (f *filter) rows() string {
	if f.probes == "" {
		return "memories"
	}
	return f.probes
}

// tid is the select-list item of a row's ctid, named tid, in a read of rows(): a search
// reads its results' other columns by it (fusedSQL).
func (f *filter) tid() string {
	if f.probes == "" {
		return "ctid AS tid"
	}
	return "tid"
}

func (f *filter) clone() *filter {
	c := *f
	c.conds, c.args = append([]string(nil), f.conds...), append([]any(nil), f.args...)
	return &c
}

// hotScope is the scope index f's rows fall under for vectors of dims, if any.
func (f *filter) hotScope(dims int) (HotScope, bool) {
	return HotScope{OrgID: f.org, UserID: f.user, Dims: dims}, f.scoped && f.isCurrent && f.org != ""
}

// exactScope: exactly this scope (dedup).
func (f *filter) exactScope(sc strata.Scope) {
	u, a, s := f.arg(sc.UserID), f.arg(sc.AgentID), f.arg(sc.SessionID)
	f.conds = append(f.conds, "user_id = "+u+" AND agent_id = "+a+" AND session_id = "+s)
	// The near-duplicate check's exact leg reads the scope through rows too: a generic plan
	// of the plain statement built while the partition was empty read the org by org_id.
	f.probes = probes(`(SELECT ` + u + `::text AS u, ` + a + `::text AS a, ` + s + `::text AS s OFFSET 0) sc`)
	f.user, f.scoped = sc.UserID, true
}

// probes is rows' FROM item over sc, a relation of (u, a, s) scope combinations.
func probes(sc string) string {
	return `(SELECT m.* FROM ` + sc + ` CROSS JOIN LATERAL (SELECT *, ctid AS tid FROM memories WHERE org_id = $1
		AND user_id = sc.u AND agent_id = sc.a AND session_id = sc.s OFFSET 0) m) memories`
}

// visibleTo composes scopes: a memory is visible to a query when every level the memory
// sets matches the query's. So a query for (user U, agent A, session S) sees org-level
// memories, U's, A's, S's, and those scoped to any combination of them — never another
// user's, agent's or session's.
func (f *filter) visibleTo(sc strata.Scope) {
	levels := func(v string) []string {
		if v == "" {
			return []string{""}
		}
		return []string{"", v}
	}
	// The (user, agent, session) combinations, at most 8, as three parallel arrays: the
	// probes (rows) unnest them together, and as each array's values are the levels of its
	// column (repeated), the ANY conditions over them say the same as over the levels.
	var us, as, ss []string
	for _, u := range levels(sc.UserID) {
		for _, a := range levels(sc.AgentID) {
			for _, s := range levels(sc.SessionID) {
				us, as, ss = append(us, u), append(as, a), append(ss, s)
			}
		}
	}
	u, a, s := f.arg(us), f.arg(as), f.arg(ss)
	f.conds = append(f.conds, "user_id = ANY("+u+") AND agent_id = ANY("+a+") AND session_id = ANY("+s+")")
	// One unnest of three arrays: the planner prices it at 10 rows, where a cross join of
	// three unnests was 1,000 — a generic plan priced past jit_above_cost, and 40 ms of JIT
	// compilation on every search.
	f.probes = probes(`unnest(` + u + `::text[], ` + a + `::text[], ` + s + `::text[]) sc(u, a, s)`)
	f.user, f.scoped = sc.UserID, true
}

// within is Mem0's filter: every level the query names must be the memory's, the levels it
// leaves out are not filtered. So user U finds U's memories at any agent and session, and
// never org-level ones or another user's.
func (f *filter) within(sc strata.Scope) {
	for _, x := range []struct{ col, v string }{{"user_id", sc.UserID}, {"agent_id", sc.AgentID}, {"session_id", sc.SessionID}} {
		if x.v != "" {
			f.add(x.col+" = ?", x.v)
		}
	}
	// A user's scope index covers user_id IN ('', U), a superset of user_id = U.
	f.user, f.scoped = sc.UserID, sc.UserID != ""
}

// current: not superseded.
func (f *filter) current() {
	f.conds = append(f.conds, "valid_to IS NULL")
	f.isCurrent = true
}

// asOf: the versions that were current at t.
func (f *filter) asOf(t time.Time) {
	f.add("valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)", t, t)
}

// Query is a search.
type Query struct {
	Scope strata.Scope // OrgID required; the other levels compose (see visibleTo)
	// ScopeFilter matches the scope as Mem0's filters do instead (see within).
	ScopeFilter bool
	Text        string
	Vector      []float32
	Space       Space
	Kinds       []string
	// Metadata: results' metadata must contain this object (jsonb @>).
	Metadata      map[string]any
	Trust         []string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	// AsOf searches the versions current at that time instead of today's.
	AsOf *time.Time
	TopK int
	// StaleAfter overrides Options.StaleAfter; ExcludeStale drops stale facts.
	StaleAfter   time.Duration
	ExcludeStale bool
	// LoadStaleAfter, when StaleAfter is 0, queues the read of the verification age that
	// replaces it (the caller's: the org's policy) into b, and returns what answers it once
	// b's results are read (0: Options.StaleAfter). It rides in the search's own round trip;
	// with ExcludeStale, whose filter needs the age, it costs one of its own first.
	LoadStaleAfter func(b *pgx.Batch) func() (time.Duration, error)
	Strategy       Strategy
	// Candidates per leg [max(4·TopK, 40)].
	Candidates int
	// SkipText turns off the full-text leg (benchmarks of the vector leg alone).
	SkipText bool
	// Provenance narrows by who wrote a version; quarantined versions are excluded unless
	// IncludeQuarantined (admin review). See quarantine.go.
	Provenance         ProvenanceFilter
	IncludeQuarantined bool
	// Hide are data subjects whose processing is restricted (GDPR Art. 18): their memories
	// are left out by the statement itself, so a page is never short or empty because of
	// them and no access is recorded on them. Only a query that can read every user's
	// memories (ReadsAnyUser) needs it: a scope names one user or none, and reads only that
	// user's and user-less memories. nil (an org that restricts nobody): no condition.
	Hide []string
}

// ReadsAnyUser reports whether q can match memories of any user — a filter (ScopeFilter)
// that names no user — so that it needs Hide filled in to leave restricted subjects out.
func (q Query) ReadsAnyUser() bool { return q.ScopeFilter && q.Scope.UserID == "" }

// hideUsers adds Hide's condition to f when q can read one of those users' memories.
func hideUsers(f *filter, q Query) {
	if len(q.Hide) == 0 || !q.ReadsAnyUser() && !slices.Contains(q.Hide, q.Scope.UserID) {
		return
	}
	f.add("NOT (user_id = ANY(?))", q.Hide)
}

// Breakdown is how a result's score came about.
type Breakdown struct {
	VectorRank       int     `json:"vector_rank,omitempty" doc:"1-based rank in the vector leg; absent when the vector leg did not return it."`
	VectorSimilarity float64 `json:"vector_similarity,omitempty" doc:"Cosine similarity to the query."`
	TextRank         int     `json:"text_rank,omitempty" doc:"1-based rank in the full-text leg."`
	TextScore        float64 `json:"text_score,omitempty" doc:"ts_rank_cd of the full-text match."`
	RRF              float64 `json:"rrf" doc:"Reciprocal rank fusion: sum over legs of 1/(k + rank)."`
	Relevance        float64 `json:"relevance" doc:"rrf divided by its maximum 2/(k+1), in (0, 1]."`
	Recency          float64 `json:"recency" doc:"0.5^(age / half-life); 1 for pinned memories."`
	Importance       float64 `json:"importance"`
	Access           float64 `json:"access" doc:"ln(1+access_count)/ln(101), at most 1."`
	Score            float64 `json:"score" doc:"relevance × (1 + w_r·recency + w_i·importance + w_a·access)."`
}

// Result is one ranked memory.
type Result struct {
	Memory Memory    `json:"memory"`
	Score  Breakdown `json:"score"`
	Stale  bool      `json:"stale" doc:"A fact whose last verification is older than the verification age."`
}

// SearchInfo says how a search ran.
type SearchInfo struct {
	Strategy         Strategy `json:"strategy" doc:"exact or hnsw (iterative scan)."`
	ScopeSize        int      `json:"scope_size" doc:"Visible memories counted to choose the strategy (counting stops past the exact threshold; a scope counted far from it (at most half of it, or past it) in the last 5 s is not counted again). -1 when nothing was counted: a forced strategy, or a scope with an HNSW index of its own (see Heavy scopes in docs/semantic.md)."`
	VectorCandidates int      `json:"vector_candidates"`
	TextCandidates   int      `json:"text_candidates"`
	Fallback         bool     `json:"fallback,omitempty" doc:"HNSW returned too few rows and the exact search answered."`
}

type hit struct {
	id   uuid.UUID
	dist float64
}

type nearResult struct {
	hits      []hit
	strategy  Strategy
	scopeSize int
	fallback  bool
}

// vecExpr is the indexed expression for a space's dimension.
func vecExpr(dims int) string { return "embedding::vector(" + strconv.Itoa(dims) + ")" }

// spaceDistance is the select-list expression, over a read of f's rows, of a row's distance
// to the query vector qv when vf (f with planVector's conditions of the embedding space
// appended) admits the row, and NULL when it is in another space: for the statements that
// read a scope once for both a vector and a non-vector use (fusedSQL, createSQL).
func spaceDistance(vf, f *filter, dims int, qv string) string {
	space := strings.Join(vf.conds[len(f.conds):], " AND ")
	return `CASE WHEN ` + space + ` THEN ` + vecExpr(dims) + ` <=> ` + qv + ` END`
}

// alongside is what travels in the vector query's round trip: statements queued before it
// (Create's scope lock and exact-duplicate check, which must run first) and after it. An
// exact fallback after an HNSW miss does not repeat them. (A search's full-text leg is part
// of its one statement, fused.go.)
type alongside struct {
	before []func(*pgx.Batch)
	// after is told the strategy that runs and the scope's counted size (-1: not counted).
	after []func(b *pgx.Batch, strategy Strategy, scopeSize int)
}

// vectorPlan is how a vector query will run: the filter with the space's conditions, the
// strategy, the scope's counted size (-1: not counted) and whether the scope has an HNSW
// index of its own.
type vectorPlan struct {
	f         *filter
	strategy  Strategy
	scopeSize int
	ownIndex  bool
}

// planVector chooses how the n nearest vectors of space sp passing f are found: exact or
// HNSW per strategy (Auto: by the scope's bounded count, which costs a round trip of its own
// unless a recent count is remembered, or HNSW when the scope has its own index).
func (s *Store) planVector(ctx context.Context, tx pgx.Tx, f *filter, sp Space, strategy Strategy) (vectorPlan, error) {
	// The dimension is a literal so the partial HNSW index (WHERE dims = N) applies.
	f = f.clone()
	f.conds = append(f.conds, "dims = "+strconv.Itoa(sp.Dims))
	f.add("model = ? AND embedder = ?", sp.Model, sp.Embedder)
	p := vectorPlan{f: f, strategy: strategy, scopeSize: -1}
	if strategy != StrategyAuto {
		return p, nil
	}
	hs, hot := f.hotScope(sp.Dims)
	if hot && s.hot.isIndexed(hs) {
		// The scope has an HNSW index of its own (scopeindex.go): it answers, uncounted.
		p.strategy, p.ownIndex = StrategyHNSW, true
		return p, nil
	}
	// Count the scope (bounded): the b-tree on (org, user, agent, session) answers it —
	// unless a count of the last few seconds found it far from the threshold.
	key := scopeKey(f)
	cnt, ok := s.counts.remembered(key, s.o.ExactBelow, s.o.CountTTL)
	if !ok {
		cf := f.clone()
		err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+cf.rows()+` WHERE `+cf.sql()+
			` LIMIT `+cf.arg(s.o.ExactBelow+1)+`) x`, cf.args...).Scan(&cnt)
		if err != nil {
			return p, pg.Interpret(err)
		}
		s.counts.put(key, cnt)
	}
	p.scopeSize = cnt
	p.strategy = StrategyHNSW
	if cnt <= s.o.ExactBelow {
		p.strategy = StrategyExact
	}
	if hot && cnt > s.o.ScopeIndexAbove {
		s.hot.note(hs) // a candidate for an index of its own
	}
	return p, nil
}

// vectorLeg is the SQL of the vector leg with strategy over qf's conditions, the query
// vector and the limit being the placeholders qv (cast to the space's dimension) and lim of
// qf's arguments; and, for an HNSW scan, the statement of its scan settings, which must run
// in the same transaction before it (settings.SQL is "" for the exact sort).
func (s *Store) vectorLeg(qf *filter, qv, lim string, dims, n int, strategy Strategy, ownIndex, rows bool) (sql string, settings Statement) {
	cols := "id"
	if rows {
		cols = memCols
	}
	return s.vectorLegOf(qf, qv, lim, dims, n, strategy, ownIndex, cols, false)
}

// vectorLegOf is vectorLeg selecting cols (and the distance d; with tid, the row's ctid as
// tid too).
func (s *Store) vectorLegOf(qf *filter, qv, lim string, dims, n int, strategy Strategy, ownIndex bool, cols string, tid bool) (sql string, settings Statement) {
	expr := vecExpr(dims)
	if strategy == StrategyExact {
		if tid {
			cols += ", " + qf.tid()
		}
		// "+ 0" keeps the planner off the HNSW index: an exact top-n sort over the rows the
		// filter (and its b-tree) selects.
		return `SELECT ` + cols + `, ` + expr + ` <=> ` + qv + ` AS d FROM ` + qf.rows() + ` WHERE ` + qf.sql() +
			` ORDER BY (` + expr + ` <=> ` + qv + `) + 0, id LIMIT ` + lim, Statement{}
	}
	ef := max(s.o.EfSearch, n)
	if ownIndex {
		ef = max(s.o.ScopeEfSearch, n)
	}
	mode, sortOK := "relaxed_order", "on"
	if strategy == StrategyHNSWPlain {
		// The naive query really scans the index: on a partitioned memories a partition's
		// sharper statistics can make the planner pick the scope b-tree and an exact sort
		// for a small scope, which would show nothing.
		mode, sortOK = "off", "off"
	}
	if tid {
		cols += ", ctid AS tid"
	}
	// relaxed_order may return rows slightly out of order: re-sort the materialised
	// candidates (pgvector's documented pattern).
	sql = `WITH nn AS MATERIALIZED (SELECT ` + cols + `, ` + expr + ` <=> ` + qv + ` AS d FROM memories WHERE ` +
		qf.sql() + ` ORDER BY ` + expr + ` <=> ` + qv + ` LIMIT ` + lim + `) SELECT * FROM nn ORDER BY d, id`
	// JIT is off: enable_sort = off prices any sort at 10^10, past jit_above_cost, and
	// compiling the plain query took 140 ms of its 146 (BenchmarkSemantic100k).
	return sql, Statement{SQL: hnswSettingsSQL, Args: []any{strconv.Itoa(ef), mode, strconv.Itoa(s.o.MaxScanTuples), sortOK}}
}

// hnswSettingsSQL sets an HNSW scan's settings for the rest of the transaction: ef_search,
// the iterative scan and its bound, custom plans, sorting and no JIT ($1-$4).
const hnswSettingsSQL = `SELECT set_config('hnsw.ef_search', $1, true),
	set_config('hnsw.iterative_scan', $2, true), set_config('hnsw.max_scan_tuples', $3, true),
	set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_sort', $4, true),
	set_config('jit', 'off', true)`

// nearest returns the n nearest current vectors of space sp passing f, by cosine
// distance, choosing exact or HNSW per strategy; with carries statements queued in the
// same round trip as the vector query.
func (s *Store) nearest(ctx context.Context, tx pgx.Tx, f *filter, v []float32, sp Space, n int, strategy Strategy,
	with alongside) (nearResult, error) {
	res := nearResult{strategy: strategy, scopeSize: -1}
	if err := checkVector(v, sp); err != nil {
		return res, err
	}
	p, err := s.planVector(ctx, tx, f, sp, strategy)
	if err != nil {
		return res, err
	}
	f, res.strategy, res.scopeSize = p.f, p.strategy, p.scopeSize
	vec := pgvector.NewVector(v)
	run := func(strategy Strategy) ([]hit, error) {
		qf := f.clone()
		qv := qf.arg(vec) + "::vector(" + strconv.Itoa(sp.Dims) + ")"
		lim := qf.arg(n)
		b := &pgx.Batch{}
		// The scope lock, the duplicate check and the exact leg read by key or through the
		// scope's b-tree: generic plans (pg.GenericPlansSQL); the HNSW and full-text legs
		// ask for custom ones.
		b.Queue(pg.GenericPlansSQL)
		for _, add := range with.before {
			add(b)
		}
		sql, settings := s.vectorLeg(qf, qv, lim, sp.Dims, n, strategy, p.ownIndex, false)
		if settings.SQL != "" {
			// The scan settings and the query travel in one batch: one round trip.
			b.Queue(settings.SQL, settings.Args...)
		}
		var hits []hit
		b.Queue(sql, qf.args...).Query(func(rs pgx.Rows) error {
			var err error
			hits, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) (hit, error) {
				var h hit
				return h, r.Scan(&h.id, &h.dist)
			})
			return err
		})
		for _, add := range with.after {
			add(b, strategy, res.scopeSize)
		}
		b.Queue(pg.DefaultPlansSQL)
		with = alongside{} // once: an exact fallback does not repeat them
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, pg.Interpret(err)
		}
		return hits, nil
	}
	hits, err := run(res.strategy)
	if err != nil {
		return res, pg.Interpret(err)
	}
	if res.strategy == StrategyHNSW && len(hits) < n && strategy == StrategyAuto {
		// The iterative scan hit max_scan_tuples before finding n rows that pass the
		// filters (a very selective filter in a big scope): the exact sort is right.
		res.fallback = true
		if hits, err = run(StrategyExact); err != nil {
			return res, pg.Interpret(err)
		}
	}
	res.hits = hits
	return res, nil
}

// textScopeFirstAtMost: a counted scope of at most this many rows has its full-text leg read
// scope first (fusedSQL): a materialised scan of the scope's rows (their words, and their
// distances, which the exact vector leg sorts: one read for both legs), then the words —
// one right plan, so a generic one, and the GIN index is not worth it for a few hundred rows.
// A larger scope's leg is planned per execution (pg.CustomPlansSQL): for a common word the
// scope's b-tree and a filter, for a rare one in a large scope the b-tree ANDed with the GIN
// index (0.6 ms of planning on the partitioned layout, pg/plans.go).
const textScopeFirstAtMost = 500

// smallScope says whether a scope counted at scopeSize rows (-1: not counted) and searched by
// strategy is small enough to be read whole, row by row (textScopeFirstAtMost).
func smallScope(strategy Strategy, scopeSize int) bool {
	return strategy == StrategyExact && scopeSize >= 0 && scopeSize <= textScopeFirstAtMost
}

// Search runs the hybrid search: vector and full-text candidates under the same filters,
// fused by reciprocal rank, then scaled by recency, importance and access count.
func (s *Store) Search(ctx context.Context, tx pgx.Tx, q Query) ([]Result, SearchInfo, error) {
	var info SearchInfo
	if q.TopK <= 0 {
		q.TopK = 10
	}
	n := q.Candidates
	if n <= 0 {
		n = max(4*q.TopK, 40)
	}
	now := s.now().UTC()
	var before []func(*pgx.Batch)
	var readStale func() (time.Duration, error)
	if q.StaleAfter <= 0 && q.LoadStaleAfter != nil {
		if q.ExcludeStale {
			b := &pgx.Batch{}
			read := q.LoadStaleAfter(b)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, info, pg.Interpret(err)
			}
			d, err := read()
			if err != nil {
				return nil, info, err
			}
			q.StaleAfter = d
		} else {
			before = append(before, func(b *pgx.Batch) { readStale = q.LoadStaleAfter(b) })
		}
	}
	staleAfter := q.StaleAfter
	if staleAfter <= 0 {
		staleAfter = s.o.StaleAfter
	}
	f := newFilter(q.Scope.OrgID)
	if q.ScopeFilter {
		f.within(q.Scope)
	} else {
		f.visibleTo(q.Scope)
	}
	if q.AsOf != nil {
		f.asOf(*q.AsOf)
	} else {
		f.current()
	}
	if len(q.Kinds) > 0 {
		f.add("kind = ANY(?)", q.Kinds)
	}
	if len(q.Trust) > 0 {
		f.add("trust = ANY(?)", q.Trust)
	}
	applyPoisoningFilters(f, q)
	hideUsers(f, q)
	if len(q.Metadata) > 0 {
		b, err := json.Marshal(q.Metadata)
		if err != nil {
			return nil, info, err
		}
		f.add("metadata @> ?::jsonb", string(b))
	}
	if q.CreatedAfter != nil {
		f.add("valid_from >= ?", *q.CreatedAfter)
	}
	if q.CreatedBefore != nil {
		f.add("valid_from < ?", *q.CreatedBefore)
	}
	if q.ExcludeStale {
		f.add("NOT (kind = 'fact' AND greatest(valid_from, coalesce(last_verified_at, valid_from)) < ?)", now.Add(-staleAfter))
	}

	if err := checkVector(q.Vector, q.Space); err != nil {
		return nil, info, err
	}
	fq := fusedQuery{vec: pgvector.NewVector(q.Vector), dims: q.Space.Dims, n: n, topK: q.TopK, now: now}
	if !q.SkipText && strings.TrimSpace(q.Text) != "" {
		fq.text = q.Text
	}
	// Both legs, their fusion and the top candidates' rows: one statement, in one round trip
	// with the org's policy (fused.go).
	fr, err := s.searchFused(ctx, tx, f, f, q.Space, q.Strategy, fq, before)
	if err != nil {
		return nil, info, err
	}
	if readStale != nil {
		d, err := readStale()
		if err != nil {
			return nil, info, err
		}
		if d > 0 {
			staleAfter = d
		}
	}
	info.Strategy, info.ScopeSize, info.Fallback = fr.strategy, fr.scopeSize, fr.fallback
	info.VectorCandidates, info.TextCandidates = fr.vectorN, fr.textN
	if len(fr.cands) == 0 {
		return []Result{}, info, nil
	}
	k := s.o.RRFK
	byID := make(map[uuid.UUID]*candidate, len(fr.cands))
	out := make([]Result, 0, len(fr.cands))
	for i := range fr.cands {
		c := &fr.cands[i]
		byID[c.mem.ID] = c
		b := c.bd
		if b.VectorRank > 0 {
			b.RRF += 1 / (k + float64(b.VectorRank))
		}
		if b.TextRank > 0 {
			b.RRF += 1 / (k + float64(b.TextRank))
		}
		s.rank(&b, c.mem, now)
		out = append(out, Result{Memory: c.mem, Score: b,
			Stale: c.mem.Kind == KindFact && now.Sub(c.mem.VerifiedAt()) > staleAfter})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score.Score != out[j].Score.Score {
			return out[i].Score.Score > out[j].Score.Score
		}
		return out[i].Memory.ID.String() < out[j].Memory.ID.String()
	})
	if len(out) > q.TopK {
		out = out[:q.TopK]
	}
	if err := s.fillRest(ctx, tx, q.Scope.OrgID, out, byID); err != nil {
		return nil, info, err
	}
	for i := range out {
		if c := byID[out[i].Memory.ID]; c.rest {
			if err := decodeMetadata(&out[i].Memory, c.meta); err != nil {
				return nil, info, err
			}
		}
	}
	return out, info, nil
}

// rank fills the features and the final score of b (its RRF already summed).
func (s *Store) rank(b *Breakdown, m Memory, now time.Time) {
	k := s.o.RRFK
	b.Relevance = b.RRF / (2 / (k + 1))
	if m.Pinned {
		b.Recency = 1
	} else {
		age := now.Sub(m.VerifiedAt())
		b.Recency = math.Pow(0.5, max(age.Hours(), 0)/s.o.HalfLife.Hours())
	}
	b.Importance = m.Importance
	b.Access = min(math.Log1p(float64(m.AccessCount))/math.Log(101), 1)
	b.Score = b.Relevance * (1 + s.o.WRecency*b.Recency + s.o.WImportance*b.Importance + s.o.WAccess*b.Access)
	round := func(x *float64) { *x = math.Round(*x*1e6) / 1e6 }
	for _, x := range []*float64{&b.VectorSimilarity, &b.TextScore, &b.RRF, &b.Relevance, &b.Recency, &b.Access, &b.Score} {
		round(x)
	}
}

// ExactNeighbours is the ground truth for recall measurements: q's n nearest by exact
// distance, through the same filters.
func (s *Store) ExactNeighbours(ctx context.Context, tx pgx.Tx, q VectorQuery) ([]uuid.UUID, error) {
	q.Strategy = StrategyExact
	ids, _, err := s.VectorSearch(ctx, tx, q)
	return ids, err
}

// VectorQuery is the vector leg alone (benchmarks, recall measurements).
type VectorQuery struct {
	Scope strata.Scope
	// AnyScope searches every current memory of the org, whatever its scope (operators,
	// consolidation, benchmarks); otherwise scopes compose as in Search.
	AnyScope bool
	Vector   []float32
	Space    Space
	N        int
	Strategy Strategy
}

// VectorSearch runs the vector leg alone and returns the ids nearest first, and the
// strategy used.
func (s *Store) VectorSearch(ctx context.Context, tx pgx.Tx, q VectorQuery) ([]uuid.UUID, Strategy, error) {
	f := newFilter(q.Scope.OrgID)
	if !q.AnyScope {
		f.visibleTo(q.Scope)
	}
	f.current()
	r, err := s.nearest(ctx, tx, f, q.Vector, q.Space, q.N, q.Strategy, alongside{})
	if err != nil {
		return nil, "", err
	}
	ids := make([]uuid.UUID, len(r.hits))
	for i, h := range r.hits {
		ids[i] = h.id
	}
	return ids, r.strategy, nil
}
