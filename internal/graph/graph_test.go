package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// t0 is the test clock's start; relations' world times are placed around it.
var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	s     *Store
	pool  *pgxpool.Pool
	dsn   string
	clk   *testenv.Clock
	owner *pgx.Conn
}

func setup(t *testing.T) *env {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	e := &env{pool: pool, dsn: dsn, clk: testenv.NewClock(t0)}
	e.s = NewStore(Options{Now: e.clk.Now})
	e.owner = testenv.OwnerConn(t, dsn)
	return e
}

// tx runs fn in one committed transaction bound to org, as a request does. The rollback
// is deferred, so a failed assertion inside fn (runtime.Goexit) does not leave the
// transaction open.
func (e *env) tx(t *testing.T, org string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := pg.SetOrg(ctx, tx, org); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// requireNoSuch asserts err names field as something that does not exist (in the caller's
// scope or org).
func requireNoSuch(t *testing.T, err error, field string) {
	t.Helper()
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field)
	require.Equal(t, strata.FieldNotFound, fe.Kind)
}

func (e *env) resolve(t *testing.T, in ResolveInput) Entity {
	t.Helper()
	var out Entity
	require.NoError(t, e.tx(t, in.Scope.OrgID, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, _, err = e.s.Resolve(ctx, tx, in)
		return err
	}))
	return out
}

func (e *env) entity(t *testing.T, sc strata.Scope, name string, aliases ...string) Entity {
	t.Helper()
	return e.resolve(t, ResolveInput{Scope: sc, Name: name, Aliases: aliases})
}

func (e *env) add(t *testing.T, in RelationInput) AddResult {
	t.Helper()
	res, err := e.tryAdd(t, in)
	require.NoError(t, err)
	return res
}

func (e *env) tryAdd(t *testing.T, in RelationInput) (AddResult, error) {
	t.Helper()
	var res AddResult
	err := e.tx(t, in.Scope.OrgID, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		res, err = e.s.AddRelation(ctx, tx, in)
		return err
	})
	return res, err
}

// link is a relation between two entities in scope sc.
func link(sc strata.Scope, subj Entity, pred string, obj Entity, functional bool) RelationInput {
	return RelationInput{Scope: sc, SubjectID: subj.ID, Predicate: pred, ObjectID: &obj.ID, Functional: functional}
}

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func (e *env) about(t *testing.T, org string, id uuid.UUID, a AsOf) About {
	t.Helper()
	var out About
	require.NoError(t, e.tx(t, org, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = e.s.About(ctx, tx, org, AboutQuery{ID: id, At: a})
		return err
	}))
	return out
}

// objects lists "predicate:object" of an About's relations where the entity is subject.
func objects(a About) []string {
	var out []string
	for _, r := range a.Relations {
		if r.SubjectID != a.Entity.ID {
			continue
		}
		o := r.ObjectName
		if r.ObjectValue != nil {
			o = *r.ObjectValue
		}
		out = append(out, r.Predicate+":"+o)
	}
	slices.Sort(out)
	return out
}

func (e *env) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.owner.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestResolveConcurrentWriters: 8 writers resolving forms of one person at once ("Ana",
// "Ana Silva" with alias "Ana", "ana", "she (Ana)", ...) settle on one entity holding every
// form, in every round; none fails.
func TestResolveConcurrentWriters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	forms := []ResolveInput{
		{Name: "Ana"},
		{Name: "Ana Silva", Aliases: []string{"Ana"}},
		{Name: "ana"},
		{Name: " ANA  SILVA ", Aliases: []string{"ana"}},
		{Name: "Ana", Aliases: []string{"she (Ana)"}},
		{Name: "Ana S.", Aliases: []string{"Ana", "Ana Silva"}},
		{Name: "Silva, Ana", Aliases: []string{"Ana Silva", "ana"}},
		{Name: "Ana", Aliases: []string{"Ana Silva"}, Type: "person"},
	}
	for round := range 6 {
		sc := strata.Scope{OrgID: "org1", UserID: fmt.Sprintf("u%d", round)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		ids := make([]uuid.UUID, len(forms))
		created := make([]bool, len(forms))
		errs := make([]error, len(forms))
		for i, f := range forms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.Scope = sc
				<-start
				errs[i] = e.tx(t, sc.OrgID, func(ctx context.Context, tx pgx.Tx) error {
					ent, c, err := e.s.Resolve(ctx, tx, f)
					ids[i], created[i] = ent.ID, c
					return err
				})
			}()
		}
		close(start)
		wg.Wait()
		for i := range forms {
			require.NoError(t, errs[i], "writer %d", i)
			require.Equal(t, ids[0], ids[i], "writer %d resolved another entity", i)
		}
		require.Equal(t, 1, countTrue(created), "exactly one writer creates")
		require.EqualValues(t, 1, e.count(t, `SELECT count(*) FROM graph_entities WHERE org_id = 'org1' AND user_id = $1`, sc.UserID))
		var keys []string
		var typ string
		require.NoError(t, e.owner.QueryRow(context.Background(), `SELECT keys, type FROM graph_entities WHERE id = $1`, ids[0]).Scan(&keys, &typ))
		slices.Sort(keys)
		require.Equal(t, []string{"ana", "ana s.", "ana silva", "she (ana)", "silva, ana"}, keys)
		require.Equal(t, "person", typ)

		// Resolved again later, any form finds it.
		got := e.entity(t, sc, "she (ana)")
		require.Equal(t, ids[0], got.ID)
	}

	// The same name in another scope is another entity.
	other := e.entity(t, strata.Scope{OrgID: "org1", UserID: "someone-else"}, "Ana")
	require.NotEqual(t, e.entity(t, strata.Scope{OrgID: "org1", UserID: "u0"}, "Ana").ID, other.ID)
}

func countTrue(b []bool) int {
	n := 0
	for _, x := range b {
		if x {
			n++
		}
	}
	return n
}

