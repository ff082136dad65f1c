// Package policy is each org's memory lifecycle policy: the document an operator sets with
// GET/PUT /v1/admin/policies (stored in the eviction_policies table), the server's defaults,
// and the compiled, effective rules that internal/eviction (forgetting) and
// internal/consolidation (summaries, compaction, merges, promotion) run on. docs/workers.md
// explains every field.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// MemoryRules are the rules for one memory kind (or the default for every kind). In a
// kind's override an absent field inherits the default's; in the default an absent field
// takes the built-in default. Durations are Go durations ("720h") or whole days ("90d");
// "0" turns a rule off.
type MemoryRules struct {
	MaxAge                *string `json:"max_age,omitempty" maxLength:"32" doc:"Evict a memory whose current version was written longer ago than this. \"0\": never."`
	MaxInactivity         *string `json:"max_inactivity,omitempty" maxLength:"32" doc:"Evict a memory not written, read (served by search) or verified for this long. \"0\": never."`
	MaxItemsPerScope      *int    `json:"max_items_per_scope,omitempty" minimum:"0" maximum:"10000000" doc:"Keep at most this many current memories of the kind per exact scope (user, agent, session); the lowest retention score goes first. Pinned memories neither count nor go. 0: no cap."`
	DeleteSupersededAfter *string `json:"delete_superseded_after,omitempty" maxLength:"32" doc:"Delete superseded versions (edits, merges, promotions) this long after they were superseded. \"0\": keep forever."`
	VerifyAge             *string `json:"verify_age,omitempty" maxLength:"32" doc:"A fact not verified for this long is flagged stale by search (and exclude_stale drops it). Not an eviction rule."`
}

// WorkingRules govern working memory (sessions).
type WorkingRules struct {
	SessionTTL *string `json:"session_ttl,omitempty" maxLength:"32" doc:"Remove a session (state, turn log; a tombstone keeps its version counter) idle for this long, from Redis and Postgres. \"0\": never."`
}

// EpisodicRules govern job event logs.
type EpisodicRules struct {
	CompletedJobRetention *string `json:"completed_job_retention,omitempty" maxLength:"32" doc:"Delete the event log of a job finished (completed, failed or cancelled) longer ago than this, once it has been consolidated. Logs that a fork still reads are kept. \"0\": keep forever."`
}

// CheckpointRules govern checkpoint history.
type CheckpointRules struct {
	KeepVersions *int `json:"keep_versions,omitempty" minimum:"0" maximum:"1000000" doc:"Keep the newest N checkpoint versions of each job (plus any version a fork branched from). 0: keep all."`
}

// StepRules govern the attempt history of job steps.
type StepRules struct {
	KeepAttempts *int `json:"keep_attempts,omitempty" minimum:"0" maximum:"1000000" doc:"Keep the newest N attempts of each step (the current claim is always kept). 0: keep all."`
}

// KeyValueRules govern key-value history.
type KeyValueRules struct {
	HistoryRetention *string `json:"history_retention,omitempty" maxLength:"32" doc:"Delete key-value history versions (not the current value) written longer ago than this. \"0\": keep forever."`
}

// PromotionRules: when session-level facts of one user become user-level ones.
type PromotionRules struct {
	Enabled         *bool    `json:"enabled,omitempty"`
	Kinds           []string `json:"kinds,omitempty" maxItems:"20" doc:"Memory kinds that may be promoted (default fact, preference)."`
	Similarity      *float64 `json:"similarity,omitempty" minimum:"0.5" maximum:"1" doc:"Session memories of one user at or above this cosine similarity are one fact."`
	MinSessions     *int     `json:"min_sessions,omitempty" minimum:"2" maximum:"1000" doc:"A fact must have been written or read in at least this many distinct sessions."`
	Threshold       *float64 `json:"threshold,omitempty" minimum:"0" maximum:"1000" doc:"Promote when the heat score reaches this."`
	WeightSessions  *float64 `json:"weight_sessions,omitempty" minimum:"0" maximum:"100"`
	WeightReads     *float64 `json:"weight_reads,omitempty" minimum:"0" maximum:"100"`
	WeightRecency   *float64 `json:"weight_recency,omitempty" minimum:"0" maximum:"100"`
	RecencyHalfLife *string  `json:"recency_half_life,omitempty" maxLength:"32"`
}

