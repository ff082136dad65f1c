// Package eviction applies each org's forgetting policy: memories past their maximum age
// or inactivity, memories beyond a scope's cap (lowest retention score first), superseded
// memory versions, idle working sessions, episodic logs of long-finished jobs, surplus
// checkpoint versions and old key-value history. A run first plans (which rows, for which
// reason) and then, unless it is a preview, deletes exactly what it planned and writes one
// audit record per reason (ids, policy, reason, counts; never content). Pinned memories
// are exempt from every rule.
//
// The policy itself (internal/policy) also carries the org's consolidation settings
// (internal/consolidation reads them), so GET/PUT /v1/admin/policies is the one place an
// operator tunes the memory lifecycle. docs/workers.md explains every field.
package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

// Tiers and reasons a report names.
const (
	TierMemories    = "memories"
	TierWorking     = "working"
	TierEpisodic    = "episodic"
	TierCheckpoints = "checkpoints"
	TierAttempts    = "step_attempts"
	TierKeyValue    = "key_value"

	ReasonSuperseded    = "delete_superseded_after"
	ReasonMaxAge        = "max_age"
	ReasonMaxInactivity = "max_inactivity"
	ReasonMaxItems      = "max_items_per_scope"
	ReasonSessionTTL    = "session_ttl"
	ReasonJobRetention  = "completed_job_retention"
	ReasonKeepVersions  = "keep_versions"
	ReasonKeepAttempts  = "keep_attempts"
	ReasonKVHistory     = "history_retention"
)

// Item is what one rule removes (or would remove).
type EvictionItem struct {
	Tier            string   `json:"tier" enum:"memories,working,episodic,checkpoints,step_attempts,key_value"`
	Reason          string   `json:"reason" doc:"The policy rule: delete_superseded_after, max_age, max_inactivity, max_items_per_scope, session_ttl, completed_job_retention, keep_versions, keep_attempts, history_retention."`
	Kind            string   `json:"kind,omitempty" doc:"Memory kind, for memory rules."`
	LifecyclePolicy string   `json:"policy" doc:"The rule's value as applied (e.g. 365d, 50)."`
	Count           int      `json:"count" doc:"Memories (lineages, or versions for delete_superseded_after), sessions, job logs, checkpoint versions, step attempts or history versions."`
	SampleIDs       []string `json:"sample_ids" doc:"Up to 10 of the ids, in the order they are taken."`
	More            bool     `json:"more" doc:"More candidates matched than one run takes; the next run continues."`
	ids             []string
	refs            any
}

// Report is what a run removed (or a preview would remove).
type EvictionReport struct {
	OrgID             string         `json:"org_id"`
	At                time.Time      `json:"at" doc:"The clock the rules were evaluated at."`
	Applied           bool           `json:"applied" doc:"false for a preview: nothing was changed."`
	PolicyVersion     int64          `json:"policy_version" doc:"0: the org runs on the defaults."`
	Total             int            `json:"total"`
	Items             []EvictionItem `json:"items"`
	NeedsVerification int            `json:"needs_verification" doc:"Current facts past the verification age (search flags them stale; not removed)."`
}

// Actor is who runs an eviction (recorded in the audit log).
type Actor struct {
	KeyID     string // "worker:eviction" for the periodic job
	Role      string
	RequestID string
}

// WorkerActor is the periodic job's actor.
var WorkerActor = Actor{KeyID: "worker:eviction", Role: "worker"}

// Evictor plans and applies eviction for one org at a time.
type Evictor struct {
	Semantic *semantic.Store
	Episodic *episodic.Store
	Jobs     *jobs.Store
	Working  *working.Store         // nil: session purges skip Redis (the live copies expire by their TTL)
	KV       *keyvalue.Store        // history pruning only uses its SQL
	Defaults policy.LifecyclePolicy // policy.DefaultPolicy(cfg.VerifyAge)
	Now      func() time.Time       // clock (default time.Now)
	Log      *slog.Logger
	Metrics  *Metrics // nil: not counted
	// BatchLimit bounds what one rule takes per run [5000]; SampleSize the ids a report
	// shows per item [10].
	BatchLimit int
	SampleSize int
}

func (e *Evictor) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

func (e *Evictor) limit() int {
	if e.BatchLimit > 0 {
		return e.BatchLimit
	}
	return 5000
}

func (e *Evictor) sample() int {
	if e.SampleSize > 0 {
		return e.SampleSize
	}
	return 10
}

func cutoff(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{} // rule off: nothing is older than year 1
	}
	return now.Add(-d)
}