// TestContradictionClosesTheOldRelation: a functional relation with another object closes
// the one in force (valid_to, superseded_at, superseded_by) and keeps it; a many-valued
// predicate keeps both; the same relation twice writes nothing; a late, older fact becomes
// history without displacing the one in force.
func TestContradictionClosesTheOldRelation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana := e.entity(t, sc, "Ana Silva", "Ana")
	lisbon := e.entity(t, sc, "Lisbon store")
	porto := e.entity(t, sc, "Porto store")
	faro := e.entity(t, sc, "Faro store")
	mem := uuid.Must(uuid.NewV7())

	in := link(sc, ana, "Manages", lisbon, true)
	in.ValidFrom = at(-120 * 24 * time.Hour)
	in.Fact = "Ana manages the Lisbon store"
	in.Provenance = Provenance{MemoryID: &mem, JobID: "job-1", KeyID: "key_1", AgentID: "editor"}
	first := e.add(t, in)
	require.True(t, first.Created)
	require.Equal(t, "manages", first.Relation.Predicate)
	require.Equal(t, "Ana Silva", first.Relation.SubjectName)
	require.Equal(t, "Lisbon store", first.Relation.ObjectName)
	require.Equal(t, Provenance{MemoryID: &mem, JobID: "job-1", KeyID: "key_1", AgentID: "editor"}, first.Relation.Provenance)
	require.True(t, first.Relation.InForce())

	// The same relation again: nothing new.
	again := e.add(t, link(sc, ana, "manages", lisbon, true))
	require.False(t, again.Created)
	require.Equal(t, first.Relation.ID, again.Relation.ID)

	// A many-valued predicate keeps both.
	e.add(t, link(sc, ana, "visited", lisbon, false))
	e.add(t, link(sc, ana, "visited", porto, false))

	// The contradiction, learned an hour later, true in the world since 30 days ago.
	e.clk.Advance(time.Hour)
	in = link(sc, ana, "manages", porto, true)
	in.ValidFrom = at(-30 * 24 * time.Hour)
	second := e.add(t, in)
	require.True(t, second.Created)
	require.Equal(t, []uuid.UUID{first.Relation.ID}, second.Closed)

	var old Relation
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		old, err = e.s.Relation(ctx, tx, "org1", first.Relation.ID)
		return err
	}))
	require.False(t, old.InForce())
	require.Equal(t, *at(-30 * 24 * time.Hour), *old.ValidTo)
	require.Equal(t, t0.Add(time.Hour), *old.SupersededAt)
	require.Equal(t, second.Relation.ID, *old.SupersededBy)
	require.Equal(t, "Ana manages the Lisbon store", old.Fact, "closing keeps the relation as it was")

	now := e.about(t, "org1", ana.ID, AsOf{})
	require.Equal(t, []string{"manages:Porto store", "visited:Lisbon store", "visited:Porto store"}, objects(now))

	// A late fact, older than the one in force: recorded as history ending where Porto began.
	e.clk.Advance(time.Hour)
	in = link(sc, ana, "manages", faro, true)
	in.ValidFrom = at(-365 * 24 * time.Hour)
	late := e.add(t, in)
	require.True(t, late.Created)
	require.Empty(t, late.Closed)
	require.Equal(t, *at(-30 * 24 * time.Hour), *late.Relation.ValidTo)
	require.Equal(t, []string{"manages:Porto store", "visited:Lisbon store", "visited:Porto store"}, objects(e.about(t, "org1", ana.ID, AsOf{})))

	// The functional flag is the predicate's: a writer that forgets it still closes.
	e.clk.Advance(time.Hour)
	forgot := e.add(t, link(sc, ana, "manages", lisbon, false))
	require.True(t, forgot.Relation.Functional)
	require.Equal(t, []uuid.UUID{second.Relation.ID}, forgot.Closed)

	// Literal values contradict too.
	v1, v2 := "manager", "director"
	r1 := e.add(t, RelationInput{Scope: sc, SubjectID: ana.ID, Predicate: "title", ObjectValue: &v1, Functional: true})
	r2 := e.add(t, RelationInput{Scope: sc, SubjectID: ana.ID, Predicate: "title", ObjectValue: &v2, Functional: true})
	require.Equal(t, []uuid.UUID{r1.Relation.ID}, r2.Closed)

	// Nothing was deleted: the history has every version, in recording order.
	var hist []Relation
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		hist, err = e.s.History(ctx, tx, "org1", HistoryQuery{EntityID: ana.ID, Predicate: "MANAGES"})
		return err
	}))
	require.Len(t, hist, 4)
	require.Equal(t, []uuid.UUID{first.Relation.ID, second.Relation.ID, late.Relation.ID, forgot.Relation.ID},
		[]uuid.UUID{hist[0].ID, hist[1].ID, hist[2].ID, hist[3].ID})
	require.EqualValues(t, 8, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1`, ana.ID))

	// Ending a relation without a successor (it began at t0+3h, when it was recorded).
	e.clk.Advance(time.Hour)
	var ended Relation
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ended, err = e.s.EndRelation(ctx, tx, "org1", r2.Relation.ID, nil)
		return err
	}))
	require.Equal(t, t0.Add(4*time.Hour), *ended.ValidTo)
	require.Equal(t, t0.Add(4*time.Hour), *ended.SupersededAt)
	require.Nil(t, ended.SupersededBy)
	require.NotContains(t, objects(e.about(t, "org1", ana.ID, AsOf{})), "title:director")
	require.Contains(t, objects(e.about(t, "org1", ana.ID, AsOf{World: at(210 * time.Minute)})), "title:director")
	err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.EndRelation(ctx, tx, "org1", r2.Relation.ID, nil)
		return err
	})
	require.ErrorIs(t, err, strata.ErrConflict)
}

// TestAsOf: what held in the world at a time, by what Strata knows now and by what it knew
// then (the two axes).
func TestAsOf(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1"}
	brand := e.entity(t, sc, "Brand")
	red, blue := "red", "blue"
	day := 24 * time.Hour

	// Learned at t0: the palette is red since January (t0 - 150 days).
	in := RelationInput{Scope: sc, SubjectID: brand.ID, Predicate: "palette", ObjectValue: &red, Functional: true, ValidFrom: at(-150 * day)}
	e.add(t, in)
	// Learned 10 days later: it changed to blue in March (t0 - 90 days).
	e.clk.Advance(10 * day)
	in = RelationInput{Scope: sc, SubjectID: brand.ID, Predicate: "palette", ObjectValue: &blue, Functional: true, ValidFrom: at(-90 * day)}
	e.add(t, in)
	learned := t0.Add(10 * day)

	cases := []struct {
		name  string
		asOf  AsOf
		wants []string
	}{
		{"now", AsOf{}, []string{"palette:blue"}},
		{"world February", AsOf{World: at(-120 * day)}, []string{"palette:red"}},
		{"world April", AsOf{World: at(-60 * day)}, []string{"palette:blue"}},
		{"world the change itself", AsOf{World: at(-90 * day)}, []string{"palette:blue"}},
		{"world before anything", AsOf{World: at(-200 * day)}, nil},
		// What Strata knew at t0 + 1 day: red since January, not yet closed.
		{"world April known then", AsOf{World: at(-60 * day), Record: at(day)}, []string{"palette:red"}},
		{"world February known then", AsOf{World: at(-120 * day), Record: at(day)}, []string{"palette:red"}},
		// Before t0 Strata knew nothing.
		{"known before recording", AsOf{World: at(-60 * day), Record: at(-day)}, nil},
		{"world April known after", AsOf{World: at(-60 * day), Record: &learned}, []string{"palette:blue"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.wants, objects(e.about(t, "org1", brand.ID, c.asOf)))
		})
	}
}

// TestNeighborsDepth3CyclicGraph walks two triangles and a tail (A→B→C→A, C→D→E→C, E→F):
// every entity once, at its shortest depth, with a path free of repeats; closed relations,
// literal values and entities outside the walker's scope are not walked; the limit holds;
// a complete graph past the walk's path budget still answers its nearest entities.
func TestNeighborsDepth3CyclicGraph(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	n := map[string]Entity{}
	for _, name := range []string{"A", "B", "C", "D", "E", "F", "G"} {
		n[name] = e.entity(t, sc, name)
	}
	for _, l := range [][2]string{{"A", "B"}, {"B", "C"}, {"C", "A"}, {"C", "D"}, {"D", "E"}, {"E", "C"}, {"E", "F"}} {
		e.add(t, link(sc, n[l[0]], "knows", n[l[1]], false))
	}
	blue := "blue"
	e.add(t, RelationInput{Scope: sc, SubjectID: n["A"].ID, Predicate: "colour", ObjectValue: &blue})
	// A→G ended before now: not an edge now, an edge as of before.
	g := link(sc, n["A"], "knew", n["G"], false)
	g.ValidFrom, g.ValidTo = at(-48*time.Hour), at(-24*time.Hour)
	e.add(t, g)
	// H belongs to one of u1's sessions: a walk at u1's user level does not see it, an
	// org-wide walk does.
	s9 := strata.Scope{OrgID: "org1", UserID: "u1", SessionID: "s9"}
	h := e.entity(t, s9, "H")
	e.add(t, link(s9, n["B"], "knows", h, false))

	walk := func(q NeighborsQuery) map[string]int {
		t.Helper()
		var out []Neighbor
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			out, err = e.s.Neighbors(ctx, tx, "org1", q)
			return err
		}))
		got := map[string]int{}
		for _, nb := range out {
			_, dup := got[nb.Entity.Name]
			require.False(t, dup, "%s answered twice", nb.Entity.Name)
			got[nb.Entity.Name] = nb.Depth
			require.Len(t, nb.Path, nb.Depth+1)
			require.Equal(t, q.ID, nb.Path[0])
			require.Equal(t, nb.Entity.ID, nb.Path[len(nb.Path)-1])
			seen := map[uuid.UUID]bool{}
			for _, p := range nb.Path {
				require.False(t, seen[p], "path of %s repeats an entity", nb.Entity.Name)
				seen[p] = true
			}
			require.True(t, nb.Via.SubjectID == nb.Entity.ID || (nb.Via.ObjectID != nil && *nb.Via.ObjectID == nb.Entity.ID))
		}
		return got
	}
	u1 := &sc
	require.Equal(t, map[string]int{"B": 1, "C": 1}, walk(NeighborsQuery{ID: n["A"].ID, Depth: 1, Scope: u1}))
	require.Equal(t, map[string]int{"B": 1, "C": 1, "D": 2, "E": 2}, walk(NeighborsQuery{ID: n["A"].ID, Depth: 2, Scope: u1}))
	require.Equal(t, map[string]int{"B": 1, "C": 1, "D": 2, "E": 2, "F": 3}, walk(NeighborsQuery{ID: n["A"].ID, Depth: 3, Scope: u1}))
	require.Equal(t, map[string]int{"B": 1, "C": 1, "D": 2, "E": 2, "F": 3, "H": 2}, walk(NeighborsQuery{ID: n["A"].ID, Depth: 3}))
	require.Equal(t, map[string]int{"A": 3, "B": 3, "C": 2, "D": 2, "E": 1}, walk(NeighborsQuery{ID: n["F"].ID, Depth: 3, Scope: u1}))
	require.Len(t, walk(NeighborsQuery{ID: n["A"].ID, Depth: 3, Limit: 3, Scope: u1}), 3)
	// 36 hours ago only A→G held (the others were recorded as true from t0 on).
	require.Equal(t, map[string]int{"G": 1}, walk(NeighborsQuery{ID: n["A"].ID, Depth: 1, Scope: u1,
		At: AsOf{World: at(-36 * time.Hour)}}))

	err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Neighbors(ctx, tx, "org1", NeighborsQuery{ID: n["A"].ID, Depth: 4})
		return err
	})
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "depth", fe.Field)

	// A complete graph of 30 entities: 29·28·27 = 21,924 paths of length 3, past the walk's
	// budget. Breadth first, every entity is still found at depth 1.
	k := strata.Scope{OrgID: "org1", UserID: "k"}
	var ks []Entity
	for i := range 30 {
		ks = append(ks, e.entity(t, k, fmt.Sprintf("k%02d", i)))
	}
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		for i := range ks {
			for j := i + 1; j < len(ks); j++ {
				if _, err := e.s.AddRelation(ctx, tx, link(k, ks[i], "knows", ks[j], false)); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	start := time.Now()
	got := walk(NeighborsQuery{ID: ks[0].ID, Depth: 3, Scope: &k, Limit: 1000})
	t.Logf("complete graph K30 at depth 3: %v", time.Since(start))
	require.Len(t, got, 29)
	for name, d := range got {
		require.Equal(t, 1, d, name)
	}
}

// TestOrgIsolation: another org sees nothing of an org's graph through the store, and
// row-level security hides and refuses the rows even to SQL that names no org.
func TestOrgIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana := e.entity(t, sc, "Ana")
	acme := e.entity(t, sc, "Acme")
	rel := e.add(t, link(sc, ana, "works_at", acme, true))

	other := strata.Scope{OrgID: "org2", UserID: "u1"}
	mine := e.entity(t, other, "Ana") // the same name in another org is its own entity
	require.NotEqual(t, ana.ID, mine.ID)

	ctx := context.Background()
	require.NoError(t, e.tx(t, "org2", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Get(ctx, tx, "org2", ana.ID)
		require.ErrorIs(t, err, strata.ErrNotFound)
		_, err = e.s.About(ctx, tx, "org2", AboutQuery{ID: ana.ID})
		require.ErrorIs(t, err, strata.ErrNotFound)
		_, err = e.s.Neighbors(ctx, tx, "org2", NeighborsQuery{ID: ana.ID, Depth: 3})
		require.ErrorIs(t, err, strata.ErrNotFound)
		_, err = e.s.History(ctx, tx, "org2", HistoryQuery{EntityID: ana.ID})
		require.ErrorIs(t, err, strata.ErrNotFound)
		_, err = e.s.Relation(ctx, tx, "org2", rel.Relation.ID)
		require.ErrorIs(t, err, strata.ErrNotFound)
		found, err := e.s.Lookup(ctx, tx, "org2", LookupQuery{Name: "ana"})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{mine.ID}, ids(found))
		_, err = e.s.Merge(ctx, tx, "org2", mine.ID, ana.ID)
		require.Error(t, err)
		_, err = e.s.Delete(ctx, tx, "org2", ana.ID)
		require.ErrorIs(t, err, strata.ErrNotFound)
		d, err := e.s.EraseUser(ctx, tx, "org2", "nobody")
		require.NoError(t, err)
		require.Zero(t, d.Entities+d.Relations)
		x, err := e.s.ExportUser(ctx, tx, "org2", "u1")
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{mine.ID}, ids(x.Entities))
		require.Empty(t, x.Relations)
		return nil
	}))
	// A relation from org2 to org1's entity: no such entity.
	_, err := e.tryAdd(t, link(other, mine, "knows", acme, false))
	requireNoSuch(t, err, "object_id")

	// Row-level security, with SQL that filters no org: org2 sees only its own row, and
	// cannot write rows of org1 nor touch them.
	require.NoError(t, e.tx(t, "org2", func(ctx context.Context, tx pgx.Tx) error {
		var ents, rels int
		require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM graph_entities), (SELECT count(*) FROM graph_relations)`).Scan(&ents, &rels))
		require.Equal(t, 1, ents)
		require.Zero(t, rels)
		tag, err := tx.Exec(ctx, `UPDATE graph_entities SET name = 'x' WHERE id = $1`, ana.ID)
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected())
		tag, err = tx.Exec(ctx, `DELETE FROM graph_relations`)
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected())
		return nil
	}))
	err = e.tx(t, "org2", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO graph_entities (org_id, id, name, name_key, created_at, updated_at)
			VALUES ('org1', $1, 'Mallory', 'mallory', now(), now())`, uuid.Must(uuid.NewV7()))
		return err
	})
	require.ErrorContains(t, err, "row-level security")
	// A transaction bound to no org sees nothing.
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM graph_entities`).Scan(&n))
	require.Zero(t, n)
	// And org1's rows are untouched.
	require.EqualValues(t, 2, e.count(t, `SELECT count(*) FROM graph_entities WHERE org_id = 'org1'`))
	require.EqualValues(t, 1, e.count(t, `SELECT count(*) FROM graph_relations WHERE org_id = 'org1'`))
}