// ConsolidationRules tune consolidation for the org.
type ConsolidationRules struct {
	CompactAfter   *string        `json:"compact_after,omitempty" maxLength:"32" doc:"Compact the event log of a job finished longer ago than this. \"0\": never compact."`
	CompactMinRun  *int           `json:"compact_min_run,omitempty" minimum:"2" maximum:"100000" doc:"Only runs of at least this many consecutive superseded edits are replaced by a summary event."`
	MergeThreshold *float64       `json:"merge_threshold,omitempty" minimum:"0.5" maximum:"1" doc:"Current memories of one scope and kind at or above this cosine similarity merge into one. 1: never merge."`
	Promotion      PromotionRules `json:"promotion,omitempty"`
}

// MemoryPolicy is the memory part of a policy.
type MemoryLifecyclePolicy struct {
	Default MemoryRules            `json:"default,omitempty"`
	Kinds   map[string]MemoryRules `json:"kinds,omitempty" doc:"Overrides per memory kind (fact, preference, job, case or custom)."`
}

// Policy is an org's lifecycle policy as stored and as the API shows it.
type LifecyclePolicy struct {
	Memories      MemoryLifecyclePolicy `json:"memories,omitempty"`
	Working       WorkingRules          `json:"working,omitempty"`
	Episodic      EpisodicRules         `json:"episodic,omitempty"`
	Checkpoints   CheckpointRules       `json:"checkpoints,omitempty"`
	Steps         StepRules             `json:"steps,omitempty"`
	KeyValue      KeyValueRules         `json:"key_value,omitempty"`
	Consolidation ConsolidationRules    `json:"consolidation,omitempty"`
	Extraction    ExtractionRules       `json:"extraction,omitempty"`
}

func sp(s string) *string   { return &s }
func ip(i int) *int         { return &i }
func fp(f float64) *float64 { return &f }
func bp(b bool) *bool       { return &b }

// DurString is a duration as a policy writes it (whole days as "90d", "0" for off).
func DurString(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// DefaultPolicy is what an org without a stored policy runs on. verifyAge is the server's
// STRATA_VERIFY_AGE.
func DefaultPolicy(verifyAge time.Duration) LifecyclePolicy {
	if verifyAge <= 0 {
		verifyAge = 90 * 24 * time.Hour
	}
	return LifecyclePolicy{
		Memories: MemoryLifecyclePolicy{Default: MemoryRules{
			MaxAge:                sp("0"),
			MaxInactivity:         sp("365d"),
			MaxItemsPerScope:      ip(10000),
			DeleteSupersededAfter: sp("90d"),
			VerifyAge:             sp(DurString(verifyAge)),
		}, Kinds: map[string]MemoryRules{}},
		Working:     WorkingRules{SessionTTL: sp("30d")},
		Episodic:    EpisodicRules{CompletedJobRetention: sp("180d")},
		Checkpoints: CheckpointRules{KeepVersions: ip(50)},
		Steps:       StepRules{KeepAttempts: ip(50)},
		KeyValue:    KeyValueRules{HistoryRetention: sp("90d")},
		Consolidation: ConsolidationRules{
			CompactAfter: sp("7d"), CompactMinRun: ip(3), MergeThreshold: fp(0.9),
			Promotion: PromotionRules{
				Enabled: bp(true), Kinds: []string{"fact", "preference"}, Similarity: fp(0.9), MinSessions: ip(2),
				Threshold: fp(3), WeightSessions: fp(1), WeightReads: fp(0.5), WeightRecency: fp(1),
				RecencyHalfLife: sp("7d"),
			},
		},
		Extraction: defaultExtraction(),
	}
}

// ParseDuration reads "0", "90d" or a Go duration.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n < 0 || n > 100*365 || math.IsNaN(n) {
			return 0, errors.New("must be a number of days such as 90d, a Go duration such as 720h, or 0")
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, errors.New("must be a number of days such as 90d, a Go duration such as 720h, or 0")
	}
	return v, nil
}

// Rules is a MemoryRules resolved to values (0 = off).
type Rules struct {
	MaxAge, MaxInactivity, DeleteSupersededAfter, VerifyAge time.Duration
	MaxItemsPerScope                                        int
}

// Promotion is PromotionRules resolved.
type Promotion struct {
	Enabled                                    bool
	Kinds                                      []string
	Similarity                                 float64
	MinSessions                                int
	Threshold                                  float64
	WeightSessions, WeightReads, WeightRecency float64
	RecencyHalfLife                            time.Duration
}

