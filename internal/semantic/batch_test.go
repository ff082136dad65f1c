package semantic_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
)

// batchItems is a batch with every kind of duplicate: of a stored memory (exact and
// near), of an earlier item (exact, near, case and spacing), across scopes (not a
// duplicate), and fresh rows.
func batchItems(org string) []semantic.NewMemory {
	texts := []struct{ user, text string }{
		{"u1", "the brand palette is teal and warm orange"}, // 0: exact duplicate of a stored memory
		{"u1", "exports go to the shared drive every friday"},
		{"u1", "Exports go to the shared  drive every Friday"}, // 2: exact (normalised) of 1
		{"u2", "exports go to the shared drive every friday"},  // 3: another scope: a new row
		{"u1", "captions use the studio font in white"},
		{"u1", "captions use the studio font in white please"}, // 5: near duplicate of 4
		{"u1", "the client prefers 4k exports"},
		{"u1", "the client prefers 4k exports always"}, // 7: near duplicate of a stored memory
		{"", "the office closes at six"},
		{"u1", "exports go to the shared drive every friday"}, // 9: exact of 1 again
	}
	out := make([]semantic.NewMemory, len(texts))
	for i, x := range texts {
		out[i] = newMem(org, x.user, x.text)
		out[i].Importance = 0.1 * float64(i)
		out[i].Provenance.KeyID = fmt.Sprintf("key_%d", i)
	}
	return out
}

// seedStored writes what the store holds before the batch.
func seedStored(t *testing.T, ctx context.Context, store *semantic.Store, tx pgx.Tx, org string) {
	for _, text := range []string{"the brand palette is teal and warm orange", "the client prefers 4k exports always please"} {
		_, _, err := store.Create(ctx, tx, newMem(org, "u1", text))
		require.NoError(t, err)
	}
}

// TestCreateBatchMatchesSequentialCreates writes the same items with CreateBatch and with
// one Create each (each on its own database) and compares every answer and the rows left:
// the batch is the sequence of writes, in fewer round trips.
func TestCreateBatchMatchesSequentialCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	store := semantic.NewStore(semantic.Options{DedupThreshold: 0.9}, func() time.Time { return now })

	run := func(batch bool) ([]createAnswer, []string) {
		pool, _ := testenv.Pool(t)
		var answers []createAnswer
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			seedStored(t, ctx, store, tx, "acme")
			items := batchItems("acme")
			if batch {
				res, err := store.CreateBatch(ctx, tx, items)
				require.NoError(t, err)
				for _, r := range res {
					answers = append(answers, answerOf(r.Memory, r.Dedup))
				}
				return nil
			}
			for _, n := range items {
				m, d, err := store.Create(ctx, tx, n)
				require.NoError(t, err)
				answers = append(answers, answerOf(m, d))
			}
			return nil
		}))
		return answers, memoryRows(t, pool)
	}
	seqAnswers, seqRows := run(false)
	batchAnswers, batchRows := run(true)
	require.Equal(t, seqAnswers, batchAnswers)
	require.Equal(t, seqRows, batchRows)

	// The cases the batch was built for are what sequential writes give.
	require.Equal(t, "exact", batchAnswers[0].reason)
	require.True(t, batchAnswers[1].created)
	require.Equal(t, "exact", batchAnswers[2].reason)
	require.True(t, batchAnswers[3].created, "another user's scope is not a duplicate")
	require.Equal(t, "near", batchAnswers[5].reason)
	require.Equal(t, "near", batchAnswers[7].reason)
	require.Equal(t, "exact", batchAnswers[9].reason)
	require.Equal(t, 2, batchAnswers[9].count, "the second in-batch duplicate of item 1")
	require.Len(t, batchRows, 2+5) // fresh: items 1, 3, 4, 6, 8
}