func ids(es []Entity) []uuid.UUID {
	out := []uuid.UUID{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// TestScopeOfRelations: a relation may only connect entities its writer's scope can see.
func TestScopeOfRelations(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u1 := strata.Scope{OrgID: "org1", UserID: "u1"}
	u2 := strata.Scope{OrgID: "org1", UserID: "u2"}
	orgWide := strata.Scope{OrgID: "org1"}
	ana := e.entity(t, u1, "Ana")
	bob := e.entity(t, u2, "Bob")
	acme := e.entity(t, orgWide, "Acme")

	e.add(t, link(u1, ana, "works_at", acme, true))           // u1 sees its own and org-level entities
	_, err := e.tryAdd(t, link(u1, ana, "knows", bob, false)) // u1 cannot reach u2's entity
	requireNoSuch(t, err, "object_id")
	_, err = e.tryAdd(t, link(u2, bob, "knows", ana, false))
	requireNoSuch(t, err, "object_id")
	_, err = e.tryAdd(t, link(u1, bob, "knows", ana, false))
	requireNoSuch(t, err, "subject_id")
	_, err = e.tryAdd(t, link(orgWide, acme, "employs", ana, false)) // an org-level writer cannot reach a user's entity
	requireNoSuch(t, err, "object_id")
}

// TestMergeAndDelete: merging re-points every relation version, closes what would
// contradict, unions aliases and leaves a tombstone that reads lead through; deleting
// removes the entity, its relations and its tombstones.
func TestMergeAndDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana := e.resolve(t, ResolveInput{Scope: sc, Name: "Ana", Type: "person"})
	silva := e.resolve(t, ResolveInput{Scope: sc, Name: "A. Silva", Aliases: []string{"Ms Silva"}, Summary: "Runs the Lisbon store"})
	lisbon := e.entity(t, sc, "Lisbon store")
	porto := e.entity(t, sc, "Porto store")
	bob := e.entity(t, sc, "Bob")

	in := link(sc, ana, "manages", lisbon, true)
	in.ValidFrom = at(-60 * 24 * time.Hour)
	e.add(t, in)
	in = link(sc, silva, "manages", porto, true)
	in.ValidFrom = at(-10 * 24 * time.Hour)
	newer := e.add(t, in)
	e.add(t, link(sc, bob, "knows", silva, false))
	e.add(t, link(sc, ana, "likes", bob, false))
	e.add(t, link(sc, silva, "likes", bob, false))   // the same relation on both: one stays
	e.add(t, link(sc, silva, "same_as", ana, false)) // a loop once merged: no longer believed

	e.clk.Advance(time.Minute)
	var res MergeResult
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		res, err = e.s.Merge(ctx, tx, "org1", ana.ID, silva.ID)
		return err
	}))
	require.EqualValues(t, 4, res.Relations) // silva manages Porto, likes Bob, same_as Ana; Bob knows silva
	require.EqualValues(t, 3, res.Closed)    // Ana manages Lisbon, one "likes Bob", "same_as"
	require.Equal(t, ana.ID, res.Survivor.ID)
	require.ElementsMatch(t, []string{"A. Silva", "Ms Silva"}, res.Survivor.Aliases)
	require.Equal(t, "person", res.Survivor.Type)
	require.Equal(t, "Runs the Lisbon store", res.Survivor.Summary)

	var tomb Entity
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		tomb, err = e.s.Get(ctx, tx, "org1", silva.ID)
		return err
	}))
	require.Equal(t, ana.ID, *tomb.MergedInto)

	// Reads of the merged id lead to the survivor; the newer functional relation won.
	a := e.about(t, "org1", silva.ID, AsOf{})
	require.Equal(t, ana.ID, a.Entity.ID)
	require.Equal(t, []string{"likes:Bob", "manages:Porto store"}, objects(a))
	require.Len(t, a.Relations, 3) // and Bob knows her
	// The older Lisbon relation is history, closed where Porto began.
	var lis Relation
	require.NoError(t, e.owner.QueryRow(context.Background(), `SELECT valid_to, superseded_by FROM graph_relations
		WHERE subject_id = $1 AND object_id = $2`, ana.ID, lisbon.ID).Scan(&lis.ValidTo, &lis.SupersededBy))
	require.Equal(t, *at(-10 * 24 * time.Hour), lis.ValidTo.UTC())
	require.Equal(t, newer.Relation.ID, *lis.SupersededBy)

	// Resolution of the merged name finds the survivor; writes through the old id land on it.
	require.Equal(t, ana.ID, e.entity(t, sc, "a. silva").ID)
	r := e.add(t, link(sc, silva, "visited", lisbon, false))
	require.Equal(t, ana.ID, r.Relation.SubjectID)

	// Merging again, or into a tombstone, is refused.
	err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Merge(ctx, tx, "org1", ana.ID, silva.ID)
		return err
	})
	require.ErrorIs(t, err, strata.ErrConflict)

	var d Deletion
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		d, err = e.s.Delete(ctx, tx, "org1", ana.ID)
		return err
	}))
	require.EqualValues(t, 2, d.Entities)  // Ana and the tombstone
	require.EqualValues(t, 7, d.Relations) // every version: manages ×2, likes ×2, same_as, knows, visited
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_entities WHERE id = ANY($1)`, []uuid.UUID{ana.ID, silva.ID}))
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1 OR object_id = $1`, ana.ID))
	require.EqualValues(t, 3, e.count(t, `SELECT count(*) FROM graph_entities`))
}

