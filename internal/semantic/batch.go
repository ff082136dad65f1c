package semantic

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// MaxBatch is the most memories one CreateBatch stores.
const MaxBatch = 1000

// BatchResult is what became of one item of a batch, in the batch's order.
type BatchResult struct {
	// Memory is the row written, or the duplicate that answered for the item.
	Memory Memory
	// Dedup is non-nil when the item created no row (as Create's).
	Dedup *Dedup
	// DuplicateOf is the index of the earlier item of the same batch this one duplicated,
	// or -1.
	DuplicateOf int
}

// CreateBatch stores many memories in the caller's transaction with Create's semantics, as
// if they were written one after the other in the batch's order: each item is checked for
// an exact and a near duplicate in its scope, against the store and against the batch's
// earlier items, and a duplicate answers with the existing memory (its dedup count and
// provenance updated) instead of a new row. It costs a fixed number of round trips plus
// one per item for the near-duplicate lookup: the scope locks travel in one pipeline
// (in a fixed order, so concurrent batches cannot deadlock), the exact duplicates in one
// query, and the rows in one pipelined batch of inserts.
func (s *Store) CreateBatch(ctx context.Context, tx pgx.Tx, items []NewMemory) ([]BatchResult, error) {
	if len(items) > MaxBatch {
		return nil, strata.TooLarge("memories", "at most 1000 memories per batch: split it into several batches")
	}
	out := make([]BatchResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	hashes := make([][]byte, len(items))
	for i := range items {
		n := &items[i]
		if err := checkVector(n.Vector, n.Space); err != nil {
			return nil, err
		}
		if n.Trust == "" {
			n.Trust = DefaultTrust
		}
		if n.Metadata == nil {
			n.Metadata = map[string]any{}
		}
		hashes[i] = TextHash(n.Text)
		out[i].DuplicateOf = -1
	}
	org := items[0].Scope.OrgID
	if err := lockScopes(ctx, tx, items); err != nil {
		return nil, err
	}
	stored, err := exactDuplicates(ctx, tx, org, items, hashes)
	if err != nil {
		return nil, err
	}
	nearest, err := s.nearestInScopes(ctx, tx, org, items, stored)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()

	// Decide each item in order: what the store holds first (exact, then near), then the
	// batch's earlier new rows, as sequential Creates would see them.
	dupID := make([]uuid.UUID, len(items))
	firstByText := map[string]int{}
	var fresh []int // items that become rows
	for i := range items {
		n := items[i]
		key := scopeText(n.Scope, hashes[i])
		if id, ok := stored[i]; ok {
			dupID[i], out[i].Dedup = id, &Dedup{Reason: "exact", Similarity: 1}
			continue
		}
		if j, ok := firstByText[key]; ok {
			out[i].DuplicateOf, out[i].Dedup = j, &Dedup{Reason: "exact", Similarity: 1}
			continue
		}
		best, bestSim := -1, -1.0
		near, found := nearest[i]
		if found {
			bestSim = 1 - near.dist
		}
		for _, j := range fresh {
			if sameScopeAndSpace(items[j], n) {
				if sim := cosine(items[j].Vector, n.Vector); sim > bestSim {
					best, bestSim = j, sim
				}
			}
		}
		switch {
		case bestSim < s.o.DedupThreshold:
			firstByText[key] = i
			fresh = append(fresh, i)
		case best >= 0:
			out[i].DuplicateOf, out[i].Dedup = best, &Dedup{Reason: "near", Similarity: bestSim}
		default:
			dupID[i], out[i].Dedup = near.id, &Dedup{Reason: "near", Similarity: bestSim}
		}
	}

	// The new rows in one round trip, then the duplicates' updates in another (an update
	// of a row this batch inserted needs its id).
	ins := &pgx.Batch{}
	for _, i := range fresh {
		id := uuid.Must(uuid.NewV7())
		args, err := insertMemoryArgs(items[i], id, hashes[i], now)
		if err != nil {
			return nil, err
		}
		ins.Queue(insertMemorySQL, args...).QueryRow(func(r pgx.Row) error {
			m, err := scanMemory(r)
			out[i].Memory = m
			return err
		})
	}
	if err := tx.SendBatch(ctx, ins).Close(); err != nil {
		return nil, pg.Interpret(err)
	}
	upd := &pgx.Batch{}
	for i := range items {
		if out[i].Dedup == nil {
			continue
		}
		if j := out[i].DuplicateOf; j >= 0 {
			dupID[i] = out[j].Memory.ID
		}
		upd.Queue(dedupHitSQL, dedupHitArgs(items[i], dupID[i], now)...).QueryRow(func(r pgx.Row) error {
			m, err := scanMemory(r)
			out[i].Memory = m
			return err
		})
	}
	if upd.Len() > 0 {
		if err := tx.SendBatch(ctx, upd).Close(); err != nil {
			return nil, pg.Interpret(err)
		}
	}
	return out, nil
}

// nearestInScopes finds, for each item without an exact duplicate in the store, the
// nearest current memory of its exact scope and space (what Create's near-duplicate check
// asks): for scopes at most ExactBelow rows large, by an exact search of every such item in
// one query; for larger ones, item by item through the HNSW index as Create does.
func (s *Store) nearestInScopes(ctx context.Context, tx pgx.Tx, org string, items []NewMemory, skip map[int]uuid.UUID) (map[int]hit, error) {
	type group struct {
		sc    strata.Scope
		sp    Space
		items []int
		size  int
	}
	var groups []*group
	byKey := map[string]*group{}
	for i, n := range items {
		if _, ok := skip[i]; ok {
			continue
		}
		k := strings.Join([]string{n.Scope.UserID, n.Scope.AgentID, n.Scope.SessionID, n.Space.Embedder, n.Space.Model, strconv.Itoa(n.Space.Dims)}, "\x1f")
		g := byKey[k]
		if g == nil {
			g = &group{sc: n.Scope, sp: n.Space}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, i)
	}
	out := map[int]hit{}
	if len(groups) == 0 {
		return out, nil
	}
	// Every group's size (bounded) in one round trip.
	counts := &pgx.Batch{}
	for _, g := range groups {
		counts.Queue(`SELECT count(*) FROM (SELECT 1 FROM memories WHERE org_id = $1 AND user_id = $2 AND agent_id = $3
			AND session_id = $4 AND valid_to IS NULL AND embedder = $5 AND model = $6 AND dims = $7 LIMIT $8) x`,
			org, g.sc.UserID, g.sc.AgentID, g.sc.SessionID, g.sp.Embedder, g.sp.Model, g.sp.Dims, s.o.ExactBelow+1).
			QueryRow(func(r pgx.Row) error { return r.Scan(&g.size) })
	}
	if err := tx.SendBatch(ctx, counts).Close(); err != nil {
		return nil, pg.Interpret(err)
	}
	// Small scopes: one exact query per space for all their items ("+ 0" keeps the planner
	// off the HNSW index, as nearest's exact strategy does).
	exact := map[Space][]int{}
	for _, g := range groups {
		switch {
		case g.size == 0:
		case g.size <= s.o.ExactBelow:
			exact[g.sp] = append(exact[g.sp], g.items...)
		default:
			for _, i := range g.items {
				f := newFilter(org)
				f.exactScope(items[i].Scope)
				f.current()
				near, err := s.nearest(ctx, tx, f, items[i].Vector, items[i].Space, 1, StrategyHNSW, alongside{})
				if err != nil {
					return nil, err
				}
				if len(near.hits) == 1 {
					out[i] = near.hits[0]
				}
			}
		}
	}
	for sp, idx := range exact {
		users, agents, sessions, vecs := make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx))
		ord := make([]int32, len(idx))
		for k, i := range idx {
			sc := items[i].Scope
			users[k], agents[k], sessions[k] = sc.UserID, sc.AgentID, sc.SessionID
			vecs[k], ord[k] = pgvector.NewVector(items[i].Vector).String(), int32(i)
		}
		expr := vecExpr(sp.Dims)
		// The vectors are cast once, in unnest: a cast inside the lateral query would parse
		// the text again for every row it compares.
		qv := "x.v"
		rows, err := tx.Query(ctx, `SELECT x.i, n.id, n.d FROM unnest($2::int[], $3::text[], $4::text[], $5::text[],
			$6::text[]::vector(`+strconv.Itoa(sp.Dims)+`)[]) AS x(i, u, a, s, v)
			CROSS JOIN LATERAL (SELECT id, `+expr+` <=> `+qv+` AS d FROM memories
				WHERE org_id = $1 AND user_id = x.u AND agent_id = x.a AND session_id = x.s AND valid_to IS NULL
				AND dims = `+strconv.Itoa(sp.Dims)+` AND model = $7 AND embedder = $8
				ORDER BY (`+expr+` <=> `+qv+`) + 0, id LIMIT 1) n`,
			org, ord, users, agents, sessions, vecs, sp.Model, sp.Embedder)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		var i int32
		var h hit
		if _, err := pgx.ForEachRow(rows, []any{&i, &h.id, &h.dist}, func() error {
			out[int(i)] = h
			return nil
		}); err != nil {
			return nil, pg.Interpret(err)
		}
	}
	return out, nil
}

