package consolidation

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// Heat is the promotion score of a cluster of session facts (after MemoryOS's heat of a
// mid-term memory segment: visits, interaction, recency):
//
//	heat = w_s · sessions + w_r · ln(1 + reads) + w_t · 0.5^(since last read / half-life)
//
// sessions counts the distinct sessions that wrote the fact or were served it; reads
// counts retrievals (every time search or similar-jobs served one of the cluster's
// memories). With the defaults (1, 0.5, 1, half-life 7 days, threshold 3, at least 2
// sessions) a fact seen in 2 sessions needs a few reads or a recent one (2 + 0.5·ln 4 +
// 0.5 = 3.19 for 3 reads, the last a week ago), a fact seen in 3 sessions and read once
// today passes (3 + 0.35 + 1), and one that was never read again stays a session fact
// (2 + 0 + ~0).
func Heat(p policy.Promotion, sessions, reads int, sinceLastRead time.Duration) (score, recency float64) {
	recency = math.Pow(0.5, sinceLastRead.Hours()/p.RecencyHalfLife.Hours())
	score = p.WeightSessions*float64(sessions) + p.WeightReads*math.Log1p(float64(reads)) + p.WeightRecency*recency
	return score, recency
}

// promote turns clusters of session-level facts of one user — the same fact (cosine ≥
// the policy's similarity) in several sessions, or read from several — into one
// user-level memory when their heat reaches the threshold. The user-level memory keeps the
// representative's text, kind, trust and vector, the highest importance, and
// metadata.promoted_from (every session memory's provenance) and metadata.promotion (the
// score and its parts); the session memories are superseded by it.
func (c *Consolidator) promote(ctx context.Context, tx pgx.Tx, org string, pol policy.Effective, rep *ConsolidationReport) error {
	pr := pol.Promotion
	if !pr.Enabled || len(pr.Kinds) == 0 {
		return nil
	}
	now := c.now()
	limit := c.limit() * 50
	facts, err := c.Semantic.SessionFacts(ctx, tx, org, pr.Kinds, limit)
	if err != nil {
		return err
	}
	if len(facts) == 0 {
		return nil
	}
	pairs, err := c.Semantic.SessionFactPairs(ctx, tx, org, pr.Kinds, pr.Similarity, limit)
	if err != nil {
		return err
	}
	byID := map[uuid.UUID]semantic.Memory{}
	for _, m := range facts {
		byID[m.ID] = m
		pairs = append(pairs, semantic.Pair{A: m.ID, B: m.ID, Similarity: 1}) // singletons are clusters too
	}
	groups, _ := clusters(pairs)
	var items []PromotionItem
	for _, g := range groups {
		var ms []semantic.Memory
		for _, id := range g {
			if m, ok := byID[id]; ok {
				ms = append(ms, m)
			}
		}
		if len(ms) == 0 {
			continue
		}
		// A restricted subject's facts are not promoted (no new memory while restricted,
		// issue 57); promotion looks at every session fact each run, so it happens once the
		// restriction is lifted.
		if held, err := c.anyHeld(ctx, tx, org, ms); err != nil {
			return err
		} else if held {
			continue
		}
		ids := make([]uuid.UUID, len(ms))
		sessions := map[string]bool{}
		for i, m := range ms {
			ids[i] = m.ID
			sessions[m.SessionID] = true
		}
		st, err := c.Semantic.RetrievalStats(ctx, tx, org, ids)
		if err != nil {
			return err
		}
		for _, s := range st.Sessions {
			sessions[s] = true
		}
		if len(sessions) < 2 {
			continue // seen in one session only: not a candidate
		}
		last := ms[0].ValidFrom
		for _, m := range ms {
			if m.ValidFrom.After(last) {
				last = m.ValidFrom
			}
		}
		if st.LastRead != nil && st.LastRead.After(last) {
			last = *st.LastRead
		}
		score, recency := Heat(pr, len(sessions), st.Reads, now.Sub(last))
		it := PromotionItem{From: ids, Sessions: len(sessions), Reads: st.Reads, Recency: recency, Score: score, Threshold: pr.Threshold}
		switch {
		case len(sessions) < pr.MinSessions:
			it.Reason = "seen in fewer sessions than min_sessions"
		case score < pr.Threshold:
			it.Reason = "heat below the threshold"
		default:
			id, closed, err := c.promoteOne(ctx, tx, org, ms, it)
			if err != nil {
				return err
			}
			it.MemoryID, it.Promoted = &id, true
			rep.Promotion.Promoted++
			rep.Promotion.Superseded += closed
		}
		items = append(items, it)
	}
	rep.Promotion.Evaluated = len(items)
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].Promoted != items[j].Promoted {
			return items[i].Promoted
		}
		return items[i].Score > items[j].Score
	})
	rep.Promotion.Items = append(rep.Promotion.Items, items[:min(len(items), 20)]...)
	return nil
}

func (c *Consolidator) promoteOne(ctx context.Context, tx pgx.Tx, org string, ms []semantic.Memory, it PromotionItem) (uuid.UUID, int, error) {
	// The representative: the most read, then the newest wording.
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].AccessCount != ms[j].AccessCount {
			return ms[i].AccessCount > ms[j].AccessCount
		}
		return ms[i].ValidFrom.After(ms[j].ValidFrom)
	})
	rep := ms[0]
	vec, err := c.Semantic.Vector(ctx, tx, org, rep.ID)
	if err != nil {
		return uuid.Nil, 0, err
	}
	agent := rep.AgentID
	imp := rep.Importance
	from := make([]any, 0, len(ms))
	ids := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		if m.AgentID != agent {
			agent = "" // different agents stated it: the user-level memory is agent-independent
		}
		imp = math.Max(imp, m.Importance)
		p := provenanceOf(m)
		p["session_id"] = m.SessionID
		from = append(from, p)
		ids[i] = m.ID
	}
	meta := map[string]any{}
	for k, v := range rep.Metadata {
		meta[k] = v
	}
	meta["promoted_from"] = from
	meta["promotion"] = map[string]any{"score": it.Score, "threshold": it.Threshold, "sessions": it.Sessions,
		"reads": it.Reads, "recency": it.Recency}
	m, _, err := c.Semantic.Create(ctx, tx, semantic.NewMemory{
		Scope: strata.Scope{OrgID: org, UserID: rep.UserID, AgentID: agent}, Kind: rep.Kind, Text: rep.Text,
		Metadata: meta, Importance: imp, Trust: rep.Trust, Vector: vec, Space: rep.Embedding,
		Provenance: semantic.Provenance{KeyID: WorkerKey, AgentID: rep.Provenance.AgentID, JobID: rep.Provenance.JobID,
			EventSeq: rep.Provenance.EventSeq},
	})
	if err != nil {
		return uuid.Nil, 0, err
	}
	closed, err := c.Semantic.SupersedeInto(ctx, tx, org, ids, m.ID)
	if err != nil {
		return uuid.Nil, 0, err
	}
	strs := make([]string, len(closed))
	for i, x := range closed {
		strs[i] = x.String()
	}
	err = audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "worker", Action: "consolidate",
		EntityType: "memory", EntityID: m.ID.String(), Details: map[string]any{"task": TaskPromotion, "superseded": strs,
			"score": it.Score, "threshold": it.Threshold, "sessions": it.Sessions, "reads": it.Reads}})
	return m.ID, len(closed), err
}
