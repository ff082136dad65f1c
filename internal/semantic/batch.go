package semantic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// MaxBatch is the most memories one CreateBatch stores.
const MaxBatch = 1000

// BatchChunk is how many items a batch embeds and inserts at a time (IngestBatch): the
// embedder's call and the insert statement each take at most this many; the first chunk is
// a quarter of it, so that little of the embedding waits before the first insert starts.
const BatchChunk = 256

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

// EmbedFunc computes one vector per text, in the texts' order (an embedder's batch call).
type EmbedFunc func(ctx context.Context, texts []string) ([][]float32, error)

// CreateBatch stores many memories in the caller's transaction with Create's semantics, as
// if they were written one after the other in the batch's order: each item is checked for
// an exact and a near duplicate in its scope, against the store and against the batch's
// earlier items, and a duplicate answers with the existing memory (its dedup count and
// provenance updated) instead of a new row. Every item carries its vector; IngestBatch
// computes them as it goes. See IngestBatch for the statements it costs.
func (s *Store) CreateBatch(ctx context.Context, tx pgx.Tx, items []NewMemory) ([]BatchResult, error) {
	return s.createBatch(ctx, tx, items, nil)
}

// IngestBatch is CreateBatch for items whose vectors are not computed yet: embed computes
// them, chunk by chunk (BatchChunk), in a goroutine of its own, so that the next chunk is
// embedded while the previous chunk's rows are inserted (the HNSW insertion is most of a
// batch's time). An item whose exact text its scope already holds is not embedded.
//
// Statements, whatever the batch's size: one round trip for the scope locks (one statement,
// in sorted order, so concurrent batches cannot deadlock), the exact duplicates, and the
// sizes of the scopes with — for those small enough (Options.ExactBelow), up to
// Options.BatchHeld vector components in all — their current memories' ids and vectors (one
// statement each); then per chunk one INSERT of its new rows (unnest of arrays), sent as
// soon as the chunk is decided; the duplicates' updates, if any, travel with the last
// INSERT. The near duplicates in the store of an item of a scope read whole are found in
// memory, by the goroutine that embeds its chunk (each stored memory is read once per batch,
// not once per item, and the inserts never wait on a query). A scope past BatchHeld costs
// one exact nearest-neighbour query per chunk, between the INSERTs; an item of a scope too
// large for an exact search (ExactBelow) a round trip of its own, through the HNSW index, as
// Create's does.
func (s *Store) IngestBatch(ctx context.Context, tx pgx.Tx, items []NewMemory, embed EmbedFunc) ([]BatchResult, error) {
	if embed == nil {
		return nil, fmt.Errorf("semantic: IngestBatch needs an embedder")
	}
	return s.createBatch(ctx, tx, items, embed)
}

// batch is one CreateBatch/IngestBatch in progress.
type batch struct {
	s      *Store
	tx     pgx.Tx
	org    string
	items  []NewMemory
	hashes [][]byte
	out    []BatchResult
	now    time.Time
	// stored: item → the current memory of its scope with the same text, before the batch.
	stored map[int]uuid.UUID
	// group: item → its scope-and-space group (groupKey), an index into size, held and
	// freshIn.
	group []int
	// size: group → its current memories before the batch (bounded at ExactBelow+1).
	size []int
	// held: group → its current memories before the batch, with their vectors, when the
	// group was small enough to be read whole (prepare): its items' near duplicates in the
	// store are then found in memory, not by a query per chunk.
	held []*heldGroup
	// ours: the rows this batch inserted → their item (a nearest-neighbour query may find
	// them; the batch's own items are compared in memory instead).
	ours map[uuid.UUID]int
	// id: the new row's id of an item that became one; dupID: the stored memory a
	// duplicate answers with.
	id, dupID   []uuid.UUID
	firstByText map[string]int
	freshIn     [][]int // group → its items that become rows, in order
}

// heldGroup is a group's current memories before the batch: ids and vectors, with the
// vectors' norms.
type heldGroup struct {
	ids   []uuid.UUID
	vecs  [][]float32
	norms []float64
}

// chunkNear is what the embedding goroutine hands over for a chunk: the nearest held
// memory of each of its items that has one, or the error that ends the batch.
type chunkNear struct {
	near map[int]hit
	err  error
}