// TestEraseUserLeavesNothing: a data subject's entities (tombstones too) and every relation
// version naming them or written in their scope are exported, then erased with counts for
// the receipt, and nothing is left; another user's graph stays.
func TestEraseUserLeavesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u1 := strata.Scope{OrgID: "org1", UserID: "u1", SessionID: "s1"}
	u1user := strata.Scope{OrgID: "org1", UserID: "u1"}
	u2 := strata.Scope{OrgID: "org1", UserID: "u2"}
	orgWide := strata.Scope{OrgID: "org1"}
	acme, paris := e.entity(t, orgWide, "Acme"), e.entity(t, orgWide, "Paris")
	ana := e.entity(t, u1user, "Ana")
	anaDup := e.entity(t, u1user, "Ana S.")
	trip := e.entity(t, u1, "Trip to Paris")
	e.add(t, link(u1user, ana, "works_at", acme, true))
	e.add(t, link(u1user, ana, "works_at", paris, true)) // closes the first: two versions
	e.add(t, link(u1, trip, "to", paris, true))
	e.add(t, link(u1, acme, "near", paris, false)) // org-level entities, written in u1's session
	e.add(t, link(u1user, anaDup, "likes", acme, false))
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Merge(ctx, tx, "org1", ana.ID, anaDup.ID)
		return err
	}))
	bob := e.entity(t, u2, "Bob")
	e.add(t, link(u2, bob, "works_at", acme, true))
	e.add(t, link(orgWide, acme, "in", paris, true))

	var x Export
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		x, err = e.s.ExportUser(ctx, tx, "org1", "u1")
		return err
	}))
	require.ElementsMatch(t, []uuid.UUID{ana.ID, anaDup.ID, trip.ID}, ids(x.Entities))
	require.Len(t, x.Relations, 5)

	// In batches of 2, each committed on its own, as the erasure engine runs them.
	var d Deletion
	for batches := 1; ; batches++ {
		var b Deletion
		var done bool
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			b, done, err = e.s.EraseUserBatch(ctx, tx, "org1", "u1", 2)
			return err
		}))
		require.LessOrEqual(t, b.Entities+b.Relations, int64(2))
		d.Entities, d.Relations = d.Entities+b.Entities, d.Relations+b.Relations
		if done {
			require.Equal(t, 5, batches) // 8 rows, 2 a batch; the last finds less than 2
			break
		}
	}
	require.Equal(t, Deletion{Entities: 3, Relations: 5}, d)

	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_entities WHERE user_id = 'u1'`))
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_relations WHERE user_id = 'u1'
		OR subject_id = ANY($1) OR object_id = ANY($1)`, []uuid.UUID{ana.ID, anaDup.ID, trip.ID}))
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		again, err := e.s.EraseUser(ctx, tx, "org1", "u1")
		require.Zero(t, again)
		require.NoError(t, err)
		n, err := e.s.RemainingUser(ctx, tx, "org1", "u1")
		require.Zero(t, n)
		require.NoError(t, err)
		x, err = e.s.ExportUser(ctx, tx, "org1", "u1")
		require.Empty(t, x.Entities)
		require.Empty(t, x.Relations)
		return err
	}))
	// What was not the subject's stays.
	require.EqualValues(t, 3, e.count(t, `SELECT count(*) FROM graph_entities`))
	require.EqualValues(t, 2, e.count(t, `SELECT count(*) FROM graph_relations`))
}