// kindCutoffs builds per-kind cutoffs for one duration rule.
func kindCutoffs(pol policy.Effective, now time.Time, rule func(policy.Rules) time.Duration) semantic.KindCutoffs {
	c := semantic.KindCutoffs{Default: cutoff(now, rule(pol.Default))}
	for _, k := range sortedKinds(pol) {
		c.Kinds = append(c.Kinds, k)
		c.Cutoffs = append(c.Cutoffs, cutoff(now, rule(pol.Kinds[k])))
	}
	return c
}

func sortedKinds(pol policy.Effective) []string {
	ks := make([]string, 0, len(pol.Kinds))
	for k := range pol.Kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func policyString(d time.Duration) string { return policy.DurString(d) }

// addMemoryItems groups refs by kind into items of one reason.
func (e *Evictor) addMemoryItems(rep *EvictionReport, reason string, refs []semantic.Ref, more bool, pol policy.Effective, val func(policy.Rules) string) {
	byKind := map[string][]semantic.Ref{}
	var kinds []string
	for _, r := range refs {
		if _, ok := byKind[r.Kind]; !ok {
			kinds = append(kinds, r.Kind)
		}
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		rs := byKind[k]
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.ID.String()
		}
		rep.add(EvictionItem{Tier: TierMemories, Reason: reason, Kind: k, LifecyclePolicy: val(pol.ForKind(k)), More: more, ids: ids, refs: rs}, e.sample())
	}
}

func (r *EvictionReport) add(it EvictionItem, sample int) {
	if len(it.ids) == 0 {
		return
	}
	it.Count = len(it.ids)
	it.SampleIDs = append([]string(nil), it.ids[:min(sample, len(it.ids))]...)
	r.Items = append(r.Items, it)
	r.Total += it.Count
}

type plan struct {
	rep      EvictionReport
	sessions []string
	cutoffs  map[string]time.Time
}

// Plan decides what org's policy removes now, without changing anything. tx must run
// for org.
func (e *Evictor) Plan(ctx context.Context, tx pgx.Tx, org string) (EvictionReport, error) {
	p, err := e.plan(ctx, tx, org)
	return p.rep, err
}