func (s *Store) createBatch(ctx context.Context, tx pgx.Tx, items []NewMemory, embed EmbedFunc) ([]BatchResult, error) {
	if len(items) > MaxBatch {
		return nil, strata.TooLarge("memories", "at most 1000 memories per batch: split it into several batches")
	}
	out := make([]BatchResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	bt := &batch{s: s, tx: tx, org: items[0].Scope.OrgID, items: items, hashes: make([][]byte, len(items)), out: out,
		now: s.now().UTC(), ours: map[uuid.UUID]int{}, id: make([]uuid.UUID, len(items)), dupID: make([]uuid.UUID, len(items)), firstByText: map[string]int{}}
	for i := range items {
		n := &items[i]
		if embed == nil {
			if err := checkVector(n.Vector, n.Space); err != nil {
				return nil, err
			}
		}
		if n.Trust == "" {
			n.Trust = DefaultTrust
		}
		if n.Metadata == nil {
			n.Metadata = map[string]any{}
		}
		bt.hashes[i] = TextHash(n.Text)
		out[i].DuplicateOf = -1
	}
	if err := bt.prepare(ctx); err != nil {
		return nil, err
	}
	// The items that need a vector (the others are exact duplicates of stored memories),
	// in chunks.
	var need []int
	for i := range items {
		if _, ok := bt.stored[i]; ok {
			bt.dupID[i], out[i].Dedup = bt.stored[i], &Dedup{Reason: "exact", Similarity: 1}
			continue
		}
		need = append(need, i)
	}
	var chunks [][]int
	for lo, size := 0, BatchChunk/4; lo < len(need); lo, size = lo+size, BatchChunk {
		chunks = append(chunks, need[lo:min(lo+size, len(need))])
	}
	// A goroutine embeds each chunk (when the batch has an embedder) and finds its items'
	// nearest held memories, while this one inserts the previous chunk's rows.
	ready := make(chan chunkNear, len(chunks))
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		for _, c := range chunks {
			var r chunkNear
			if embed != nil {
				r.err = bt.embed(gctx, embed, c)
			}
			if r.err == nil {
				r.near = bt.nearestHeld(c)
			}
			ready <- r
			if r.err != nil {
				return
			}
		}
	}()
	var last []int // the last chunk's new rows: their INSERT travels with the duplicates' updates
	for k, c := range chunks {
		r := <-ready
		if r.err != nil {
			return nil, r.err
		}
		if err := bt.nearest(ctx, c, r.near); err != nil {
			return nil, err
		}
		rows := bt.decide(c, r.near)
		if k == len(chunks)-1 {
			last = rows
			break
		}
		if len(rows) > 0 {
			b := &pgx.Batch{}
			if err := bt.queueInsert(b, rows); err != nil {
				return nil, err
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, pg.Interpret(err)
			}
		}
	}
	// The last rows, then the duplicates' updates (an update of a row this batch inserted
	// needs its id), in one round trip.
	b := &pgx.Batch{}
	if len(last) > 0 {
		if err := bt.queueInsert(b, last); err != nil {
			return nil, err
		}
	}
	for i := range items {
		if out[i].Dedup == nil {
			continue
		}
		if j := out[i].DuplicateOf; j >= 0 {
			bt.dupID[i] = bt.id[j]
		}
		b.Queue(dedupHitSQL, dedupHitArgs(items[i], bt.dupID[i], bt.now)...).QueryRow(func(r pgx.Row) error {
			m, err := scanMemory(r)
			out[i].Memory = m
			return err
		})
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, pg.Interpret(err)
		}
	}
	return out, nil
}