// TestEraseMemories: relations derived from erased memories go, and so do entities only
// those memories mentioned; an entity other data supports stays without them.
func TestEraseMemories(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1"}
	m1, m2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	only := e.resolve(t, ResolveInput{Scope: sc, Name: "Only m1", SourceMemoryID: &m1})
	both := e.resolve(t, ResolveInput{Scope: sc, Name: "Both", SourceMemoryID: &m1})
	both = e.resolve(t, ResolveInput{Scope: sc, Name: "Both", SourceMemoryID: &m2})
	require.Equal(t, []uuid.UUID{m1, m2}, both.SourceMemoryIDs)
	still := e.resolve(t, ResolveInput{Scope: sc, Name: "Still linked", SourceMemoryID: &m1})
	keeper := e.entity(t, sc, "Keeper")
	in := link(sc, only, "knows", both, false)
	in.Provenance.MemoryID = &m1
	e.add(t, in)
	in = link(sc, keeper, "knows", still, false)
	in.Provenance.MemoryID = &m2
	e.add(t, in)

	var d Deletion
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		d, err = e.s.EraseMemories(ctx, tx, "org1", []uuid.UUID{m1})
		return err
	}))
	require.Equal(t, Deletion{Entities: 1, Relations: 1}, d)
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_entities WHERE $1 = ANY(source_memory_ids)`, m1))
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_relations WHERE source_memory_id = $1`, m1))
	require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_entities WHERE id = $1`, only.ID))
	require.EqualValues(t, 3, e.count(t, `SELECT count(*) FROM graph_entities`)) // both (m2), still (linked), keeper
}

// TestValidation: bad input is refused with the field named, before any SQL.
func TestValidation(t *testing.T) {
	t.Parallel()
	s := NewStore(Options{})
	ctx := context.Background()
	sc := strata.Scope{OrgID: "org1"}
	id := uuid.Must(uuid.NewV7())
	v := "x"
	long := strings.Repeat("x", MaxNameLen+1)
	for _, c := range []struct {
		field string
		in    any
	}{
		{"name", ResolveInput{Scope: sc, Name: "  "}},
		{"name", ResolveInput{Scope: sc, Name: "a\x00b"}},
		{"aliases[1]", ResolveInput{Scope: sc, Name: "Ana", Aliases: []string{"A", ""}}},
		{"name", ResolveInput{Scope: sc, Name: strings.Repeat("\U00020000", 376)}}, // 376 characters, 1,504 bytes: over MaxNameBytes
		{"aliases[0]", ResolveInput{Scope: sc, Name: "Ana", Aliases: []string{strings.Repeat("\U00020000", 376)}}},
		{"user_id", ResolveInput{Scope: strata.Scope{OrgID: "org1", UserID: "bad id"}, Name: "Ana"}},
		{"embedding", ResolveInput{Scope: sc, Name: "Ana", Vector: []float32{1, 2}, Space: Space{Embedder: "e", Dims: 3}}},
		{"subject_id", RelationInput{Scope: sc, Predicate: "p", ObjectValue: &v}},
		{"predicate", RelationInput{Scope: sc, SubjectID: id, Predicate: " ", ObjectValue: &v}},
		{"object_id", RelationInput{Scope: sc, SubjectID: id, Predicate: "p"}},
		{"object_id", RelationInput{Scope: sc, SubjectID: id, Predicate: "p", ObjectID: &id}},
		{"object_value", RelationInput{Scope: sc, SubjectID: id, Predicate: "p", ObjectValue: &long}},
		{"valid_to", RelationInput{Scope: sc, SubjectID: id, Predicate: "p", ObjectValue: &v, ValidFrom: at(0), ValidTo: at(-time.Hour)}},
	} {
		var err error
		switch in := c.in.(type) {
		case ResolveInput:
			_, _, err = s.Resolve(ctx, nil, in)
		case RelationInput:
			_, err = s.AddRelation(ctx, nil, in)
		}
		var fe *strata.FieldError
		require.Truef(t, errors.As(err, &fe), "%s: %v", c.field, err)
		require.Equal(t, c.field, fe.Field)
	}
}

// TestEmbeddingStored: the caller's vector of name + summary is stored with its space, and
// a later resolution with a new vector replaces it.
func TestEmbeddingStored(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1"}
	vec := make([]float32, 384)
	vec[0] = 1
	space := Space{Embedder: "hash", Model: "lexical-v1", Dims: 384}
	ent := e.resolve(t, ResolveInput{Scope: sc, Name: "Acme", Summary: "A client", Vector: vec, Space: space})
	require.Equal(t, &space, ent.Embedding)
	vec2 := make([]float32, 8)
	vec2[1] = 1
	space2 := Space{Embedder: "openai", Model: "small", Dims: 8}
	ent = e.resolve(t, ResolveInput{Scope: sc, Name: "acme", Vector: vec2, Space: space2})
	require.Equal(t, &space2, ent.Embedding)
	require.Equal(t, "A client", ent.Summary)
	var dims int
	require.NoError(t, e.owner.QueryRow(context.Background(), `SELECT vector_dims(embedding) FROM graph_entities WHERE id = $1`, ent.ID).Scan(&dims))
	require.Equal(t, 8, dims)
	// Without a vector the stored one stays.
	ent = e.resolve(t, ResolveInput{Scope: sc, Name: "ACME", Aliases: []string{"  Acme   Corp "}})
	require.Equal(t, &space2, ent.Embedding)
	require.Equal(t, []string{"Acme Corp"}, ent.Aliases)
}

// TestConcurrentContradictions: 8 writers each say Ana now manages another store, at once.
// Every write succeeds, one relation stays in force, and the other seven are closed and
// kept, each superseded by another.
func TestConcurrentContradictions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana := e.entity(t, sc, "Ana")
	stores := make([]Entity, 8)
	for i := range stores {
		stores[i] = e.entity(t, sc, fmt.Sprintf("Store %d", i))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each also resolves the store again in its transaction (row locks on both sides).
			errs[i] = e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
				if _, _, err := e.s.Resolve(ctx, tx, ResolveInput{Scope: sc, Name: stores[(i+1)%len(stores)].Name, Aliases: []string{"shop"}}); err != nil {
					return err
				}
				_, err := e.s.AddRelation(ctx, tx, link(sc, ana, "manages", stores[i], true))
				return err
			})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "writer %d", i)
	}
	require.EqualValues(t, 8, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1`, ana.ID))
	require.EqualValues(t, 1, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1 AND valid_to IS NULL AND superseded_at IS NULL`, ana.ID))
	require.EqualValues(t, 7, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1 AND superseded_by IS NOT NULL`, ana.ID))
	require.Len(t, e.about(t, "org1", ana.ID, AsOf{}).Relations, 1)
}

