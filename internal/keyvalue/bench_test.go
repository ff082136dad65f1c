package keyvalue

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkKVUncachedGet compares the store's uncached resolved read (four scope levels in
// one Postgres round trip, row-level security bound) with a bare primary-key SELECT of the
// same row by the table owner, in the same run; cached is the store's read served by Redis,
// for scale. Metrics: store-ns/op, pg-ns/op and their ratio.
func BenchmarkKVUncachedGet(b *testing.B) {
	pool, dsn := testenv.Pool(b)
	rdb, prefix := testenv.Redis(b)
	uncached := New(pool, rdb, Options{Prefix: prefix, DisableCache: true})
	cachedStore := New(pool, rdb, Options{Prefix: prefix})
	ctx := context.Background()
	value := []byte(`{"palette":["#112233","#445566","#778899"],"font":"Inter","caption_style":"lower-third"}`)
	sess := pg.NewSession(pool, "acme")
	tx, err := sess.Tx(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, sc := range []strata.Scope{{OrgID: "acme"}, {OrgID: "acme", UserID: "u1"}} {
		if _, _, err := uncached.Put(ctx, tx, sess.AfterCommit, WriteInput{Namespace: "brand", Key: "profile", Scope: sc, Value: value, Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	if err := sess.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	owner, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(owner.Close)
	sc := strata.Scope{OrgID: "acme", UserID: "u1", AgentID: "a1", SessionID: "s1"}
	storeGet := func(s *Store) func() {
		return func() {
			e, err := s.Get(ctx, "brand", "profile", sc, false)
			if err != nil || e.Level != LevelUser {
				b.Fatal(err, e.Level)
			}
		}
	}
	pkSelect := func() {
		var v []byte
		if err := owner.QueryRow(ctx, `SELECT value FROM kv_entries
			WHERE org_id = $1 AND namespace = $2 AND key = $3 AND level = $4 AND scope_id = $5`,
			"acme", "brand", "profile", "user", "u1").Scan(&v); err != nil {
			b.Fatal(err)
		}
	}
	timeIt := func(n int, f func()) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			f()
		}
		return time.Since(start)
	}
	for i := 0; i < 200; i++ { // warm connections and statement caches
		storeGet(uncached)()
		storeGet(cachedStore)()
		pkSelect()
	}
	b.ResetTimer()
	st := timeIt(b.N, storeGet(uncached))
	pk := timeIt(b.N, pkSelect)
	ca := timeIt(b.N, storeGet(cachedStore))
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(st), "store-ns/op")
	b.ReportMetric(per(pk), "pg-ns/op")
	b.ReportMetric(per(st)/per(pk), "ratio")
	b.ReportMetric(per(ca), "cached-store-ns/op")
}
