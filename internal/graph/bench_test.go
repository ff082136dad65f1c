package graph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkGraph100k measures the reads issue 43 sets a target for (p99 < 10 ms at 100k
// relations): entity lookup by name and neighbours at depth 2, each in its own org-bound
// transaction as a request runs it, as the app role (row-level security applies). The
// graph: 10,000 entities of one org — 100 users with 90 entities each and 1,000 org-level
// ones (places, clients) — and 100,000 relations written in the users' scopes, 80 % between
// a user's own entities and 20 % to org-level ones; one in ten relations is a closed
// version. Another org holds a copy, to be filtered away. It loads by COPY, so it runs only
// when asked:
//
//	STRATA_BENCH_GRAPH=1 go test ./internal/graph/ -run '^$' -bench Graph100k -benchtime 2000x
func BenchmarkGraph100k(b *testing.B) {
	if os.Getenv("STRATA_BENCH_GRAPH") == "" {
		b.Skip("set STRATA_BENCH_GRAPH=1 to run the 100k-relation benchmark")
	}
	pool, dsn := testenv.Pool(b)
	ctx := context.Background()
	owner := testenv.OwnerConn(b, dsn)
	r := rand.New(rand.NewPCG(4, 3))
	const users, perUser, shared, relations = 100, 90, 1000, 100_000
	type ent struct {
		id   uuid.UUID
		user string
		name string
	}
	var ents []ent
	byUser := map[string][]ent{}
	for i := range shared {
		ents = append(ents, ent{uuid.Must(uuid.NewV7()), "", fmt.Sprintf("Place %d", i)})
	}
	for u := range users {
		user := fmt.Sprintf("u%d", u)
		for i := range perUser {
			e := ent{uuid.Must(uuid.NewV7()), user, fmt.Sprintf("Person %d of %s", i, user)}
			ents = append(ents, e)
			byUser[user] = append(byUser[user], e)
		}
	}
	now := time.Now().UTC()
	for _, org := range []string{"org1", "org2"} {
		rows := make([][]any, len(ents))
		for i, e := range ents {
			id := e.id
			if org == "org2" {
				id = uuid.Must(uuid.NewV7())
			}
			k := Normalize(e.name)
			rows[i] = []any{org, id, e.user, e.name, k, []string{k}, now, now}
		}
		if _, err := owner.CopyFrom(ctx, pgx.Identifier{"graph_entities"}, []string{"org_id", "id", "user_id", "name",
			"name_key", "keys", "created_at", "updated_at"}, pgx.CopyFromRows(rows)); err != nil {
			b.Fatal(err)
		}
	}
	var rels [][]any
	for i := range relations {
		user := fmt.Sprintf("u%d", r.IntN(users))
		own := byUser[user]
		subj := own[r.IntN(len(own))]
		obj := own[r.IntN(len(own))]
		if r.IntN(5) == 0 {
			obj = ents[r.IntN(shared)]
		}
		if obj.id == subj.id {
			continue
		}
		from := now.Add(-time.Duration(r.IntN(1000)) * time.Hour)
		var to, sup any
		if i%10 == 0 {
			to, sup = from.Add(time.Hour), now
		}
		rels = append(rels, []any{"org1", uuid.Must(uuid.NewV7()), user, subj.id, fmt.Sprintf("p%d", r.IntN(20)), obj.id,
			from, to, now, sup})
	}
	if _, err := owner.CopyFrom(ctx, pgx.Identifier{"graph_relations"}, []string{"org_id", "id", "user_id", "subject_id",
		"predicate", "object_id", "valid_from", "valid_to", "recorded_at", "superseded_at"}, pgx.CopyFromRows(rels)); err != nil {
		b.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `ANALYZE graph_entities; ANALYZE graph_relations`); err != nil {
		b.Fatal(err)
	}
	s := NewStore(Options{})

	measure := func(b *testing.B, op func(ctx context.Context, tx pgx.Tx, i int) (int, error)) {
		lat := make([]time.Duration, 0, b.N)
		total := 0
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			err := pg.InOrgTx(ctx, pool, "org1", func(tx pgx.Tx) error {
				n, err := op(ctx, tx, i)
				total += n
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
		b.ReportMetric(float64(total)/float64(b.N), "rows/op")
	}
	b.Run("lookup", func(b *testing.B) {
		measure(b, func(ctx context.Context, tx pgx.Tx, i int) (int, error) {
			e := ents[(i*7919)%len(ents)]
			sc := &strata.Scope{OrgID: "org1", UserID: e.user}
			out, err := s.Lookup(ctx, tx, "org1", LookupQuery{Name: e.name, Scope: sc, Limit: 10})
			if err == nil && len(out) != 1 {
				err = fmt.Errorf("lookup %q: %d entities", e.name, len(out))
			}
			return len(out), err
		})
	})
	b.Run("about", func(b *testing.B) {
		measure(b, func(ctx context.Context, tx pgx.Tx, i int) (int, error) {
			e := ents[shared+(i*7919)%(len(ents)-shared)]
			a, err := s.About(ctx, tx, "org1", AboutQuery{ID: e.id, Limit: 100})
			return len(a.Relations), err
		})
	})
	for _, depth := range []int{2, 3} {
		b.Run(fmt.Sprintf("neighbors/depth=%d", depth), func(b *testing.B) {
			measure(b, func(ctx context.Context, tx pgx.Tx, i int) (int, error) {
				e := ents[shared+(i*7919)%(len(ents)-shared)]
				sc := &strata.Scope{OrgID: "org1", UserID: e.user}
				out, err := s.Neighbors(ctx, tx, "org1", NeighborsQuery{ID: e.id, Depth: depth, Limit: 100, Scope: sc})
				return len(out), err
			})
		})
	}
}