// Effective is a policy resolved against the defaults, ready to apply.
type Effective struct {
	Version        int64
	Default        Rules
	Kinds          map[string]Rules
	SessionTTL     time.Duration
	JobRetention   time.Duration
	KeepVersions   int
	KeepAttempts   int
	KVHistory      time.Duration
	CompactAfter   time.Duration
	CompactMinRun  int
	MergeThreshold float64
	Promotion      Promotion
	Extraction     Extraction
	// Doc is the filled-in document (what GET answers).
	Doc LifecyclePolicy
}

// ForKind returns the rules of a memory kind.
func (e Effective) ForKind(kind string) Rules {
	if r, ok := e.Kinds[kind]; ok {
		return r
	}
	return e.Default
}

// Fill returns p with every absent field taken from def (kind overrides inherit
// p's filled default).
func Fill(p, def LifecyclePolicy) LifecyclePolicy {
	s := func(v, d *string) *string {
		if v == nil {
			return d
		}
		return v
	}
	i := func(v, d *int) *int {
		if v == nil {
			return d
		}
		return v
	}
	f := func(v, d *float64) *float64 {
		if v == nil {
			return d
		}
		return v
	}
	mem := func(v, d MemoryRules) MemoryRules {
		return MemoryRules{MaxAge: s(v.MaxAge, d.MaxAge), MaxInactivity: s(v.MaxInactivity, d.MaxInactivity),
			MaxItemsPerScope:      i(v.MaxItemsPerScope, d.MaxItemsPerScope),
			DeleteSupersededAfter: s(v.DeleteSupersededAfter, d.DeleteSupersededAfter), VerifyAge: s(v.VerifyAge, d.VerifyAge)}
	}
	out := LifecyclePolicy{}
	out.Memories.Default = mem(p.Memories.Default, def.Memories.Default)
	out.Memories.Kinds = map[string]MemoryRules{}
	for k, r := range def.Memories.Kinds {
		out.Memories.Kinds[k] = mem(r, out.Memories.Default)
	}
	for k, r := range p.Memories.Kinds {
		out.Memories.Kinds[k] = mem(r, out.Memories.Default)
	}
	out.Working.SessionTTL = s(p.Working.SessionTTL, def.Working.SessionTTL)
	out.Episodic.CompletedJobRetention = s(p.Episodic.CompletedJobRetention, def.Episodic.CompletedJobRetention)
	out.Checkpoints.KeepVersions = i(p.Checkpoints.KeepVersions, def.Checkpoints.KeepVersions)
	out.Steps.KeepAttempts = i(p.Steps.KeepAttempts, def.Steps.KeepAttempts)
	out.KeyValue.HistoryRetention = s(p.KeyValue.HistoryRetention, def.KeyValue.HistoryRetention)
	c, dc := p.Consolidation, def.Consolidation
	out.Consolidation = ConsolidationRules{
		CompactAfter: s(c.CompactAfter, dc.CompactAfter), CompactMinRun: i(c.CompactMinRun, dc.CompactMinRun),
		MergeThreshold: f(c.MergeThreshold, dc.MergeThreshold),
	}
	pr, dp := c.Promotion, dc.Promotion
	out.Consolidation.Promotion = PromotionRules{
		Enabled: pr.Enabled, Kinds: pr.Kinds, Similarity: f(pr.Similarity, dp.Similarity),
		MinSessions: i(pr.MinSessions, dp.MinSessions), Threshold: f(pr.Threshold, dp.Threshold),
		WeightSessions: f(pr.WeightSessions, dp.WeightSessions), WeightReads: f(pr.WeightReads, dp.WeightReads),
		WeightRecency: f(pr.WeightRecency, dp.WeightRecency), RecencyHalfLife: s(pr.RecencyHalfLife, dp.RecencyHalfLife),
	}
	if pr.Enabled == nil {
		out.Consolidation.Promotion.Enabled = dp.Enabled
	}
	if pr.Kinds == nil {
		out.Consolidation.Promotion.Kinds = dp.Kinds
	}
	out.Extraction = fillExtraction(p.Extraction, def.Extraction)
	return out
}