func (e *Evictor) plan(ctx context.Context, tx pgx.Tx, org string) (*plan, error) {
	pol, err := policy.LoadEffective(ctx, tx, org, e.Defaults)
	if err != nil {
		return nil, err
	}
	now := e.now()
	lim := e.limit()
	p := &plan{rep: EvictionReport{OrgID: org, At: now, PolicyVersion: pol.Version, Items: []EvictionItem{}}, cutoffs: map[string]time.Time{}}
	rep := &p.rep

	// Memories: superseded versions, then current memories by age, inactivity and cap. A
	// memory matched by one rule is not counted again by the next.
	sup, err := e.Semantic.SupersededBefore(ctx, tx, org, kindCutoffs(pol, now, func(r policy.Rules) time.Duration { return r.DeleteSupersededAfter }), lim+1)
	if err != nil {
		return nil, err
	}
	more := len(sup) > lim
	e.addMemoryItems(rep, ReasonSuperseded, sup[:min(len(sup), lim)], more, pol, func(r policy.Rules) string { return policyString(r.DeleteSupersededAfter) })

	var exclude []uuid.UUID
	aged, err := e.Semantic.CurrentWrittenBefore(ctx, tx, org, kindCutoffs(pol, now, func(r policy.Rules) time.Duration { return r.MaxAge }), exclude, lim+1)
	if err != nil {
		return nil, err
	}
	more = len(aged) > lim
	aged = aged[:min(len(aged), lim)]
	e.addMemoryItems(rep, ReasonMaxAge, aged, more, pol, func(r policy.Rules) string { return policyString(r.MaxAge) })
	for _, r := range aged {
		exclude = append(exclude, r.ID)
	}
	idle, err := e.Semantic.CurrentInactiveBefore(ctx, tx, org, kindCutoffs(pol, now, func(r policy.Rules) time.Duration { return r.MaxInactivity }), exclude, lim+1)
	if err != nil {
		return nil, err
	}
	more = len(idle) > lim
	idle = idle[:min(len(idle), lim)]
	e.addMemoryItems(rep, ReasonMaxInactivity, idle, more, pol, func(r policy.Rules) string { return policyString(r.MaxInactivity) })
	for _, r := range idle {
		exclude = append(exclude, r.ID)
	}
	kinds := sortedKinds(pol)
	caps := make([]int32, len(kinds))
	for i, k := range kinds {
		caps[i] = int32(pol.Kinds[k].MaxItemsPerScope)
	}
	over, err := e.Semantic.OverCap(ctx, tx, org, kinds, caps, int32(pol.Default.MaxItemsPerScope), now, exclude, lim+1)
	if err != nil {
		return nil, err
	}
	more = len(over) > lim
	e.addMemoryItems(rep, ReasonMaxItems, over[:min(len(over), lim)], more, pol, func(r policy.Rules) string { return strconv.Itoa(r.MaxItemsPerScope) })

	if verify := pol.ForKind(semantic.KindFact).VerifyAge; verify > 0 {
		if rep.NeedsVerification, err = e.Semantic.CountStaleFacts(ctx, tx, org, now.Add(-verify)); err != nil {
			return nil, err
		}
	}

	// Working memory: idle sessions.
	if pol.SessionTTL > 0 {
		c := now.Add(-pol.SessionTTL)
		p.cutoffs[ReasonSessionTTL] = c
		ids, err := e.idleSessions(ctx, tx, org, c, lim+1)
		if err != nil {
			return nil, err
		}
		more := len(ids) > lim
		ids = ids[:min(len(ids), lim)]
		p.sessions = ids
		rep.add(EvictionItem{Tier: TierWorking, Reason: ReasonSessionTTL, LifecyclePolicy: policyString(pol.SessionTTL), More: more, ids: ids}, e.sample())
	}

	// Episodic logs of long-finished, consolidated, unforked jobs.
	if pol.JobRetention > 0 {
		js, err := e.Jobs.RetainableLogs(ctx, tx, org, now.Add(-pol.JobRetention), lim+1)
		if err != nil {
			return nil, err
		}
		more := len(js) > lim
		js = js[:min(len(js), lim)]
		ids := make([]string, len(js))
		for i, j := range js {
			ids[i] = j.JobID
		}
		rep.add(EvictionItem{Tier: TierEpisodic, Reason: ReasonJobRetention, LifecyclePolicy: policyString(pol.JobRetention), More: more, ids: ids}, e.sample())
	}

	// Checkpoint versions beyond the newest N per job.
	if pol.KeepVersions > 0 {
		cs, err := e.Jobs.SurplusCheckpoints(ctx, tx, org, pol.KeepVersions, lim+1)
		if err != nil {
			return nil, err
		}
		more := len(cs) > lim
		cs = cs[:min(len(cs), lim)]
		ids := make([]string, len(cs))
		for i, c := range cs {
			ids[i] = c.JobID + "@" + strconv.FormatInt(c.Version, 10)
		}
		rep.add(EvictionItem{Tier: TierCheckpoints, Reason: ReasonKeepVersions, LifecyclePolicy: strconv.Itoa(pol.KeepVersions), More: more, ids: ids, refs: cs}, e.sample())
	}

	// Step attempts beyond the newest N per step.
	if pol.KeepAttempts > 0 {
		as, err := e.Jobs.SurplusAttempts(ctx, tx, org, pol.KeepAttempts, lim+1)
		if err != nil {
			return nil, err
		}
		more := len(as) > lim
		as = as[:min(len(as), lim)]
		ids := make([]string, len(as))
		for i, a := range as {
			ids[i] = a.String()
		}
		rep.add(EvictionItem{Tier: TierAttempts, Reason: ReasonKeepAttempts, LifecyclePolicy: strconv.Itoa(pol.KeepAttempts), More: more, ids: ids, refs: as}, e.sample())
	}

	// Key-value history.
	if pol.KVHistory > 0 && e.KV != nil {
		hs, err := e.KV.OldHistory(ctx, tx, org, now.Add(-pol.KVHistory), lim+1)
		if err != nil {
			return nil, err
		}
		more := len(hs) > lim
		hs = hs[:min(len(hs), lim)]
		ids := make([]string, len(hs))
		for i, h := range hs {
			ids[i] = h.String()
		}
		rep.add(EvictionItem{Tier: TierKeyValue, Reason: ReasonKVHistory, LifecyclePolicy: policyString(pol.KVHistory), More: more, ids: ids, refs: hs}, e.sample())
	}
	return p, nil
}

func (e *Evictor) idleSessions(ctx context.Context, tx pgx.Tx, org string, c time.Time, limit int) ([]string, error) {
	ws := e.Working
	if ws == nil {
		ws = working.New(nil, nil, working.Options{})
	}
	return ws.IdleSessions(ctx, tx, org, c, limit)
}

