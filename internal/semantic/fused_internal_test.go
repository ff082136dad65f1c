package semantic

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// referenceSearch is the search as it ran before the fused statement (fused.go): the
// vector leg (nearest) and the full-text leg each on their own, every candidate's whole row
// read, ranked and cut in Go. Filters: visibleTo the scope, current versions.
func referenceSearch(ctx context.Context, t *testing.T, s *Store, tx pgx.Tx, q Query) []Result {
	t.Helper()
	n := max(4*q.TopK, 40)
	f := newFilter(q.Scope.OrgID)
	f.visibleTo(q.Scope)
	f.current()
	near, err := s.nearest(ctx, tx, f, q.Vector, q.Space, n, StrategyExact, alongside{})
	require.NoError(t, err)
	tf := f.clone()
	tq, lim := tf.arg(q.Text), tf.arg(n)
	rows, err := tx.Query(ctx, `SELECT id, ts_rank_cd(tsv, q) FROM memories,
		(SELECT replace(plainto_tsquery('simple', `+tq+`)::text, ' & ', ' | ')::tsquery AS q) tq
		WHERE `+tf.sql()+` AND q <> ''::tsquery AND tsv @@ q ORDER BY 2 DESC, id LIMIT `+lim, tf.args...)
	require.NoError(t, err)
	texts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
		var h hit
		return h, r.Scan(&h.id, &h.dist)
	})
	require.NoError(t, err)
	bd := map[uuid.UUID]*Breakdown{}
	var ids []uuid.UUID
	get := func(id uuid.UUID) *Breakdown {
		if b, ok := bd[id]; ok {
			return b
		}
		bd[id] = &Breakdown{}
		ids = append(ids, id)
		return bd[id]
	}
	k := s.o.RRFK
	for i, h := range near.hits {
		b := get(h.id)
		b.VectorRank, b.VectorSimilarity = i+1, 1-h.dist
		b.RRF += 1 / (k + float64(i+1))
	}
	for i, h := range texts {
		b := get(h.id)
		b.TextRank, b.TextScore = i+1, h.dist
		b.RRF += 1 / (k + float64(i+1))
	}
	ms, err := s.GetMany(ctx, tx, q.Scope.OrgID, ids)
	require.NoError(t, err)
	now := s.now().UTC()
	out := make([]Result, 0, len(ms))
	for _, m := range ms {
		b := bd[m.ID]
		s.rank(b, m, now)
		out = append(out, Result{Memory: m, Score: *b, Stale: m.Kind == KindFact && now.Sub(m.VerifiedAt()) > s.o.StaleAfter})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score.Score != out[j].Score.Score {
			return out[i].Score.Score > out[j].Score.Score
		}
		return out[i].Memory.ID.String() < out[j].Memory.ID.String()
	})
	return out[:min(len(out), q.TopK)]
}

