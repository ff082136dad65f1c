package consolidation

import (
	"context"
	"errors"
	"math"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
)

// clusters groups ids connected by pairs (union-find), each cluster sorted, clusters in
// order of their first id: deterministic for a given set of pairs.
func clusters(pairs []semantic.Pair) ([][]uuid.UUID, map[uuid.UUID]float64) {
	parent := map[uuid.UUID]uuid.UUID{}
	var find func(uuid.UUID) uuid.UUID
	find = func(x uuid.UUID) uuid.UUID {
		p, ok := parent[x]
		if !ok {
			parent[x] = x
			return x
		}
		if p == x {
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	minSim := map[uuid.UUID]float64{}
	for _, p := range pairs {
		a, b := find(p.A), find(p.B)
		if a != b {
			if a.String() > b.String() {
				a, b = b, a
			}
			parent[b] = a
		}
	}
	groups := map[uuid.UUID][]uuid.UUID{}
	for x := range parent {
		r := find(x)
		groups[r] = append(groups[r], x)
	}
	for _, p := range pairs {
		r := find(p.A)
		if s, ok := minSim[r]; !ok || p.Similarity < s {
			minSim[r] = p.Similarity
		}
	}
	var out [][]uuid.UUID
	sims := map[uuid.UUID]float64{}
	for r, g := range groups {
		sort.Slice(g, func(i, j int) bool { return g[i].String() < g[j].String() })
		out = append(out, g)
		sims[g[0]] = minSim[r]
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].String() < out[j][0].String() })
	return out, sims
}

// survivorFirst orders a cluster: the memory that survives a merge comes first — pinned,
// then most important, most read, oldest.
func survivorFirst(ms []semantic.Memory) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.Pinned != b.Pinned {
			return a.Pinned
		}
		if a.Importance != b.Importance {
			return a.Importance > b.Importance
		}
		if a.AccessCount != b.AccessCount {
			return a.AccessCount > b.AccessCount
		}
		if !a.ValidFrom.Equal(b.ValidFrom) {
			return a.ValidFrom.Before(b.ValidFrom)
		}
		return a.ID.String() < b.ID.String()
	})
}

func provenanceOf(m semantic.Memory) map[string]any {
	p := map[string]any{"id": m.ID.String(), "root_id": m.RootID.String(), "version": m.Version,
		"valid_from": m.ValidFrom, "trust": m.Trust, "access_count": m.AccessCount}
	if m.Provenance.KeyID != "" {
		p["key_id"] = m.Provenance.KeyID
	}
	if m.Provenance.AgentID != "" {
		p["agent_id"] = m.Provenance.AgentID
	}
	if m.Provenance.JobID != "" {
		p["job_id"] = m.Provenance.JobID
	}
	if m.Provenance.EventSeq != nil {
		p["event_seq"] = *m.Provenance.EventSeq
	}
	return p
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
}

// lastRun reads and moves a task's high-water mark.
func lastRun(ctx context.Context, tx pgx.Tx, org, task string) (time.Time, error) {
	var t time.Time
	err := tx.QueryRow(ctx, `SELECT last_run_at FROM consolidation_state WHERE org_id = $1 AND task = $2 FOR UPDATE`, org, task).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	return t, pg.Interpret(err)
}

func setLastRun(ctx context.Context, tx pgx.Tx, org, task string, t time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO consolidation_state (org_id, task, last_run_at) VALUES ($1, $2, $3)
		ON CONFLICT (org_id, task) DO UPDATE SET last_run_at = excluded.last_run_at`, org, task, t)
	return pg.Interpret(err)
}

// merge collapses near-duplicate current memories of one scope and kind (cosine ≥ the
// policy's merge_threshold). Only memories written or changed since the last pass are
// compared (each against its whole scope), so a pass costs what changed. The survivor gets
// a new version whose metadata.merged_from keeps every absorbed memory's provenance (id,
// key, agent, job, event); the absorbed memories are superseded by it (valid_to,
// superseded_by), never deleted: history and as_of searches still show them, and
// eviction's delete_superseded_after removes them later. Pinned memories are never
// absorbed (they can survive).
func (c *Consolidator) merge(ctx context.Context, tx pgx.Tx, org string, pol policy.Effective, rep *ConsolidationReport) error {
	if pol.MergeThreshold >= 1 {
		return nil
	}
	start := c.now()
	since, err := lastRun(ctx, tx, org, TaskMerge)
	if err != nil {
		return err
	}
	pairs, err := c.Semantic.NearDuplicatePairs(ctx, tx, org, since, pol.MergeThreshold, c.limit()*50)
	if err != nil {
		return err
	}
	groups, sims := clusters(pairs)
	for _, g := range groups {
		ms, err := c.Semantic.GetMany(ctx, tx, org, g)
		if err != nil {
			return err
		}
		cur := ms[:0]
		for _, m := range ms {
			if m.ValidTo == nil {
				cur = append(cur, m)
			}
		}
		if len(cur) < 2 {
			continue
		}
		// A restricted subject's memories are not merged (no new version while restricted,
		// issue 57).
		if held, err := c.anyHeld(ctx, tx, org, cur); err != nil {
			return err
		} else if held {
			continue
		}
		survivorFirst(cur)
		surv := cur[0]
		var absorbed []semantic.Memory
		for _, m := range cur[1:] {
			if !m.Pinned {
				absorbed = append(absorbed, m)
			}
		}
		if len(absorbed) == 0 {
			continue
		}
		meta := map[string]any{}
		for k, v := range surv.Metadata {
			meta[k] = v
		}
		from := anyList(meta["merged_from"])
		imp, pinned := surv.Importance, surv.Pinned
		var reads int64
		dedups := 0
		ids := make([]uuid.UUID, len(absorbed))
		for i, m := range absorbed {
			from = append(from, provenanceOf(m))
			imp = math.Max(imp, m.Importance)
			reads += m.AccessCount
			dedups += m.DedupCount + 1
			ids[i] = m.ID
		}
		meta["merged_from"] = from
		meta["merged_at"] = start
		newV, err := c.Semantic.Supersede(ctx, tx, org, surv.ID, semantic.Patch{Metadata: meta, Importance: &imp,
			Pinned: &pinned, Provenance: semantic.Provenance{KeyID: WorkerKey, AgentID: surv.Provenance.AgentID,
				JobID: surv.Provenance.JobID, EventSeq: surv.Provenance.EventSeq}})
		if err != nil {
			return err
		}
		if err := c.Semantic.AddAccess(ctx, tx, org, newV.ID, reads, dedups); err != nil {
			return err
		}
		closed, err := c.Semantic.SupersedeInto(ctx, tx, org, ids, newV.ID)
		if err != nil {
			return err
		}
		rep.Merge.Clusters++
		rep.Merge.Superseded += len(closed)
		if len(rep.Merge.Items) < 20 {
			rep.Merge.Items = append(rep.Merge.Items, MergeItem{MemoryID: newV.ID, Superseded: closed, MinSimilarity: sims[g[0]]})
		}
		strs := make([]string, len(closed))
		for i, x := range closed {
			strs[i] = x.String()
		}
		if err := audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "worker", Action: "consolidate",
			EntityType: "memory", EntityID: newV.ID.String(), Details: map[string]any{"task": TaskMerge,
				"survivor": surv.ID.String(), "superseded": strs, "min_similarity": sims[g[0]], "threshold": pol.MergeThreshold}}); err != nil {
			return err
		}
	}
	return setLastRun(ctx, tx, org, TaskMerge, start)
}