// chunkedItems is batchItems followed by more than two chunks (semantic.BatchChunk, the
// first a quarter of it) of other users' memories, with duplicates that cross the chunks'
// boundaries: of an item of an earlier chunk (exact and near) in a scope that held memories
// before the batch, so the near-duplicate query of the later chunk sees the earlier chunk's
// rows, and of stored memories.
func chunkedItems(org string) []semantic.NewMemory {
	items := batchItems(org)
	r := rand.New(rand.NewPCG(7, 42))
	words := strings.Fields("teal orange drive friday caption studio font white client export palette brand office " +
		"shot grade channel render proxy codec timeline sound mix colour review cut frame lens light")
	for len(items) < semantic.BatchChunk/4+2*semantic.BatchChunk+40 {
		w := make([]string, 7)
		for k := range w {
			w[k] = words[r.IntN(len(words))]
		}
		items = append(items, newMem(org, fmt.Sprintf("f%d", len(items)%40), fmt.Sprintf("%s %d", strings.Join(w, " "), len(items))))
		switch len(items) {
		case 100: // item 100, in chunk 1
			items = append(items, newMem(org, "u1", "captions use the studio font in WHITE")) // exact of item 4 (chunk 0)
		case 200:
			items = append(items, newMem(org, "u1", "the client prefers 4k exports always please")) // exact of a stored memory
		case 330: // items 330-332, in chunk 2
			items = append(items, newMem(org, "u1", "captions use the studio font in white, always"))   // near of item 4
			items = append(items, newMem(org, "u1", "the brand palette is teal and warm orange tones")) // near of a stored memory
			items = append(items, newMem(org, "u2", "exports go to the shared drive every friday!"))    // near of item 3
		}
	}
	return items
}

// TestIngestBatchMatchesSequentialCreates is TestCreateBatchMatchesSequentialCreates for a
// batch of several chunks written by IngestBatch (the vectors computed chunk by chunk while
// the previous chunk's rows are inserted) and by CreateBatch, with the near-duplicate
// lookups in the store made three ways: in memory, over the small scopes read whole before
// the first chunk (the default); by an exact query per chunk (BatchHeld -1: no scope read
// whole); through the HNSW index (ExactBelow 1). Every answer and every row left is what
// one Create after the other gives. The items that duplicate a stored memory's text are not
// embedded.
func TestIngestBatchMatchesSequentialCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	lex := embed.NewLexical(384)
	for _, o := range []struct{ exactBelow, held int }{{0, 0}, {0, -1}, {1, 0}} {
		store := semantic.NewStore(semantic.Options{DedupThreshold: 0.9, ExactBelow: o.exactBelow, BatchHeld: o.held}, func() time.Time { return now })
		var embedded, calls, largest int // of the ingest run
		run := func(mode string) ([]createAnswer, []string) {
			pool, _ := testenv.Pool(t)
			var answers []createAnswer
			require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
				seedStored(t, ctx, store, tx, "acme")
				items := chunkedItems("acme")
				var res []semantic.BatchResult
				var err error
				switch mode {
				case "ingest":
					for i := range items {
						items[i].Vector = nil
					}
					res, err = store.IngestBatch(ctx, tx, items, func(ctx context.Context, texts []string) ([][]float32, error) {
						embedded, calls, largest = embedded+len(texts), calls+1, max(largest, len(texts))
						return lex.Embed(ctx, texts)
					})
				case "batch":
					res, err = store.CreateBatch(ctx, tx, items)
				default:
					for _, n := range items {
						m, d, err := store.Create(ctx, tx, n)
						require.NoError(t, err)
						res = append(res, semantic.BatchResult{Memory: m, Dedup: d})
					}
				}
				require.NoError(t, err)
				if mode != "sequential" {
					// An earlier item of the batch answers by its index, even when the
					// near-duplicate query found its row (item 330's scope held memories).
					require.Equal(t, []int{4, -1, 4, -1, 3}, []int{res[100].DuplicateOf, res[200].DuplicateOf,
						res[330].DuplicateOf, res[331].DuplicateOf, res[332].DuplicateOf}, mode)
				}
				for _, r := range res {
					answers = append(answers, answerOf(r.Memory, r.Dedup))
				}
				return nil
			}))
			return answers, memoryRows(t, pool)
		}
		seqAnswers, seqRows := run("sequential")
		for _, mode := range []string{"batch", "ingest"} {
			answers, rows := run(mode)
			require.Equal(t, seqAnswers, answers, "%s, %+v", mode, o)
			require.Equal(t, seqRows, rows, "%s, %+v", mode, o)
		}
		items := chunkedItems("acme")
		require.Equal(t, len(items)-2, embedded, "items 0 and 200, duplicates of stored texts, are not embedded")
		require.Equal(t, semantic.BatchChunk, largest)
		require.Equal(t, 4, calls, "64 + 256 + 256 + the rest")
		for _, c := range []struct {
			i      int
			reason string
			dupOf  string
		}{
			{100, "exact", items[4].Text}, {200, "exact", "the client prefers 4k exports always please"},
			{330, "near", items[4].Text}, {331, "near", "the brand palette is teal and warm orange"}, {332, "near", items[3].Text},
		} {
			require.Equal(t, c.reason, seqAnswers[c.i].reason, "item %d: %s", c.i, items[c.i].Text)
			require.Equal(t, c.dupOf, seqAnswers[c.i].dupOf, "item %d", c.i)
		}
	}
}