// lockScopes takes Create's scope lock for every scope of the batch, in one round trip and
// in sorted order.
func lockScopes(ctx context.Context, tx pgx.Tx, items []NewMemory) error {
	keys := make([]string, 0, len(items))
	for _, n := range items {
		sc := n.Scope
		keys = append(keys, strings.Join([]string{"strata.semantic", sc.OrgID, sc.UserID, sc.AgentID, sc.SessionID}, "\x1f"))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	b := &pgx.Batch{}
	for _, k := range keys {
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, k)
	}
	return pg.Interpret(tx.SendBatch(ctx, b).Close())
}

// exactDuplicates finds, for each item, a current memory of its scope with the same
// normalised text: item index → memory id.
func exactDuplicates(ctx context.Context, tx pgx.Tx, org string, items []NewMemory, hashes [][]byte) (map[int]uuid.UUID, error) {
	users := make([]string, len(items))
	agents := make([]string, len(items))
	sessions := make([]string, len(items))
	for i, n := range items {
		users[i], agents[i], sessions[i] = n.Scope.UserID, n.Scope.AgentID, n.Scope.SessionID
	}
	rows, err := tx.Query(ctx, `SELECT x.i - 1, m.id FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[])
		WITH ORDINALITY AS x(u, a, s, h, i)
		JOIN memories m ON m.org_id = $1 AND m.user_id = x.u AND m.agent_id = x.a AND m.session_id = x.s
			AND m.text_hash = x.h AND m.valid_to IS NULL`, org, users, agents, sessions, hashes)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	found := map[int]uuid.UUID{}
	var i int
	var id uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&i, &id}, func() error {
		if _, seen := found[i]; !seen {
			found[i] = id
		}
		return nil
	})
	return found, pg.Interpret(err)
}

func scopeText(sc strata.Scope, hash []byte) string {
	return strings.Join([]string{sc.UserID, sc.AgentID, sc.SessionID, string(hash)}, "\x1f")
}

func sameScopeAndSpace(a, b NewMemory) bool {
	return a.Scope == b.Scope && a.Space == b.Space
}

// cosine is the cosine similarity of two vectors of one space.
func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