// Run plans and, when apply is set, removes exactly what it planned in tx (which must run
// for org) and writes the audit records. The returned function drops the Redis copies of
// purged sessions: call it after tx commits. A preview (apply false) changes nothing and
// reports the same as a run at the same moment would.
func (e *Evictor) Run(ctx context.Context, tx pgx.Tx, org string, apply bool, actor Actor) (EvictionReport, func(context.Context), error) {
	noop := func(context.Context) {}
	p, err := e.plan(ctx, tx, org)
	if err != nil {
		return EvictionReport{}, noop, err
	}
	if !apply {
		return p.rep, noop, nil
	}
	p.rep.Applied = true
	var purged []working.PurgedSession
	for _, it := range p.rep.Items {
		rows, err := e.apply(ctx, tx, org, it, p, &purged)
		if err != nil {
			return EvictionReport{}, noop, fmt.Errorf("eviction %s/%s: %w", it.Tier, it.Reason, err)
		}
		if err := e.audit(ctx, tx, org, it, rows, p.rep, actor); err != nil {
			return EvictionReport{}, noop, err
		}
	}
	after := func(ctx context.Context) {
		for _, it := range p.rep.Items {
			e.Metrics.evicted(it.Tier, it.Reason, it.Count)
		}
		if e.Working != nil && len(purged) > 0 {
			if err := e.Working.DropLive(ctx, org, purged); err != nil && e.Log != nil {
				e.Log.Warn("eviction: could not drop purged sessions from Redis; they expire by their TTL", "org", org, "err", err)
			}
		}
	}
	return p.rep, after, nil
}

// apply removes one item's rows and returns how many rows went underneath.
func (e *Evictor) apply(ctx context.Context, tx pgx.Tx, org string, it EvictionItem, p *plan, purged *[]working.PurgedSession) (int64, error) {
	switch it.Tier {
	case TierMemories:
		refs := it.refs.([]semantic.Ref)
		if it.Reason == ReasonSuperseded {
			ids := make([]uuid.UUID, len(refs))
			for i, r := range refs {
				ids[i] = r.ID
			}
			got, err := e.Semantic.DeleteVersions(ctx, tx, org, ids)
			return int64(len(got)), err
		}
		roots := make([]uuid.UUID, len(refs))
		for i, r := range refs {
			roots[i] = r.RootID
		}
		got, err := e.Semantic.DeleteLineages(ctx, tx, org, roots)
		return int64(len(got)), err
	case TierWorking:
		ws := e.Working
		if ws == nil {
			ws = working.New(nil, nil, working.Options{Now: e.Now})
		}
		got, err := ws.PurgeIdle(ctx, tx, org, p.sessions, p.cutoffs[ReasonSessionTTL])
		if err != nil {
			return 0, err
		}
		*purged = append(*purged, got...)
		var turns int64
		for _, g := range got {
			turns += g.Turns
			// The rolling summary of turns that are gone goes with them (docs/summaries.md).
			if _, err := summaries.EraseSubject(ctx, tx, org, summaries.KindSession, g.SessionID); err != nil {
				return turns, err
			}
		}
		return turns, nil
	case TierEpisodic:
		var events int64
		for _, job := range it.ids {
			n, _, err := e.Episodic.DeleteLog(ctx, tx, org, job)
			if err != nil {
				return events, err
			}
			events += n
			if _, err := summaries.EraseSubject(ctx, tx, org, summaries.KindJob, job); err != nil {
				return events, err
			}
		}
		return events, nil
	case TierCheckpoints:
		return e.Jobs.DeleteCheckpoints(ctx, tx, org, it.refs.([]jobs.CheckpointRef))
	case TierAttempts:
		return e.Jobs.DeleteAttempts(ctx, tx, org, it.refs.([]jobs.AttemptRef))
	case TierKeyValue:
		return e.KV.DeleteHistory(ctx, tx, org, it.refs.([]keyvalue.HistoryRef))
	}
	return 0, fmt.Errorf("unknown tier %q", it.Tier)
}

// auditChunk bounds the ids one audit record lists.
const auditChunk = 500

func (e *Evictor) audit(ctx context.Context, tx pgx.Tx, org string, it EvictionItem, rows int64, rep EvictionReport, actor Actor) error {
	chunks := (len(it.ids) + auditChunk - 1) / auditChunk
	for c := 0; c < chunks; c++ {
		ids := it.ids[c*auditChunk : min(len(it.ids), (c+1)*auditChunk)]
		d := map[string]any{
			"tier": it.Tier, "reason": it.Reason, "policy": it.LifecyclePolicy, "policy_version": rep.PolicyVersion,
			"count": it.Count, "rows": rows, "ids": ids, "chunk": c + 1, "chunks": chunks, "evaluated_at": rep.At,
		}
		if it.Kind != "" {
			d["kind"] = it.Kind
		}
		if err := audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: actor.KeyID, ActorRole: actor.Role,
			Action: "evict", EntityType: it.Tier, RequestID: actor.RequestID, Details: d}); err != nil {
			return err
		}
	}
	return nil
}
