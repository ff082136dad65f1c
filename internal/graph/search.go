package graph

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// rrfK is the k of reciprocal rank fusion, as semantic search uses it (docs/semantic.md).
const rrfK = 60

// SearchQuery asks for entities by name or text, and optionally by meaning.
type SearchQuery struct {
	// Scope, when set, sees only entities visible from it (the composition rule of
	// docs/semantic.md); nil searches the whole org.
	Scope *strata.Scope
	// Text is matched against names, aliases and summaries; an entity whose name or alias
	// is Text (normalised) ranks first in the text leg.
	Text string
	// Vector, when set, ranks entities by cosine similarity of their stored embedding, in
	// Space only (vectors of other spaces are never compared).
	Vector []float32
	Space  Space
	Limit  int      // [10, up to MaxLimit]
	Hide   []string // restricted subjects (GDPR Art. 18): their entities are left out
}

// SearchResult is an entity found, with how each leg ranked it.
type SearchResult struct {
	Entity Entity `json:"entity"`
	// Score is the fused reciprocal rank, mapped to (0, 1]: 1 is first in every leg that ran.
	Score      float64  `json:"score"`
	TextRank   int      `json:"text_rank,omitempty"`   // 1-based; 0: not found by text
	Exact      bool     `json:"exact,omitempty"`       // its name or an alias is the text
	VectorRank int      `json:"vector_rank,omitempty"` // 1-based; 0: not found by vector
	Similarity *float64 `json:"similarity,omitempty"`  // cosine similarity, when the vector leg found it
}

// Search finds live entities by text (exact name or alias first, then full text over
// names, aliases and summaries, every word OR-ed) and, when a vector is given, by cosine
// similarity (an exact distance sort over the visible entities of the same space), and
// fuses the two rankings with reciprocal rank fusion. Each leg reads at most
// max(4·limit, 40) candidates.
func (s *Store) Search(ctx context.Context, db pg.DBTX, org string, q SearchQuery) ([]SearchResult, error) {
	if err := checkString("text", q.Text, MaxSummaryLen, q.Vector == nil); err != nil {
		return nil, err
	}
	if q.Vector != nil && (len(q.Vector) != q.Space.Dims || q.Space.Dims == 0) {
		return nil, strata.Invalid("embedding", "has %d dimensions, its space says %d", len(q.Vector), q.Space.Dims)
	}
	limit := checkLimit(q.Limit, 10)
	n := max(4*limit, 40)
	all, u, a, ss := scopeArgs(q.Scope)
	type hit struct {
		e          Entity
		textRank   int
		exact      bool
		vectorRank int
		sim        *float64
	}
	hits := map[uuid.UUID]*hit{}
	get := func(e Entity) *hit {
		h, ok := hits[e.ID]
		if !ok {
			h = &hit{e: e}
			hits[e.ID] = h
		}
		return h
	}
	legs := 0
	if strings.TrimSpace(q.Text) != "" {
		legs++
		words := strings.Join(strings.Fields(q.Text), " ")
		rows, err := db.Query(ctx, `SELECT `+entityCols+`, keys @> ARRAY[$2::text] FROM graph_entities e
			WHERE org_id = $1 AND merged_into IS NULL AND `+visibleSQL("e", "$3", "$4", "$5", "$6")+`
			  AND NOT (user_id = ANY($9::text[]))
			  AND (keys @> ARRAY[$2::text] OR tsv @@ replace(plainto_tsquery('simple', $7)::text, '&', '|')::tsquery)
			ORDER BY keys @> ARRAY[$2::text] DESC,
			         ts_rank_cd(tsv, replace(plainto_tsquery('simple', $7)::text, '&', '|')::tsquery) DESC, id
			LIMIT $8`, org, Normalize(q.Text), all, u, a, ss, words, n, hidden(q.Hide))
		if err != nil {
			return nil, fmt.Errorf("searching entities by text: %w", pg.Interpret(err))
		}
		rank := 0
		if err := eachEntity(rows, func(e Entity, exact bool) {
			rank++
			h := get(e)
			h.textRank, h.exact = rank, exact
		}); err != nil {
			return nil, fmt.Errorf("searching entities by text: %w", err)
		}
	}
	if q.Vector != nil {
		legs++
		rows, err := db.Query(ctx, `SELECT `+entityCols+`, 1 - (embedding <=> $2) FROM graph_entities e
			WHERE org_id = $1 AND merged_into IS NULL AND `+visibleSQL("e", "$3", "$4", "$5", "$6")+`
			  AND dims = $7 AND embedder = $8 AND model = $9 AND NOT (user_id = ANY($11::text[]))
			ORDER BY (embedding <=> $2) + 0, id
			LIMIT $10`, org, pgvector.NewVector(q.Vector), all, u, a, ss, q.Space.Dims, q.Space.Embedder, q.Space.Model, n,
			hidden(q.Hide))
		if err != nil {
			return nil, fmt.Errorf("searching entities by vector: %w", pg.Interpret(err))
		}
		rank := 0
		if err := eachEntity(rows, func(e Entity, sim float64) {
			rank++
			h := get(e)
			h.vectorRank, h.sim = rank, &sim
		}); err != nil {
			return nil, fmt.Errorf("searching entities by vector: %w", err)
		}
	}
	out := make([]SearchResult, 0, len(hits))
	best := float64(legs) / (rrfK + 1)
	for _, h := range hits {
		var rrf float64
		if h.textRank > 0 {
			rrf += 1 / float64(rrfK+h.textRank)
		}
		if h.vectorRank > 0 {
			rrf += 1 / float64(rrfK+h.vectorRank)
		}
		out = append(out, SearchResult{Entity: h.e, Score: rrf / best, TextRank: h.textRank, Exact: h.exact,
			VectorRank: h.vectorRank, Similarity: h.sim})
	}
	slices.SortFunc(out, func(x, y SearchResult) int {
		switch {
		case x.Exact != y.Exact: // an exact name or alias match leads whatever the vectors say
			if x.Exact {
				return -1
			}
			return 1
		case x.Score != y.Score:
			if x.Score > y.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Entity.ID.String(), y.Entity.ID.String())
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// eachEntity scans rows of entityCols followed by one extra column of type T.
func eachEntity[T any](rows pgx.Rows, f func(Entity, T)) error {
	defer rows.Close()
	for rows.Next() {
		var extra T
		e, err := scanEntity(rows, &extra)
		if err != nil {
			return pg.Interpret(err)
		}
		f(e, extra)
	}
	return pg.Interpret(rows.Err())
}