// Statements of a batch (IngestBatch's comment lists them).
const (
	// lockScopesSQL takes Create's scope lock for each key, in the array's (sorted) order.
	lockScopesSQL = `SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) AS k`
	// exactDuplicatesSQL: item (0-based) → a current memory of its scope with its text.
	exactDuplicatesSQL = `SELECT x.i - 1, m.id FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[])
		WITH ORDINALITY AS x(u, a, s, h, i)
		JOIN memories m ON m.org_id = $1 AND m.user_id = x.u AND m.agent_id = x.a AND m.session_id = x.s
			AND m.text_hash = x.h AND m.valid_to IS NULL`
	// scopeRowsSQL: group (0-based) → its current memories of its space, counted up to $2
	// (n), and — for the groups of at most ExactBelow ($2 - 1) memories, in the groups'
	// order while their vectors' components add up to at most $9 (Options.BatchHeld) — each of
	// those memories' id and vector (NULLs for a group not read, one row with n 0 for an
	// empty one). g is materialised (its counts run once each) and the lateral query is
	// kept from being flattened (OFFSET 0), so each group's memories are an index scan of
	// its scope, not a filter over the org's rows.
	scopeRowsSQL = `WITH g AS MATERIALIZED (SELECT g.i, g.u, g.a, g.s, g.e, g.m, g.d, (SELECT count(*) FROM (SELECT 1 FROM memories
			WHERE org_id = $1 AND user_id = g.u AND agent_id = g.a AND session_id = g.s AND valid_to IS NULL
			AND embedder = g.e AND model = g.m AND dims = g.d LIMIT $2) x) AS n
		FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[]) WITH ORDINALITY AS g(u, a, s, e, m, d, i)),
	c AS (SELECT g.*, sum(CASE WHEN n < $2 THEN n * d ELSE 0 END) OVER (ORDER BY i) AS cum FROM g)
	SELECT c.i - 1, c.n, r.id, r.embedding FROM c LEFT JOIN LATERAL (SELECT id, embedding FROM memories
		WHERE c.n < $2 AND c.cum <= $9 AND org_id = $1 AND user_id = c.u AND agent_id = c.a AND session_id = c.s
		AND valid_to IS NULL AND embedder = c.e AND model = c.m AND dims = c.d OFFSET 0) r ON true`
	// insertBatchSQL inserts version 1 of many new memories (insertMemorySQL's columns).
	insertBatchSQL = `INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id, session_id, kind, text,
		text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id, source_job_id, source_event_seq,
		embedding, embedder, model, dims, valid_from, updated_at)
		SELECT $1, x.id, x.id, 1, x.u, x.a, x.s, x.k, x.t, x.h, x.m::jsonb, x.imp, x.p, x.tr, x.ck, x.sa, x.sj, x.se,
			x.e, x.emb, x.mdl, x.d, $2, $2
		FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bytea[], $10::text[],
			$11::float8[], $12::bool[], $13::text[], $14::text[], $15::text[], $16::text[], $17::int8[], $18::vector[],
			$19::text[], $20::text[], $21::int[])
			AS x(id, u, a, s, k, t, h, m, imp, p, tr, ck, sa, sj, se, e, emb, mdl, d)
		RETURNING ` + memCols
)

// groupKey is an item's scope and space: where its near duplicates are looked for.
func groupKey(n NewMemory) string {
	return strings.Join([]string{n.Scope.UserID, n.Scope.AgentID, n.Scope.SessionID, n.Space.Embedder, n.Space.Model,
		strconv.Itoa(n.Space.Dims)}, "\x1f")
}

