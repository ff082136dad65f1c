package semantic_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestSearchStrategies checks what Search reports and returns on each of its paths — the
// exact sort chosen by the scope count (the full-text leg in the same round trip), the
// HNSW scan for a scope past ExactBelow, the exact fallback when the HNSW scan comes
// back short, an empty scope — against the forced exact search as the reference.
func TestSearchStrategies(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	words := []string{"logo", "caption", "music", "export", "colour", "font", "intro", "outro", "trim", "audio"}
	var texts []string
	for i := range 48 {
		texts = append(texts, fmt.Sprintf("%s %s note %d", words[i%len(words)], words[(i*3+1)%len(words)], i))
	}
	for i, x := range texts {
		user := "u-big"
		if i < 6 {
			user = "u-small"
		}
		createMemory(t, pool, "acme", user, x)
	}
	// Another org's memory matches the same query and must never show.
	createMemory(t, pool, "globex", "u-small", "logo caption from another org")

	search := func(store *semantic.Store, user, text string, strategy semantic.Strategy) ([]semantic.Result, semantic.SearchInfo) {
		return searchAs(t, pool, store, "acme", user, text, 5, strategy)
	}
	same := func(want, got []semantic.Result) {
		t.Helper()
		require.Len(t, got, len(want))
		for i := range want {
			require.Equal(t, want[i].Memory.ID, got[i].Memory.ID, "rank %d", i+1)
			require.Equal(t, want[i].Memory.Text, got[i].Memory.Text)
			require.Equal(t, want[i].Score, got[i].Score, "rank %d", i+1)
		}
	}

	// One clock for every search, so that results compared across searches rank with the
	// same recency (a loaded machine puts seconds between them).
	at := time.Now()
	clock := func() time.Time { return at }

	// A small scope: auto counts it and sorts exactly.
	auto := semantic.NewStore(semantic.Options{}, clock)
	want, winfo := search(auto, "u-small", "logo caption", semantic.StrategyExact)
	require.Equal(t, semantic.StrategyExact, winfo.Strategy)
	require.Equal(t, -1, winfo.ScopeSize, "a forced strategy counts nothing")
	got, info := search(auto, "u-small", "logo caption", semantic.StrategyAuto)
	require.Equal(t, semantic.StrategyExact, info.Strategy)
	require.Equal(t, 6, info.ScopeSize)
	require.False(t, info.Fallback)
	require.Equal(t, 6, info.VectorCandidates, "every memory of the scope is a vector candidate")
	require.Equal(t, winfo.TextCandidates, info.TextCandidates)
	require.Positive(t, info.TextCandidates)
	same(want, got)
	require.NotEmpty(t, got)
	for _, r := range got {
		require.Equal(t, "u-small", r.Memory.UserID)
		require.NotContains(t, r.Memory.Text, "another org")
		require.Positive(t, r.Score.VectorRank)
	}
	require.Positive(t, got[0].Score.TextRank, "the best match matches the words too")

	// Words nobody wrote: no text candidates, the vector leg still answers.
	got, info = search(auto, "u-small", "zebra quokka", semantic.StrategyAuto)
	require.Zero(t, info.TextCandidates)
	require.Len(t, got, 5)

	// An empty scope: counted as 0, nothing returned.
	got, info = search(auto, "u-nobody", "logo caption", semantic.StrategyAuto)
	require.Empty(t, got)
	require.Equal(t, semantic.StrategyExact, info.Strategy)
	require.Zero(t, info.ScopeSize)
	require.Zero(t, info.VectorCandidates+info.TextCandidates)

	// Past ExactBelow: the count stops at ExactBelow+1 and HNSW answers; the text leg's
	// candidates from the first statement are kept.
	small := semantic.NewStore(semantic.Options{ExactBelow: 10}, clock)
	want, _ = search(auto, "u-big", "music export", semantic.StrategyExact)
	got, info = search(small, "u-big", "music export", semantic.StrategyAuto)
	require.Equal(t, semantic.StrategyHNSW, info.Strategy)
	require.Equal(t, 11, info.ScopeSize)
	require.False(t, info.Fallback, "42 vectors in scope: the scan finds its 40 candidates")
	require.Equal(t, 40, info.VectorCandidates)
	require.Positive(t, info.TextCandidates)
	same(want, got)

	// Past ExactBelow with fewer rows than candidates wanted: the HNSW scan comes back
	// short and the exact sort answers.
	tiny := semantic.NewStore(semantic.Options{ExactBelow: 3}, clock)
	want, _ = search(auto, "u-small", "logo caption", semantic.StrategyExact)
	got, info = search(tiny, "u-small", "logo caption", semantic.StrategyAuto)
	require.Equal(t, semantic.StrategyHNSW, info.Strategy)
	require.True(t, info.Fallback)
	require.Equal(t, 4, info.ScopeSize)
	require.Equal(t, 6, info.VectorCandidates)
	same(want, got)

	// Forced HNSW: no count, no fallback.
	got, info = search(auto, "u-big", "music export", semantic.StrategyHNSW)
	require.Equal(t, semantic.StrategyHNSW, info.Strategy)
	require.Equal(t, -1, info.ScopeSize)
	require.Len(t, got, 5)
}