// TestCreateBatchConcurrentOverlappingScopes runs batches that share scopes at once: the
// scope locks are taken in one order, so none deadlocks, and no text is stored twice.
func TestCreateBatchConcurrentOverlappingScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	store := semantic.NewStore(semantic.Options{}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var items []semantic.NewMemory
			for i := range 40 {
				// Writers walk the users in opposite directions.
				u := i % 5
				if w%2 == 1 {
					u = 4 - u
				}
				items = append(items, newMem("acme", fmt.Sprintf("u%d", u), fmt.Sprintf("shared fact number %d about user %d", i/5, u)))
			}
			errs <- pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
				_, err := store.CreateBatch(ctx, tx, items)
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var rows, distinct int
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*), count(DISTINCT (user_id, text)) FROM memories`).Scan(&rows, &distinct)
	}))
	require.Equal(t, 40, rows)
	require.Equal(t, rows, distinct)
}

func TestCreateBatchRefusesOversizedAndWrongVectors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	store := semantic.NewStore(semantic.Options{}, nil)
	err := pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := store.CreateBatch(ctx, tx, make([]semantic.NewMemory, semantic.MaxBatch+1))
		return err
	})
	require.ErrorContains(t, err, "at most 1000")
	bad := newMem("acme", "u1", "x")
	bad.Vector = bad.Vector[:10]
	err = pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		_, err := store.CreateBatch(ctx, tx, []semantic.NewMemory{newMem("acme", "u1", "fine"), bad})
		return err
	})
	require.Error(t, err)
	var n int
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM memories`).Scan(&n)
	}))
	require.Zero(t, n, "a refused batch writes nothing")
}

// createAnswer is what a create answered: a new memory, or the duplicate it met and why.
type createAnswer struct {
	reason  string
	dupOf   string // the text of the memory that answered
	count   int
	created bool
}

func answerOf(m semantic.Memory, d *semantic.Dedup) createAnswer {
	a := createAnswer{dupOf: m.Text, count: m.DedupCount, created: d == nil}
	if d != nil {
		a.reason = d.Reason
	}
	return a
}

// memoryRows is org acme's memories, one line each, in a stable order.
func memoryRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var rows []string
	require.NoError(t, pg.InOrgTx(context.Background(), pool, "acme", func(tx pgx.Tx) error {
		r, err := tx.Query(context.Background(), `SELECT user_id || '|' || text || '|' || dedup_count || '|' || importance || '|' || created_by_key
			FROM memories ORDER BY user_id, text`)
		if err != nil {
			return err
		}
		rows, err = pgx.CollectRows(r, pgx.RowTo[string])
		return err
	}))
	return rows
}