// Compile validates p (filled against def) and resolves it. Errors name the field as
// its path in the policy document (memories.default.max_age); the transport adds where it travelled.
func Compile(p, def LifecyclePolicy) (Effective, error) {
	doc := Fill(p, def)
	e := Effective{Doc: doc, Kinds: map[string]Rules{}}
	var errs []error
	dur := func(field string, v *string) time.Duration {
		if v == nil {
			return 0
		}
		d, err := ParseDuration(*v)
		if err != nil {
			errs = append(errs, strata.Invalid(""+field, "%s", err.Error()))
		}
		return d
	}
	rules := func(prefix string, r MemoryRules) Rules {
		out := Rules{MaxAge: dur(prefix+".max_age", r.MaxAge), MaxInactivity: dur(prefix+".max_inactivity", r.MaxInactivity),
			DeleteSupersededAfter: dur(prefix+".delete_superseded_after", r.DeleteSupersededAfter),
			VerifyAge:             dur(prefix+".verify_age", r.VerifyAge)}
		if r.MaxItemsPerScope != nil {
			out.MaxItemsPerScope = *r.MaxItemsPerScope
			if out.MaxItemsPerScope < 0 {
				errs = append(errs, strata.Invalid(""+prefix+".max_items_per_scope", "must not be negative"))
			}
		}
		return out
	}
	e.Default = rules("memories.default", doc.Memories.Default)
	if e.Default.VerifyAge == 0 {
		errs = append(errs, strata.Invalid("memories.default.verify_age", "must be a positive duration"))
	}
	kinds := make([]string, 0, len(doc.Memories.Kinds))
	for k := range doc.Memories.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	if len(kinds) > 100 {
		errs = append(errs, strata.Invalid("memories.kinds", "at most 100 kinds"))
	}
	for _, k := range kinds {
		if !strata.ValidID(k) {
			errs = append(errs, strata.Invalid("memories.kinds", "kind %q must be 1-200 characters of A-Z a-z 0-9 . _ : -", k))
			continue
		}
		r := rules("memories.kinds."+k, doc.Memories.Kinds[k])
		if r.VerifyAge == 0 {
			errs = append(errs, strata.Invalid("memories.kinds."+k+".verify_age", "must be a positive duration"))
		}
		e.Kinds[k] = r
	}
	e.SessionTTL = dur("working.session_ttl", doc.Working.SessionTTL)
	e.JobRetention = dur("episodic.completed_job_retention", doc.Episodic.CompletedJobRetention)
	e.KVHistory = dur("key_value.history_retention", doc.KeyValue.HistoryRetention)
	if doc.Checkpoints.KeepVersions != nil {
		e.KeepVersions = *doc.Checkpoints.KeepVersions
	}
	if doc.Steps.KeepAttempts != nil {
		e.KeepAttempts = *doc.Steps.KeepAttempts
	}
	c := doc.Consolidation
	e.CompactAfter = dur("consolidation.compact_after", c.CompactAfter)
	e.CompactMinRun = *c.CompactMinRun
	if e.CompactMinRun < 2 {
		errs = append(errs, strata.Invalid("consolidation.compact_min_run", "must be at least 2"))
	}
	e.MergeThreshold = *c.MergeThreshold
	if e.MergeThreshold < 0.5 || e.MergeThreshold > 1 {
		errs = append(errs, strata.Invalid("consolidation.merge_threshold", "must be a cosine similarity in [0.5, 1]"))
	}
	pr := c.Promotion
	e.Promotion = Promotion{Enabled: *pr.Enabled, Kinds: pr.Kinds, Similarity: *pr.Similarity, MinSessions: *pr.MinSessions,
		Threshold: *pr.Threshold, WeightSessions: *pr.WeightSessions, WeightReads: *pr.WeightReads,
		WeightRecency: *pr.WeightRecency, RecencyHalfLife: dur("consolidation.promotion.recency_half_life", pr.RecencyHalfLife)}
	for i, k := range pr.Kinds {
		if !strata.ValidID(k) {
			errs = append(errs, strata.Invalid(fmt.Sprintf("consolidation.promotion.kinds[%d]", i), "must be 1-200 characters of A-Z a-z 0-9 . _ : -"))
		}
	}
	if e.Promotion.Similarity < 0.5 || e.Promotion.Similarity > 1 {
		errs = append(errs, strata.Invalid("consolidation.promotion.similarity", "must be a cosine similarity in [0.5, 1]"))
	}
	if e.Promotion.MinSessions < 2 {
		errs = append(errs, strata.Invalid("consolidation.promotion.min_sessions", "must be at least 2"))
	}
	if e.Promotion.RecencyHalfLife == 0 {
		errs = append(errs, strata.Invalid("consolidation.promotion.recency_half_life", "must be a positive duration"))
	}
	for name, v := range map[string]float64{"threshold": e.Promotion.Threshold, "weight_sessions": e.Promotion.WeightSessions,
		"weight_reads": e.Promotion.WeightReads, "weight_recency": e.Promotion.WeightRecency} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, strata.Invalid("consolidation.promotion."+name, "must be a non-negative number"))
		}
	}
	e.Extraction = compileExtraction(doc.Extraction, &errs)
	e.Extraction.Off = p.Extraction.Enabled != nil && !*p.Extraction.Enabled
	if len(errs) > 0 {
		return e, errs[0]
	}
	return e, nil
}