// TestSearchRemembersSmallScopeCounts: a scope counted far below ExactBelow is not counted
// again for a few seconds — and the exact sort still sees every memory written since; a
// scope nearer the threshold is counted every time; a scope past it is remembered too.
func TestSearchRemembersSmallScopeCounts(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	search := func(store *semantic.Store, text string) ([]semantic.Result, semantic.SearchInfo) {
		return searchAs(t, pool, store, "acme", "u1", text, 10, semantic.StrategyAuto)
	}
	for _, x := range []string{"the logo goes bottom right", "captions use Inter 32px", "music ducks under dialogue"} {
		createMemory(t, pool, "acme", "u1", x)
	}

	// ExactBelow 5000: 3 is far below. A minute's memory keeps a slow test machine honest.
	far := semantic.NewStore(semantic.Options{CountTTL: time.Minute}, nil)
	_, info := search(far, "logo")
	require.Equal(t, 3, info.ScopeSize)
	near := semantic.NewStore(semantic.Options{ExactBelow: 5, CountTTL: time.Minute}, nil) // 3 > 5/2: counted each time
	_, info = search(near, "logo")
	require.Equal(t, 3, info.ScopeSize)

	createMemory(t, pool, "acme", "u1", "export at 25 fps with the logo")
	res, info := search(far, "logo")
	require.Equal(t, 3, info.ScopeSize, "remembered for a few seconds")
	require.Equal(t, semantic.StrategyExact, info.Strategy)
	require.Len(t, res, 4, "the exact sort sees the memory written since the count")
	off := semantic.NewStore(semantic.Options{CountTTL: -1}, nil)
	_, info = search(off, "logo")
	require.Equal(t, 4, info.ScopeSize, "CountTTL < 0 counts every time")
	_, info = search(near, "logo")
	require.Equal(t, 4, info.ScopeSize)

	// Another scope (another user) is its own count.
	res, info = searchAs(t, pool, far, "acme", "u2", "logo", 10, semantic.StrategyAuto)
	require.Empty(t, res)
	require.Zero(t, info.ScopeSize)

	// A scope counted past the threshold (4 > ExactBelow 2; the count stops at 3) is not
	// counted again either: it stays on HNSW for a few seconds even after it shrank, and
	// HNSW still finds what is there.
	big := semantic.NewStore(semantic.Options{ExactBelow: 2, CountTTL: time.Minute}, nil)
	_, info = search(big, "logo")
	require.Equal(t, 3, info.ScopeSize)
	require.Equal(t, semantic.StrategyHNSW, info.Strategy)
	all, _ := search(off, "logo")
	require.Len(t, all, 4)
	require.NoError(t, pg.InOrgTx(context.Background(), pool, "acme", func(tx pgx.Tx) error {
		for _, r := range all[:3] {
			if _, err := big.Delete(context.Background(), tx, "acme", r.Memory.ID); err != nil {
				return err
			}
		}
		return nil
	}))
	res, info = search(big, "logo")
	require.Equal(t, 3, info.ScopeSize, "remembered")
	require.Equal(t, semantic.StrategyHNSW, info.Strategy)
	require.Len(t, res, 1)
	require.Equal(t, all[3].Memory.ID, res[0].Memory.ID)
	_, info = search(off, "logo")
	require.Equal(t, 1, info.ScopeSize)
}

// searchAs runs store's search for user of org, with text as the query and its lexical
// embedding as the vector.
func searchAs(t *testing.T, pool *pgxpool.Pool, store *semantic.Store, org, user, text string, topK int,
	strategy semantic.Strategy) ([]semantic.Result, semantic.SearchInfo) {
	t.Helper()
	ctx := context.Background()
	var res []semantic.Result
	var info semantic.SearchInfo
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		var err error
		res, info, err = store.Search(ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: org, UserID: user},
			Text: text, Vector: embed.NewLexical(384).One(text), Space: space384, TopK: topK, Strategy: strategy})
		return err
	}))
	return res, info
}

// A search sets generic plans for its key reads and the exact leg and custom plans for the
// full-text and HNSW legs (pg.GenericPlansSQL), and leaves the transaction on the session's
// plan choice: what the caller runs after it is planned as before. The results are the same
// whichever way the statements were planned.
func TestSearchLeavesThePlanChoiceAsItFoundIt(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	for i := range 12 {
		createMemory(t, pool, "acme", "u1", fmt.Sprintf("logo caption note %d", i))
	}
	ctx := context.Background()
	store := semantic.NewStore(semantic.Options{}, nil)
	var first []semantic.Result
	for _, strategy := range []semantic.Strategy{semantic.StrategyExact, semantic.StrategyHNSW, semantic.StrategyAuto} {
		for round := range 8 { // past the 5 executions after which Postgres may pick a generic plan
			require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
				res, _, err := store.Search(ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: "acme", UserID: "u1"},
					Text: "logo", Vector: embed.NewLexical(384).One("logo"), Space: space384, TopK: 5, Strategy: strategy})
				if err != nil {
					return err
				}
				var mode string
				if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
					return err
				}
				require.Equal(t, "auto", mode, "%s, round %d", strategy, round)
				require.Len(t, res, 5)
				if first == nil {
					first = res
				}
				for i := range res {
					require.Equal(t, first[i].Memory.ID, res[i].Memory.ID, "%s, round %d, rank %d", strategy, round, i+1)
				}
				return nil
			}))
		}
	}
}