// TestSearchFusedMatchesReference checks that the fused statement returns what the search
// returned before it (referenceSearch): the same memories, every column, in the same order,
// with the same score breakdowns — on a fixed data set whose memories differ in age,
// importance, pinning, access counts, verification and metadata, for several k, with the
// exact sort and with auto's choice, and with no rows read by the statement at all (every
// result's row read afterwards, fillRest).
func TestSearchFusedMatchesReference(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	words := []string{"logo", "caption", "music", "export", "colour", "font", "intro", "outro", "trim", "audio"}
	sp := Space{Embedder: "lexical", Model: embed.LexicalModel, Dims: 384}
	lex := embed.NewLexical(384)
	org := "fused-" + testenv.RandomID(6)
	for i := range 60 {
		at := base.Add(-time.Duration(i*37) * time.Hour)
		w := NewStore(Options{}, func() time.Time { return at })
		user := "u1"
		if i%5 == 4 {
			user = "" // org-level: visible to u1 too
		}
		if i%11 == 10 {
			user = "u2" // never visible to u1
		}
		text := fmt.Sprintf("%s %s %s note %d", words[i%len(words)], words[(i*3+1)%len(words)], words[(i*7+2)%len(words)], i)
		nm := NewMemory{Scope: strata.Scope{OrgID: org, UserID: user}, Kind: []string{KindFact, "preference", "episode"}[i%3],
			Text: text, Importance: float64(i%7) / 6, Pinned: i%13 == 0, Metadata: map[string]any{"n": i, "tag": words[i%4]},
			Vector: lex.One(text), Space: sp}
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			m, _, err := w.Create(ctx, tx, nm)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE memories SET access_count = $3,
				last_verified_at = CASE WHEN $4 THEN $5::timestamptz END WHERE org_id = $1 AND id = $2`,
				org, m.ID, (i*17)%40, i%4 == 0, at.Add(time.Duration(i)*time.Hour))
			return err
		}))
	}
	clock := func() time.Time { return base.Add(time.Hour) }
	s := NewStore(Options{}, clock)
	noRows := NewStore(Options{}, clock)
	noRows.restSlack = -1e9 // the statement reads no row: every result's row is read after it
	for _, text := range []string{"logo caption", "music font trim", "nothing matches these words", "audio"} {
		for _, k := range []int{1, 3, 10, 25} {
			q := Query{Scope: strata.Scope{OrgID: org, UserID: "u1"}, Text: text, Vector: lex.One(text), Space: sp, TopK: k}
			require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				want := referenceSearch(ctx, t, s, tx, q)
				require.NotEmpty(t, want)
				for name, c := range map[string]struct {
					s        *Store
					strategy Strategy
				}{"exact": {s, StrategyExact}, "auto": {s, StrategyAuto}, "rows after": {noRows, StrategyExact}} {
					qq := q
					qq.Strategy = c.strategy
					got, _, err := c.s.Search(ctx, tx, qq)
					require.NoError(t, err)
					require.Equal(t, want, got, "%q k=%d %s", text, k, name)
				}
				return nil
			}))
		}
	}
}

// TestSearchReadsItsScopesNotTheOrg counts the memory rows a search reads (the backend's
// table statistics, pg_stat_xact_user_tables, before and after) in an org of many users
// that was never analysed (autovacuum off, or not yet run: a new tenant): the exact vector
// leg, the small scope's full-text leg and the scope count read the visible scopes through
// the scope b-tree (filter.rows), not every row of the org. Before, each leg read the whole
// org (a 10-user org's search read 10 times its scope per leg, and slowed as the org grew).
func TestSearchReadsItsScopesNotTheOrg(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	sp := Space{Embedder: "lexical", Model: embed.LexicalModel, Dims: 384}
	lex := embed.NewLexical(384)
	org := "scoperead-" + testenv.RandomID(6)
	s := NewStore(Options{}, time.Now)
	// 12 users × 30 memories, 6 org-level ones, and 4 of u1's under an agent and a session.
	var batch []NewMemory
	add := func(sc strata.Scope, i int) {
		text := fmt.Sprintf("graded lut v%dk for channel c%dm shot s%dq", i*7, i%17, i)
		batch = append(batch, NewMemory{Scope: sc, Kind: KindFact, Text: text, Vector: lex.One(text), Space: sp})
	}
	for u := range 12 {
		for i := range 30 {
			add(strata.Scope{OrgID: org, UserID: fmt.Sprint("u", u)}, u*100+i)
		}
	}
	for i := range 6 {
		add(strata.Scope{OrgID: org}, 5000+i)
	}
	for i := range 4 {
		add(strata.Scope{OrgID: org, UserID: "u1", AgentID: "a1", SessionID: "s1"}, 6000+i)
	}
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		for _, nm := range batch {
			if _, _, err := s.Create(ctx, tx, nm); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, c := range []struct {
		name    string
		scope   strata.Scope
		visible int
	}{
		{"user", strata.Scope{OrgID: org, UserID: "u1"}, 36},
		{"user, agent and session", strata.Scope{OrgID: org, UserID: "u1", AgentID: "a1", SessionID: "s1"}, 40},
	} {
		// Auto counts the scope and reads it once for both legs; the exact strategy without words
		// runs the vector leg alone (a forced exact strategy with words leaves the full-text
		// leg to a custom plan: the scope's size is not known).
		for _, strategy := range []Strategy{StrategyAuto, StrategyExact} {
			text := "graded lut for channel c5m"
			q := Query{Scope: c.scope, Text: text, Vector: lex.One(text), Space: sp, TopK: 10, Strategy: strategy}
			bound := 2*c.visible + 10
			if strategy == StrategyExact {
				q.Text, bound = "", c.visible+10
			}
			var got []Result
			var info SearchInfo
			var read int
			require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				var err error
				read, err = memoryRowsRead(ctx, tx, func() error {
					got, info, err = NewStore(Options{}, time.Now).Search(ctx, tx, q)
					return err
				})
				return err
			}))
			require.Len(t, got, 10)
			require.Equal(t, StrategyExact, info.Strategy)
			// The legs read the visible rows once (3 times the scope before the legs shared
			// them), the count (auto) once more, and the top k rows' other columns are read by
			// key. The org holds 370.
			require.LessOrEqual(t, read, bound, "%s, %s: memory rows read", c.name, strategy)
			require.Positive(t, read)
		}
	}
}

// TestSearchReadsItsTopRowsByTid: a search reads its top rows' other columns by the rows'
// ctids (fusedSQL), so that read stays k rows under the generic plan a connection built on
// its first search, while the partition was nearly empty and never analysed. By (org_id, id)
// that plan read the org through the scope b-tree once per top row, and filtered on id: 1,520
// rows ten times per search in the mem0 peer bench's 10-user org (auto_explain).
func TestSearchReadsItsTopRowsByTid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newColdPlans(t, "topread-")
	pool, one, sp, lex, org, s := c.pool, c.one, c.sp, c.lex, c.org, c.s
	create := func(user string, from, n int) {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			for i := from; i < from+n; i++ {
				text := fmt.Sprintf("graded lut v%dk for channel c%dm shot s%dq", i*7, i%17, i)
				nm := NewMemory{Scope: strata.Scope{OrgID: org, UserID: user}, Kind: KindFact, Text: text, Vector: lex.One(text), Space: sp}
				if _, _, err := s.Create(ctx, tx, nm); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	search := func() (got []Result, read int) {
		text := "graded lut for channel c5m"
		q := Query{Scope: strata.Scope{OrgID: org, UserID: "u1"}, Text: text, Vector: lex.One(text), Space: sp, TopK: 10}
		require.NoError(t, pg.InOrgTx(ctx, one, org, func(tx pgx.Tx) error {
			var err error
			read, err = memoryRowsRead(ctx, tx, func() error {
				got, _, err = NewStore(Options{}, time.Now).Search(ctx, tx, q)
				return err
			})
			return err
		}))
		return got, read
	}
	create("u1", 0, 2)
	search() // the connection's plans, on a partition of two rows
	for u := range 12 {
		create(fmt.Sprint("u", u), 1000+u*100, 30)
	}
	got, read := search()
	require.Len(t, got, 10)
	// u1's scope holds 32 rows, the org 362: the count reads the scope, the legs read it once
	// between them, and the top rows are read by ctid.
	t.Logf("memory rows a search read: %d", read)
	require.LessOrEqual(t, read, 2*32+10, "memory rows a search read")
	require.Positive(t, read)
}

// TestWriteReadsItsScopeNotTheOrg: a write's near-duplicate check reads its scope through
// the scope b-tree (filter.rows, exactScope) even with the generic plan the connection built
// on its first write, when the partition was empty and never analysed — the plain statement's
// plan read the whole org by org_id then (1,574 buffers for a 151-row scope, auto_explain of
// the mem0 peer run), and so did its exact-text check. Under the exact strategy both checks
// now share one read of the scope's rows (createSQL).
func TestWriteReadsItsScopeNotTheOrg(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newColdPlans(t, "writeread-")
	pool, one, sp, lex, org, s := c.pool, c.one, c.sp, c.lex, c.org, c.s
	create := func(p *pgxpool.Pool, user string, i int) (read int) {
		text := fmt.Sprintf("graded lut v%dk for channel c%dm shot s%dq", i*7, i%17, i)
		nm := NewMemory{Scope: strata.Scope{OrgID: org, UserID: user}, Kind: KindFact, Text: text, Vector: lex.One(text), Space: sp}
		require.NoError(t, pg.InOrgTx(ctx, p, org, func(tx pgx.Tx) error {
			var err error
			read, err = memoryRowsRead(ctx, tx, func() error {
				_, _, err := s.Create(ctx, tx, nm)
				return err
			})
			return err
		}))
		return read
	}
	create(one, "u1", 0) // the connection's plans, on an empty partition
	for u := range 12 {
		for i := range 30 {
			create(pool, fmt.Sprint("u", u), 1000+u*100+i)
		}
	}
	// u1's scope holds 31 rows, the org 361: the count (unless remembered) reads the scope,
	// and the exact and near checks read it once between them (twice before, 3·31+5).
	read := create(one, "u1", 99999)
	require.LessOrEqual(t, read, 2*31+5, "memory rows a write read")
	require.Positive(t, read)
}

// coldPlans is what the tests of a connection's plans built on a nearly empty, never
// analysed partition share: the test's database, a second pool of one connection (one plan
// cache) over it, the lexical space, an org of the test's own and a store.
type coldPlans struct {
	pool, one *pgxpool.Pool
	sp        Space
	lex       *embed.Lexical
	org       string
	s         *Store
}

func newColdPlans(t *testing.T, orgPrefix string) coldPlans {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	return coldPlans{pool: pool, one: testenv.OnePool(t, dsn), sp: Space{Embedder: "lexical", Model: embed.LexicalModel, Dims: 384},
		lex: embed.NewLexical(384), org: orgPrefix + testenv.RandomID(6), s: NewStore(Options{}, time.Now)}
}

// memoryRowsRead is testenv.RowsRead over memories and its partitions.
func memoryRowsRead(ctx context.Context, tx pgx.Tx, fn func() error) (int, error) {
	return testenv.RowsRead(ctx, tx, "memories%", fn)
}