// Stored is a policy row.
type Stored struct {
	Policy    LifecyclePolicy
	Version   int64
	UpdatedAt *time.Time
	UpdatedBy string
}

// loadSQL reads an org's stored policy row.
const loadSQL = `SELECT policy, version, updated_at, updated_by FROM eviction_policies WHERE org_id = $1`

// Load reads org's stored policy (Version 0 and an empty policy when it has none).
func Load(ctx context.Context, q pg.DBTX, org string) (Stored, error) {
	return scanStored(q.QueryRow(ctx, loadSQL, org), org)
}

func scanStored(row pgx.Row, org string) (Stored, error) {
	var st Stored
	var raw []byte
	var at time.Time
	err := row.Scan(&raw, &st.Version, &at, &st.UpdatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, pg.Interpret(err)
	}
	at = at.UTC()
	st.UpdatedAt = &at
	if err := json.Unmarshal(raw, &st.Policy); err != nil {
		return st, fmt.Errorf("eviction: stored policy of %s is unreadable: %w", org, err)
	}
	return st, nil
}

// LoadEffective reads and resolves org's policy. A stored policy that no longer compiles
// (it was valid when written) falls back to the defaults rather than stopping the workers.
func LoadEffective(ctx context.Context, q pg.DBTX, org string, def LifecyclePolicy) (Effective, error) {
	st, err := Load(ctx, q, org)
	if err != nil {
		return Effective{}, err
	}
	return effective(st, def)
}

func effective(st Stored, def LifecyclePolicy) (Effective, error) {
	e, err := Compile(st.Policy, def)
	if err != nil {
		e, err = Compile(LifecyclePolicy{}, def)
		if err != nil {
			return e, err
		}
	}
	e.Version = st.Version
	return e, nil
}

// EffectiveResult is filled in when the batch QueueLoadEffective queued into is read.
type EffectiveResult struct {
	Effective Effective
	Err       error
}

// QueueLoadEffective queues LoadEffective's read into b, a batch for a transaction bound to
// org, so a caller that already sends one (context assembly) reads the policy without a
// round trip of its own. res is filled in as b's results are read.
func QueueLoadEffective(b *pgx.Batch, org string, def LifecyclePolicy, res *EffectiveResult) {
	b.Queue(loadSQL, org).QueryRow(func(row pgx.Row) error {
		st, err := scanStored(row, org)
		if err == nil {
			res.Effective, err = effective(st, def)
		}
		res.Err = err
		return nil
	})
}

// Save replaces org's policy after validating it. ifMatch, when set, must be the current
// version (0 for "none stored yet"). It returns the new version.
func Save(ctx context.Context, tx pgx.Tx, org string, p LifecyclePolicy, def LifecyclePolicy, ifMatch *int64, by string, now time.Time) (Effective, Stored, error) {
	e, err := Compile(p, def)
	if err != nil {
		return e, Stored{}, err
	}
	cur, err := Load(ctx, tx, org)
	if err != nil {
		return e, Stored{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM eviction_policies WHERE org_id = $1 FOR UPDATE`, org); err != nil {
		return e, Stored{}, pg.Interpret(err)
	}
	if cur, err = Load(ctx, tx, org); err != nil {
		return e, Stored{}, err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return e, Stored{}, strata.Conflict("the policy changed meanwhile (If-Match)", map[string]any{"current_version": cur.Version})
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return e, Stored{}, err
	}
	now = now.UTC().Truncate(time.Microsecond)
	var v int64
	err = tx.QueryRow(ctx, `INSERT INTO eviction_policies (org_id, policy, version, updated_at, updated_by)
		VALUES ($1, $2::jsonb, 1, $3, $4)
		ON CONFLICT (org_id) DO UPDATE SET policy = excluded.policy, version = eviction_policies.version + 1,
			updated_at = excluded.updated_at, updated_by = excluded.updated_by
		RETURNING version`, org, string(raw), now, by).Scan(&v)
	if err != nil {
		return e, Stored{}, pg.Interpret(err)
	}
	e.Version = v
	return e, Stored{Policy: p, Version: v, UpdatedAt: &now, UpdatedBy: by}, nil
}