// TestSearch: an exact name or alias leads, full text finds words in names, aliases and
// summaries, the vector leg ranks by meaning within its space, and both stay in the
// caller's org and scope.
func TestSearch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	space := Space{Embedder: "hash", Model: "m", Dims: 3}
	vec := func(x, y, z float32) []float32 { return []float32{x, y, z} }
	ana := e.resolve(t, ResolveInput{Scope: sc, Name: "Ana Silva", Aliases: []string{"Ana"}, Summary: "Manages the Lisbon store",
		Vector: vec(1, 0, 0), Space: space})
	store := e.resolve(t, ResolveInput{Scope: sc, Name: "Lisbon store", Summary: "Flagship shop", Vector: vec(0, 1, 0), Space: space})
	city := e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "org1"}, Name: "Lisbon", Vector: vec(0.9, 0.1, 0), Space: space})
	e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "org1", UserID: "u2"}, Name: "Lisbon office"})
	e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "org2"}, Name: "Lisbon"})
	other := e.resolve(t, ResolveInput{Scope: sc, Name: "Other space", Vector: []float32{1, 0}, Space: Space{Embedder: "hash", Model: "m", Dims: 2}})

	search := func(q SearchQuery) []SearchResult {
		t.Helper()
		var out []SearchResult
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			out, err = e.s.Search(ctx, tx, "org1", q)
			return err
		}))
		return out
	}
	names := func(rs []SearchResult) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Entity.Name)
		}
		return out
	}

	got := search(SearchQuery{Scope: &sc, Text: "lisbon"})
	require.Equal(t, "Lisbon", got[0].Entity.Name, "the exact name leads")
	require.True(t, got[0].Exact)
	require.ElementsMatch(t, []string{"Lisbon", "Lisbon store", "Ana Silva"}, names(got), "u2's entity and org2's are not found")
	require.Equal(t, ana.ID, search(SearchQuery{Scope: &sc, Text: "ANA"})[0].Entity.ID, "an alias is exact too")
	require.Contains(t, names(search(SearchQuery{Text: "lisbon"})), "Lisbon office", "an org-wide search sees every user's")

	// By meaning: nearest first, within the space only.
	got = search(SearchQuery{Scope: &sc, Vector: vec(1, 0.05, 0), Space: space})
	require.Equal(t, []string{"Ana Silva", "Lisbon", "Lisbon store"}, names(got))
	require.InDelta(t, 1, *got[0].Similarity, 0.01)
	require.NotContains(t, names(got), other.Name)

	// Fused: found by both legs beats found by one.
	got = search(SearchQuery{Scope: &sc, Text: "flagship shop", Vector: vec(0, 1, 0), Space: space})
	require.Equal(t, store.ID, got[0].Entity.ID)
	require.Equal(t, 1, got[0].TextRank)
	require.Equal(t, 1, got[0].VectorRank)
	require.InDelta(t, 1, got[0].Score, 1e-9)

	// Names change search_text through the trigger: a merge's new aliases are found.
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Merge(ctx, tx, "org1", ana.ID, store.ID)
		return err
	}))
	got = search(SearchQuery{Scope: &sc, Text: "Lisbon  Store"})
	require.Equal(t, ana.ID, got[0].Entity.ID)
	require.True(t, got[0].Exact)
	require.NotContains(t, names(got), "Lisbon store", "a tombstone is not found")
	require.Equal(t, city.ID, search(SearchQuery{Scope: &sc, Text: "lisbon"})[0].Entity.ID)

	err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Search(ctx, tx, "org1", SearchQuery{Text: " "})
		return err
	})
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "text", fe.Field)
}

