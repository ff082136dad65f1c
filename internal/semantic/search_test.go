package semantic_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestSearchStrategies checks what Search reports and returns on each of its paths — the
// exact sort chosen by the scope count (one statement with the text leg and the rows),
// the HNSW scan for a scope past ExactBelow, the exact fallback when the HNSW scan comes
// back short, an empty scope — against the forced exact search as the reference.
func TestSearchStrategies(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	words := []string{"logo", "caption", "music", "export", "colour", "font", "intro", "outro", "trim", "audio"}
	var texts []string
	for i := range 48 {
		texts = append(texts, fmt.Sprintf("%s %s note %d", words[i%len(words)], words[(i*3+1)%len(words)], i))
	}
	writer := semantic.NewStore(semantic.Options{}, nil)
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		for i, x := range texts {
			user := "u-big"
			if i < 6 {
				user = "u-small"
			}
			if _, _, err := writer.Create(ctx, tx, newMem("acme", user, x)); err != nil {
				return err
			}
		}
		return nil
	}))
	// Another org's memory matches the same query and must never show.
	require.NoError(t, pg.InOrgTx(ctx, pool, "globex", func(tx pgx.Tx) error {
		_, _, err := writer.Create(ctx, tx, newMem("globex", "u-small", "logo caption from another org"))
		return err
	}))

	lex := embed.NewLexical(384)
	search := func(store *semantic.Store, user, text string, strategy semantic.Strategy) ([]semantic.Result, semantic.SearchInfo) {
		var res []semantic.Result
		var info semantic.SearchInfo
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			var err error
			res, info, err = store.Search(ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: "acme", UserID: user},
				Text: text, Vector: lex.One(text), Space: space384, TopK: 5, Strategy: strategy})
			return err
		}))
		return res, info
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

	// A small scope: auto counts it and sorts exactly, in one statement with the text leg.
	auto := semantic.NewStore(semantic.Options{}, nil)
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
	small := semantic.NewStore(semantic.Options{ExactBelow: 10}, nil)
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
	tiny := semantic.NewStore(semantic.Options{ExactBelow: 3}, nil)
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
// scope nearer the threshold is counted every time.
func TestSearchRemembersSmallScopeCounts(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	lex := embed.NewLexical(384)
	write := func(texts ...string) {
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			for _, x := range texts {
				if _, _, err := semantic.NewStore(semantic.Options{}, nil).Create(ctx, tx, newMem("acme", "u1", x)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	search := func(store *semantic.Store, text string) ([]semantic.Result, semantic.SearchInfo) {
		var res []semantic.Result
		var info semantic.SearchInfo
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			var err error
			res, info, err = store.Search(ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: "acme", UserID: "u1"},
				Text: text, Vector: lex.One(text), Space: space384, TopK: 10})
			return err
		}))
		return res, info
	}
	write("the logo goes bottom right", "captions use Inter 32px", "music ducks under dialogue")

	// ExactBelow 5000: 3 is far below. A minute's memory keeps a slow test machine honest.
	far := semantic.NewStore(semantic.Options{CountTTL: time.Minute}, nil)
	_, info := search(far, "logo")
	require.Equal(t, 3, info.ScopeSize)
	near := semantic.NewStore(semantic.Options{ExactBelow: 5, CountTTL: time.Minute}, nil) // 3 > 5/2: counted each time
	_, info = search(near, "logo")
	require.Equal(t, 3, info.ScopeSize)

	write("export at 25 fps with the logo")
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
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		res, info, err := far.Search(ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: "acme", UserID: "u2"},
			Text: "logo", Vector: lex.One("logo"), Space: space384, TopK: 10})
		require.Empty(t, res)
		require.Zero(t, info.ScopeSize)
		return err
	}))
}