// prepare takes the scope locks, then finds the exact duplicates in the store, the size
// of every group the batch writes to and the memories of the small ones: one round trip,
// three statements.
func (bt *batch) prepare(ctx context.Context) error {
	keys := make([]string, 0, len(bt.items))
	users, agents, sessions := make([]string, len(bt.items)), make([]string, len(bt.items)), make([]string, len(bt.items))
	var groups []NewMemory
	index := map[string]int{}
	bt.group = make([]int, len(bt.items))
	for i, n := range bt.items {
		sc := n.Scope
		keys = append(keys, scopeLockKey(sc))
		users[i], agents[i], sessions[i] = sc.UserID, sc.AgentID, sc.SessionID
		k := groupKey(n)
		g, seen := index[k]
		if !seen {
			g = len(groups)
			index[k] = g
			groups = append(groups, n)
		}
		bt.group[i] = g
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	gu, ga, gs, ge, gm, gd := make([]string, len(groups)), make([]string, len(groups)), make([]string, len(groups)),
		make([]string, len(groups)), make([]string, len(groups)), make([]int32, len(groups))
	for k, n := range groups {
		gu[k], ga[k], gs[k] = n.Scope.UserID, n.Scope.AgentID, n.Scope.SessionID
		ge[k], gm[k], gd[k] = n.Space.Embedder, n.Space.Model, int32(n.Space.Dims)
	}
	bt.stored = map[int]uuid.UUID{}
	bt.size, bt.held, bt.freshIn = make([]int, len(groups)), make([]*heldGroup, len(groups)), make([][]int, len(groups))
	b := &pgx.Batch{}
	b.Queue(lockScopesSQL, keys)
	b.Queue(exactDuplicatesSQL, bt.org, users, agents, sessions, bt.hashes).Query(func(rows pgx.Rows) error {
		var i int
		var id uuid.UUID
		_, err := pgx.ForEachRow(rows, []any{&i, &id}, func() error {
			if _, seen := bt.stored[i]; !seen {
				bt.stored[i] = id
			}
			return nil
		})
		return err
	})
	b.Queue(scopeRowsSQL, bt.org, bt.s.o.ExactBelow+1, gu, ga, gs, ge, gm, gd, bt.s.o.BatchHeld).Query(func(rows pgx.Rows) error {
		var k, n int
		var id *uuid.UUID
		var v *pgvector.Vector
		_, err := pgx.ForEachRow(rows, []any{&k, &n, &id, &v}, func() error {
			bt.size[k] = n
			if id == nil || v == nil {
				return nil
			}
			defer func() { id, v = nil, nil }() // the next row scans into new values
			h := bt.held[k]
			if h == nil {
				h = &heldGroup{}
				bt.held[k] = h
			}
			vec := v.Slice()
			h.ids, h.vecs, h.norms = append(h.ids, *id), append(h.vecs, vec), append(h.norms, norm(vec))
			return nil
		})
		return err
	})
	return pg.Interpret(bt.tx.SendBatch(ctx, b).Close())
}

// embed computes the vectors of the items c.
func (bt *batch) embed(ctx context.Context, embed EmbedFunc, c []int) error {
	texts := make([]string, len(c))
	for k, i := range c {
		texts[k] = bt.items[i].Text
	}
	vs, err := embed(ctx, texts)
	if err != nil {
		return err
	}
	if len(vs) != len(c) {
		return fmt.Errorf("semantic: the embedder returned %d vectors for %d texts", len(vs), len(c))
	}
	for k, i := range c {
		if err := checkVector(vs[k], bt.items[i].Space); err != nil {
			return err
		}
		bt.items[i].Vector = vs[k]
	}
	return nil
}

// nearestHeld finds, for each item of c whose group was read whole (prepare), the nearest
// of the group's memories (the most similar; of equally similar ones the least id, as
// the exact query's ORDER BY distance, id gives).
func (bt *batch) nearestHeld(c []int) map[int]hit {
	out := map[int]hit{}
	for _, i := range c {
		h := bt.held[bt.group[i]]
		if h == nil {
			continue
		}
		v := bt.items[i].Vector
		nv := norm(v)
		best, bestSim := -1, 0.0
		for k, w := range h.vecs {
			sim := 0.0
			if nv != 0 && h.norms[k] != 0 {
				sim = dot(v, w) / (nv * h.norms[k])
			}
			if best < 0 || sim > bestSim || (sim == bestSim && bytes.Compare(h.ids[k][:], h.ids[best][:]) < 0) {
				best, bestSim = k, sim
			}
		}
		out[i] = hit{id: h.ids[best], dist: 1 - bestSim}
	}
	return out
}

// nearest adds to out, for each item of c whose scope held memories before the batch but
// was not read whole (prepare), the nearest current memory of its exact scope and space
// that the batch did not write (what Create's near-duplicate check asks; the batch's own
// rows are compared in decide): for scopes of at most ExactBelow rows by an exact search of
// all such items in one query per space, for larger ones item by item through the HNSW
// index, as Create does.
func (bt *batch) nearest(ctx context.Context, c []int, out map[int]hit) error {
	exact := map[Space][]int{}
	for _, i := range c {
		n := bt.items[i]
		g := bt.group[i]
		switch size := bt.size[g]; {
		case size == 0 || bt.held[g] != nil:
		case size <= bt.s.o.ExactBelow:
			exact[n.Space] = append(exact[n.Space], i)
		default:
			f := newFilter(bt.org)
			f.exactScope(n.Scope)
			f.current()
			near, err := bt.s.nearest(ctx, bt.tx, f, n.Vector, n.Space, 1, StrategyHNSW, alongside{})
			if err != nil {
				return err
			}
			if len(near.hits) == 1 {
				out[i] = near.hits[0]
			}
		}
	}
	if len(exact) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for sp, idx := range exact {
		users, agents, sessions := make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx))
		vecs, ord := make([]pgvector.Vector, len(idx)), make([]int32, len(idx))
		for k, i := range idx {
			sc := bt.items[i].Scope
			users[k], agents[k], sessions[k] = sc.UserID, sc.AgentID, sc.SessionID
			vecs[k], ord[k] = pgvector.NewVector(bt.items[i].Vector), int32(i)
		}
		// "+ 0" keeps the planner off the HNSW index (as nearest's exact strategy does); the
		// vectors arrive binary, once each (a text cast in the lateral query would parse them
		// again for every row it compares).
		expr, dims := vecExpr(sp.Dims), strconv.Itoa(sp.Dims)
		b.Queue(`SELECT x.i, n.id, n.d FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::vector[])
			AS x(i, u, a, s, v)
			CROSS JOIN LATERAL (SELECT id, `+expr+` <=> x.v AS d FROM memories
				WHERE org_id = $1 AND user_id = x.u AND agent_id = x.a AND session_id = x.s AND valid_to IS NULL
				AND dims = `+dims+` AND model = $7 AND embedder = $8
				ORDER BY (`+expr+` <=> x.v) + 0, id LIMIT 1) n`,
			bt.org, ord, users, agents, sessions, vecs, sp.Model, sp.Embedder).Query(func(rows pgx.Rows) error {
			var i int32
			var h hit
			_, err := pgx.ForEachRow(rows, []any{&i, &h.id, &h.dist}, func() error {
				out[int(i)] = h
				return nil
			})
			return err
		})
	}
	return pg.Interpret(bt.tx.SendBatch(ctx, b).Close())
}