// TestSplit: an entity joined wrongly is split by hand; the new one takes the named aliases
// and relations, the old one keeps the rest, and resolution then tells them apart.
func TestSplit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	// "Ana Costa" was resolved into Ana Silva by a shared alias "Ana".
	ana := e.resolve(t, ResolveInput{Scope: sc, Name: "Ana Silva", Aliases: []string{"Ana", "Ana Costa", "Costa"}})
	lisbon, porto := e.entity(t, sc, "Lisbon store"), e.entity(t, sc, "Porto store")
	keep := e.add(t, link(sc, ana, "manages", lisbon, true))
	move := e.add(t, link(sc, porto, "employs", ana, false))

	var res SplitResult
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		res, err = e.s.Split(ctx, tx, "org1", SplitInput{From: ana.ID, Name: "Ana Costa", Type: "person",
			Aliases: []string{"costa"}, Relations: []uuid.UUID{move.Relation.ID}})
		return err
	}))
	require.EqualValues(t, 1, res.Relations)
	require.Equal(t, []string{"Ana"}, res.From.Aliases)
	require.Equal(t, "Ana Costa", res.New.Name)
	require.Equal(t, []string{"costa"}, res.New.Aliases)
	require.Equal(t, res.New.ID, e.entity(t, sc, "Ana Costa").ID)
	require.Equal(t, ana.ID, e.entity(t, sc, "Ana").ID)
	require.Equal(t, []string{"manages:Lisbon store"}, objects(e.about(t, "org1", ana.ID, AsOf{})))
	moved := e.about(t, "org1", res.New.ID, AsOf{})
	require.Len(t, moved.Relations, 1)
	require.Equal(t, porto.ID, moved.Relations[0].SubjectID)

	for _, c := range []struct {
		in    SplitInput
		field string
	}{
		{SplitInput{From: ana.ID, Name: "Ana Silva"}, "name"},
		{SplitInput{From: ana.ID, Name: "Someone", Aliases: []string{"unknown"}}, "aliases[0]"},
		{SplitInput{From: ana.ID, Name: "Someone", Relations: []uuid.UUID{keep.Relation.ID, move.Relation.ID}}, "relations"},
	} {
		err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			_, err := e.s.Split(ctx, tx, "org1", c.in)
			return err
		})
		var fe *strata.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, c.field, fe.Field)
	}
	// A name another entity has: a conflict, and nothing changed.
	err := e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		_, err := e.s.Split(ctx, tx, "org1", SplitInput{From: ana.ID, Name: "Lisbon store"})
		return err
	})
	require.ErrorIs(t, err, strata.ErrConflict)
	require.EqualValues(t, 4, e.count(t, `SELECT count(*) FROM graph_entities`))
}

