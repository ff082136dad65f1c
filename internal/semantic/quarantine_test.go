package semantic_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestQuarantineKeepsHeldMemoriesOutOfConsolidation: held versions are never merged into
// a near-duplicate nor promoted from session facts (a laundering path: consolidation
// would rewrite them under its own provenance and trust), and a write racing a new
// quarantine is held either way.
func TestQuarantineKeepsHeldMemoriesOutOfConsolidation(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	store := semantic.NewStore(semantic.Options{DedupThreshold: 1}, nil)
	write := func(key, user, session, text string) semantic.Memory {
		var m semantic.Memory
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			var err error
			m, _, err = store.Create(ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: "acme", UserID: user, SessionID: session},
				Kind: "fact", Text: text, Importance: 0.5, Vector: embed.NewLexical(384).One(text), Space: space384,
				Provenance: semantic.Provenance{KeyID: key}})
			return err
		}))
		return m
	}
	since := time.Now().UTC().Add(-time.Minute)
	good := write("key_good", "u1", "s1", "the client wants the logo top left")
	bad1 := write("key_bad", "u1", "s1", "the client wants the logo top left always")
	bad2 := write("key_bad", "u1", "s2", "the client wants the logo top left!")

	pairs := func() []semantic.Pair {
		var ps []semantic.Pair
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			a, err := store.NearDuplicatePairs(ctx, tx, "acme", since, 0.8, 100)
			b, err2 := store.SessionFactPairs(ctx, tx, "acme", []string{"fact"}, 0.8, 100)
			ps = append(a, b...)
			require.NoError(t, err2)
			return err
		}))
		return ps
	}
	involves := func(ps []semantic.Pair, id uuid.UUID) bool {
		for _, p := range ps {
			if p.A == id || p.B == id {
				return true
			}
		}
		return false
	}
	require.True(t, involves(pairs(), bad1.ID) && involves(pairs(), bad2.ID), "the test's memories are near-duplicates")

	var q semantic.Quarantine
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		var err error
		q, err = store.CreateQuarantine(ctx, tx, "acme", semantic.NewQuarantine{KeyID: "key_bad", Since: since, CreatedBy: "admin"})
		return err
	}))
	require.Equal(t, 2, q.Held)
	ps := pairs()
	require.False(t, involves(ps, bad1.ID) || involves(ps, bad2.ID), "held versions are not merge candidates: %v", ps)
	var facts []semantic.Memory
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		var err error
		facts, err = store.SessionFacts(ctx, tx, "acme", []string{"fact"}, 100)
		return err
	}))
	for _, f := range facts {
		require.NotContains(t, []uuid.UUID{bad1.ID, bad2.ID}, f.ID, "held versions are not promotion candidates")
	}
	require.NotEmpty(t, facts, "the good one still is")
	_ = good

	// A write by the key in a transaction that overlaps the quarantine's creation is held.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT set_config('app.org_id', 'acme', true)`)
	require.NoError(t, err)
	racing, _, err := store.Create(ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: "acme", UserID: "u9"}, Kind: "fact",
		Text: "racing write", Importance: 0.5, Vector: embed.NewLexical(384).One("racing write"), Space: space384,
		Provenance: semantic.Provenance{KeyID: "key_race"}})
	require.NoError(t, err)
	created := make(chan semantic.Quarantine)
	go func() {
		var q2 semantic.Quarantine
		_ = pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			var err error
			q2, err = store.CreateQuarantine(ctx, tx, "acme", semantic.NewQuarantine{KeyID: "key_race", Since: since, CreatedBy: "admin"})
			return err
		})
		created <- q2
	}()
	select {
	case <-created:
		t.Fatal("the quarantine did not wait for the in-flight write")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	q2 := <-created
	require.Equal(t, 1, q2.Held, "the racing write committed first and was held")
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		held, err := store.IsQuarantined(ctx, tx, "acme", racing.ID)
		require.True(t, held)
		return err
	}))
}