// decide answers each item of c in order, as sequential Creates would: what the store held
// first (an exact duplicate was found by prepare; then the nearest of the store's rows),
// then the batch's earlier new rows of its group. It returns the items that become rows.
func (bt *batch) decide(c []int, nearest map[int]hit) []int {
	var rows []int
	for _, i := range c {
		n := bt.items[i]
		key := scopeText(n.Scope, bt.hashes[i])
		if j, ok := bt.firstByText[key]; ok {
			bt.out[i].DuplicateOf, bt.out[i].Dedup = j, &Dedup{Reason: "exact", Similarity: 1}
			continue
		}
		best, bestSim := -1, -1.0
		near, found := nearest[i]
		if _, ours := bt.ours[near.id]; found && !ours {
			bestSim = 1 - near.dist
		}
		g := bt.group[i]
		for _, j := range bt.freshIn[g] {
			if sim := cosine(bt.items[j].Vector, n.Vector); sim > bestSim {
				best, bestSim = j, sim
			}
		}
		switch {
		case bestSim < bt.s.o.DedupThreshold:
			bt.firstByText[key] = i
			bt.freshIn[g] = append(bt.freshIn[g], i)
			rows = append(rows, i)
		case best >= 0:
			bt.out[i].DuplicateOf, bt.out[i].Dedup = best, &Dedup{Reason: "near", Similarity: bestSim}
		default:
			bt.dupID[i], bt.out[i].Dedup = near.id, &Dedup{Reason: "near", Similarity: bestSim}
		}
	}
	return rows
}

// queueInsert queues the INSERT of the items rows (one statement); their rows are read
// into the batch's results.
func (bt *batch) queueInsert(b *pgx.Batch, rows []int) error {
	n := len(rows)
	ids := make([]uuid.UUID, n)
	users, agents, sessions, kinds, texts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes, metas := make([][]byte, n), make([]string, n)
	imps, pinned := make([]float64, n), make([]bool, n)
	trusts, keys, agentIDs, jobs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seqs, vecs := make([]*int64, n), make([]pgvector.Vector, n)
	embedders, models, dims := make([]string, n), make([]string, n), make([]int32, n)
	for k, i := range rows {
		it := bt.items[i]
		meta, err := json.Marshal(it.Metadata)
		if err != nil {
			return err
		}
		id := uuid.Must(uuid.NewV7())
		bt.id[i], bt.ours[id] = id, i
		sc, p := it.Scope, it.Provenance
		ids[k], users[k], agents[k], sessions[k], kinds[k], texts[k] = id, sc.UserID, sc.AgentID, sc.SessionID, it.Kind, it.Text
		hashes[k], metas[k], imps[k], pinned[k], trusts[k] = bt.hashes[i], string(meta), it.Importance, it.Pinned, it.Trust
		keys[k], agentIDs[k], jobs[k], seqs[k] = p.KeyID, p.AgentID, p.JobID, p.EventSeq
		vecs[k], embedders[k], models[k], dims[k] = pgvector.NewVector(it.Vector), it.Space.Embedder, it.Space.Model, int32(it.Space.Dims)
	}
	b.Queue(insertBatchSQL, bt.org, bt.now, ids, users, agents, sessions, kinds, texts, hashes, metas, imps, pinned, trusts,
		keys, agentIDs, jobs, seqs, vecs, embedders, models, dims).Query(func(rs pgx.Rows) error {
		got := 0
		for rs.Next() {
			m, err := scanMemory(rs)
			if err != nil {
				return err
			}
			i, ok := bt.ours[m.ID]
			if !ok {
				return fmt.Errorf("semantic: the batch's INSERT returned a row it did not write")
			}
			bt.out[i].Memory = m
			got++
		}
		if err := rs.Err(); err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("semantic: the batch's INSERT returned %d rows of %d", got, n)
		}
		return nil
	})
	return nil
}

func scopeText(sc strata.Scope, hash []byte) string {
	return strings.Join([]string{sc.UserID, sc.AgentID, sc.SessionID, string(hash)}, "\x1f")
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

func dot(a, b []float32) float64 {
	var d float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
	}
	return d
}

func norm(v []float32) float64 { return math.Sqrt(dot(v, v)) }