// TestHistoryPagesAndLookup: history pages in recording order with a cursor; lookup finds
// the entities a scope can see by name or alias, the most specific scope first.
func TestHistoryPagesAndLookup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana := e.entity(t, sc, "Ana")
	var added []uuid.UUID
	for i := range 5 {
		v := fmt.Sprintf("v%d", i)
		e.clk.Advance(time.Minute)
		added = append(added, e.add(t, RelationInput{Scope: sc, SubjectID: ana.ID, Predicate: "status", ObjectValue: &v, Functional: true}).Relation.ID)
	}
	var pages [][]uuid.UUID
	var after *uuid.UUID
	for {
		var page []Relation
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			page, err = e.s.History(ctx, tx, "org1", HistoryQuery{EntityID: ana.ID, Limit: 2, After: after})
			return err
		}))
		if len(page) == 0 {
			break
		}
		var p []uuid.UUID
		for _, r := range page {
			p = append(p, r.ID)
		}
		pages = append(pages, p)
		after = &page[len(page)-1].ID
	}
	require.Equal(t, [][]uuid.UUID{added[0:2], added[2:4], added[4:5]}, pages)

	orgAna := e.entity(t, strata.Scope{OrgID: "org1"}, "Ana")
	sessAna := e.entity(t, strata.Scope{OrgID: "org1", UserID: "u1", SessionID: "s1"}, "ana")
	e.entity(t, strata.Scope{OrgID: "org1", UserID: "u2"}, "Ana")
	lookup := func(scope *strata.Scope) []uuid.UUID {
		var out []Entity
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			out, err = e.s.Lookup(ctx, tx, "org1", LookupQuery{Name: " ANA ", Scope: scope})
			return err
		}))
		return ids(out)
	}
	require.Equal(t, []uuid.UUID{sessAna.ID, ana.ID, orgAna.ID}, lookup(&strata.Scope{OrgID: "org1", UserID: "u1", SessionID: "s1"}))
	require.Equal(t, []uuid.UUID{ana.ID, orgAna.ID}, lookup(&sc))
	require.Len(t, lookup(nil), 4)
}

// TestHideRestrictedSubjects: reads given restricted subjects (GDPR Art. 18) leave out their
// entities and relations everywhere — lookup, search, about, history, neighbours — and a
// read that starts from one of their entities answers ErrRestricted.
func TestHideRestrictedSubjects(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u1 := strata.Scope{OrgID: "org1", UserID: "u1"}
	u2 := strata.Scope{OrgID: "org1", UserID: "u2"}
	acme := e.entity(t, strata.Scope{OrgID: "org1"}, "Acme")
	ana := e.entity(t, u1, "Ana")
	bob := e.entity(t, u2, "Bob")
	e.add(t, link(u1, ana, "works_at", acme, true))
	e.add(t, link(u2, bob, "works_at", acme, true))
	note := "client since 2020"
	e.add(t, RelationInput{Scope: u1, SubjectID: acme.ID, Predicate: "note", ObjectValue: &note}) // written for u1
	hide := []string{"u1"}

	var (
		about, aboutAll    About
		hist               []Relation
		nbs                []Neighbor
		found              []Entity
		results            []SearchResult
		errAbout, errHist  error
		errWalk, errLookup error
	)
	require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if about, err = e.s.About(ctx, tx, "org1", AboutQuery{ID: acme.ID, Hide: hide}); err != nil {
			return err
		}
		if aboutAll, err = e.s.About(ctx, tx, "org1", AboutQuery{ID: acme.ID}); err != nil {
			return err
		}
		if hist, err = e.s.History(ctx, tx, "org1", HistoryQuery{EntityID: acme.ID, Hide: hide}); err != nil {
			return err
		}
		if nbs, err = e.s.Neighbors(ctx, tx, "org1", NeighborsQuery{ID: acme.ID, Hide: hide}); err != nil {
			return err
		}
		if found, err = e.s.Lookup(ctx, tx, "org1", LookupQuery{Name: "ana", Hide: hide}); err != nil {
			return err
		}
		if results, err = e.s.Search(ctx, tx, "org1", SearchQuery{Text: "ana bob", Hide: hide}); err != nil {
			return err
		}
		_, errAbout = e.s.About(ctx, tx, "org1", AboutQuery{ID: ana.ID, Hide: hide})
		_, errHist = e.s.History(ctx, tx, "org1", HistoryQuery{EntityID: ana.ID, Hide: hide})
		_, errWalk = e.s.Neighbors(ctx, tx, "org1", NeighborsQuery{ID: ana.ID, Hide: hide})
		_, errLookup = e.s.Lookup(ctx, tx, "org1", LookupQuery{Name: "bob", Hide: hide})
		return nil
	}))
	require.Len(t, aboutAll.Relations, 3)
	require.Len(t, about.Relations, 1)
	require.Equal(t, bob.ID, about.Relations[0].SubjectID)
	require.Len(t, hist, 1)
	require.Len(t, nbs, 1)
	require.Equal(t, bob.ID, nbs[0].Entity.ID)
	require.Empty(t, found)
	require.Len(t, results, 1)
	require.Equal(t, bob.ID, results[0].Entity.ID)
	require.ErrorIs(t, errAbout, strata.ErrRestricted)
	require.ErrorIs(t, errHist, strata.ErrRestricted)
	require.ErrorIs(t, errWalk, strata.ErrRestricted)
	require.NoError(t, errLookup)
}

// TestMergeRacesRelationWrites: while one transaction merges M into S, 8 writers add
// relations to and from M. Every write commits, and afterwards no relation names the
// tombstone: a writer that raced the merge waited for it and followed M to S.
func TestMergeRacesRelationWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	for round := range 3 {
		s := e.entity(t, sc, fmt.Sprintf("S%d", round))
		m := e.entity(t, sc, fmt.Sprintf("M%d", round))
		others := make([]Entity, 8)
		for i := range others {
			others[i] = e.entity(t, sc, fmt.Sprintf("X%d-%d", round, i))
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(others)+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[len(others)] = e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
				_, err := e.s.Merge(ctx, tx, "org1", s.ID, m.ID)
				return err
			})
		}()
		for i, x := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				in := link(sc, x, "knows", m, false)
				if i%2 == 1 {
					in = link(sc, m, "knows", x, false)
				}
				_, errs[i] = e.tryAdd(t, in)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, writer %d", round, i)
		}
		require.EqualValues(t, 0, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1 OR object_id = $1`, m.ID))
		require.EqualValues(t, 8, e.count(t, `SELECT count(*) FROM graph_relations WHERE subject_id = $1 OR object_id = $1`, s.ID))
	}
}
