// Package consolidation turns what agents did into memory that stays useful: a semantic
// "job" memory for every finished job (goal, outcome, settled parameters, steps, assets;
// written by an LLM when one is configured, extractively otherwise), compaction of old
// event logs (runs of superseded edits replaced by a summary event in the default read
// view), near-duplicate merge in each scope (one memory keeps the merged provenance, the
// others are superseded), and promotion of session facts read across several sessions of
// one user to user level. It composes the tier stores (jobs, episodic, semantic) the way
// internal/httpapi does; tiers never import it. docs/workers.md explains each task.
package consolidation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// Tasks a run can do.
const (
	TaskJobSummaries = "job_summaries"
	TaskCompaction   = "compaction"
	TaskMerge        = "merge"
	TaskPromotion    = "promotion"
)

// AllTasks in the order a run does them.
var AllTasks = []string{TaskJobSummaries, TaskCompaction, TaskMerge, TaskPromotion}

// WorkerKey is the actor consolidation's writes are attributed to (provenance.key_id and
// audit actor).
const WorkerKey = "worker:consolidation"

// Consolidator runs consolidation for one org at a time.
type Consolidator struct {
	Pool       *pgxpool.Pool
	Semantic   *semantic.Store
	Episodic   *episodic.Store
	Jobs       *jobs.Store
	Embedder   embed.Embedder
	Summarizer Summarizer // nil: extractive
	Defaults   policy.LifecyclePolicy
	Now        func() time.Time
	Log        *slog.Logger
	Metrics    *Metrics // nil: not counted
	// BatchLimit bounds the jobs (summaries, compaction) one run handles per org [200];
	// merge and promotion look at up to 50× that many memories.
	BatchLimit int
	// MaxAttempts: an outbox row that failed this many times is left for an operator
	// (its last_error says why) [20].
	MaxAttempts int
	// Restricted reports a GDPR Art. 18 restriction (or a pending erasure) of a data subject
	// on db; app passes gdpr's HeldOn, which also takes the subject's lock until db's
	// transaction ends. A restricted subject's job is not summarised — no model call, no
	// memory — until the restriction is lifted: its outbox row stays pending (ErrDeferred).
	// nil: nobody is restricted (tests).
	Restricted func(ctx context.Context, db pg.DBTX, org, user string) (bool, error)
}

// ErrDeferred: the job's subject is restricted (GDPR Art. 18) or being erased; its summary
// waits, its outbox row pending, until the restriction is lifted. The River worker snoozes
// the job (River does not count a snooze as an attempt), so nothing is lost.
var ErrDeferred = errors.New("consolidation: the job's data subject is restricted; its summary waits for the restriction to be lifted")

// held reports whether user's data may not be processed now (Restricted on db).
func (c *Consolidator) held(ctx context.Context, db pg.DBTX, org, user string) (bool, error) {
	if c.Restricted == nil || user == "" {
		return false, nil
	}
	return c.Restricted(ctx, db, org, user)
}

func (c *Consolidator) now() time.Time {
	if c.Now != nil {
		return c.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

func (c *Consolidator) limit() int {
	if c.BatchLimit > 0 {
		return c.BatchLimit
	}
	return 200
}

func (c *Consolidator) maxAttempts() int {
	if c.MaxAttempts > 0 {
		return c.MaxAttempts
	}
	return 20
}

func (c *Consolidator) summarizer() Summarizer {
	if c.Summarizer != nil {
		return c.Summarizer
	}
	return ExtractiveSummarizer{}
}

func (c *Consolidator) space() semantic.Space {
	return semantic.Space{Embedder: c.Embedder.Name(), Model: c.Embedder.Model(), Dims: c.Embedder.Dims()}
}

func isNotFound(err error) bool { return errors.Is(err, strata.ErrNotFound) }

// JobSummary is the result of summarising one job.
type ConsolidatedJob struct {
	JobID      string     `json:"job_id"`
	MemoryID   *uuid.UUID `json:"memory_id,omitempty"`
	Summarizer string     `json:"summarizer,omitempty" doc:"extractive, or llm:<model>."`
	Status     string     `json:"status" enum:"written,exists,skipped,restricted,failed" doc:"written: a job memory was written now; exists: it was written before; skipped: another worker holds it; restricted: its data subject is restricted (GDPR Art. 18), so nothing was sent to a model or written; the job waits until the restriction is lifted; failed: see error."`
	Error      string     `json:"error,omitempty"`
}

// SummariesReport counts job summaries.
type SummariesReport struct {
	Written int `json:"written"`
	Exists  int `json:"exists"`
	Skipped int `json:"skipped"`
	// Restricted counts jobs deferred because their subject is restricted (Art. 18).
	Restricted int               `json:"restricted"`
	Failed     int               `json:"failed"`
	Items      []ConsolidatedJob `json:"items" doc:"Up to 20 of them."`
}

// CompactionReport counts episodic compaction.
type CompactionReport struct {
	Jobs   int      `json:"jobs" doc:"Finished jobs examined."`
	Runs   int      `json:"runs" doc:"Runs of superseded edits replaced by a summary event."`
	Events int      `json:"events" doc:"Events those runs hide from the default read view (they remain stored)."`
	JobIDs []string `json:"job_ids" doc:"Up to 20 jobs that got a summary event."`
}

// MergeItem is one near-duplicate cluster merged.
type MergeItem struct {
	MemoryID      uuid.UUID   `json:"memory_id" doc:"The merged memory (a new version of the survivor)."`
	Superseded    []uuid.UUID `json:"superseded" doc:"The memories it absorbed (superseded by it, not deleted)."`
	MinSimilarity float64     `json:"min_similarity"`
}

// MergeReport counts merges.
type MergeReport struct {
	Clusters   int         `json:"clusters"`
	Superseded int         `json:"superseded"`
	Items      []MergeItem `json:"items" doc:"Up to 20 of them."`
}

// PromotionItem explains one evaluated cluster of session facts.
type PromotionItem struct {
	MemoryID  *uuid.UUID  `json:"memory_id,omitempty" doc:"The user-level memory, when promoted."`
	From      []uuid.UUID `json:"from" doc:"The session-level memories of the cluster."`
	Sessions  int         `json:"sessions" doc:"Distinct sessions that wrote or read the fact."`
	Reads     int         `json:"reads" doc:"Times the cluster's memories were served (retrieval log)."`
	Recency   float64     `json:"recency" doc:"0.5^(time since the last read / recency_half_life)."`
	Score     float64     `json:"score" doc:"weight_sessions·sessions + weight_reads·ln(1+reads) + weight_recency·recency."`
	Threshold float64     `json:"threshold"`
	Promoted  bool        `json:"promoted"`
	Reason    string      `json:"reason,omitempty" doc:"Why not, when not promoted."`
}

// PromotionReport counts promotions.
type PromotionReport struct {
	Evaluated  int             `json:"evaluated" doc:"Clusters of session facts seen in at least two sessions."`
	Promoted   int             `json:"promoted"`
	Superseded int             `json:"superseded" doc:"Session memories superseded by a promoted one."`
	Items      []PromotionItem `json:"items" doc:"Up to 20 evaluated clusters, promoted first."`
}

// Report is what a consolidation run did.
type ConsolidationReport struct {
	OrgID         string           `json:"org_id"`
	At            time.Time        `json:"at"`
	PolicyVersion int64            `json:"policy_version"`
	Tasks         []string         `json:"tasks"`
	JobSummaries  SummariesReport  `json:"job_summaries"`
	Compaction    CompactionReport `json:"compaction"`
	Merge         MergeReport      `json:"merge"`
	Promotion     PromotionReport  `json:"promotion"`
}

func newReport(org string, at time.Time, tasks []string) ConsolidationReport {
	return ConsolidationReport{OrgID: org, At: at, Tasks: tasks,
		JobSummaries: SummariesReport{Items: []ConsolidatedJob{}}, Compaction: CompactionReport{JobIDs: []string{}},
		Merge: MergeReport{Items: []MergeItem{}}, Promotion: PromotionReport{Items: []PromotionItem{}}}
}

// ValidTasks checks a task list (empty: all).
func ValidTasks(tasks []string) ([]string, error) {
	if len(tasks) == 0 {
		return AllTasks, nil
	}
	seen := map[string]bool{}
	var out []string
	for i, t := range tasks {
		ok := false
		for _, a := range AllTasks {
			ok = ok || a == t
		}
		if !ok {
			return nil, strata.Invalid(fmt.Sprintf("tasks[%d]", i), "must be one of job_summaries, compaction, merge, promotion")
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// composed is a summary ready to store.
type composed struct {
	facts      Facts
	text       string
	summarizer string
	vector     []float32
}

// compose writes the summary text (LLM or extractive) and embeds it. An LLM failure falls
// back to the extractive summary (and is logged and counted): a model outage must not
// hold back the memory of finished work.
func (c *Consolidator) compose(ctx context.Context, f Facts) (composed, error) {
	s := c.summarizer()
	text, err := s.Summarize(ctx, f)
	name := s.Name()
	if err != nil {
		c.Metrics.summarizerFailed()
		if c.Log != nil {
			c.Log.Warn("consolidation: LLM summary failed; writing the extractive summary", "job", f.JobID, "err", err)
		}
		text, name = Extractive(f), "extractive"
	}
	vs, err := c.Embedder.Embed(ctx, []string{text})
	if err != nil {
		return composed{}, err
	}
	return composed{facts: f, text: text, summarizer: name, vector: vs[0]}, nil
}

// existingSummary returns the job memory already written for job, if any.
func existingSummary(ctx context.Context, q pg.DBTX, org, job string) (*uuid.UUID, error) {
	var id *uuid.UUID
	err := q.QueryRow(ctx, `SELECT summary_memory_id FROM job_consolidation WHERE org_id = $1 AND job_id = $2`, org, job).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return id, pg.Interpret(err)
}

// store writes the job memory, records it, and marks the outbox row processed, in tx
// (which holds the outbox row's lock when there is one).
func (c *Consolidator) store(ctx context.Context, tx pgx.Tx, org string, outboxID int64, cp composed) (semantic.Memory, error) {
	f := cp.facts
	seq := f.LastSeq
	prov := semantic.Provenance{KeyID: WorkerKey, AgentID: f.AgentID, JobID: f.JobID}
	if seq > 0 {
		prov.EventSeq = &seq
	}
	m, _, err := c.Semantic.Insert(ctx, tx, semantic.NewMemory{
		Scope: strata.Scope{OrgID: org, UserID: f.UserID}, Kind: semantic.KindJob, Text: cp.text,
		Metadata: metadata(f, cp.summarizer), Importance: 0.5, Trust: "consolidated", Provenance: prov,
		Vector: cp.vector, Space: c.space(),
	})
	if err != nil {
		return m, err
	}
	now := c.now()
	if _, err := tx.Exec(ctx, `INSERT INTO job_consolidation (org_id, job_id, summary_memory_id, summarizer, summarized_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org_id, job_id) DO UPDATE
		SET summary_memory_id = excluded.summary_memory_id, summarizer = excluded.summarizer, summarized_at = excluded.summarized_at`,
		org, f.JobID, m.ID, cp.summarizer, now); err != nil {
		return m, pg.Interpret(err)
	}
	if outboxID > 0 {
		if err := c.Jobs.MarkOutboxProcessed(ctx, tx, org, outboxID, now); err != nil {
			return m, err
		}
	}
	err = audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "worker", Action: "consolidate",
		EntityType: "memory", EntityID: m.ID.String(), Details: map[string]any{
			"task": TaskJobSummaries, "job_id": f.JobID, "summarizer": cp.summarizer, "outbox_id": outboxID}})
	return m, err
}

// SummarizeJob is the worker's path for one finished job: read the facts in one short
// transaction, write the summary (an LLM call may take seconds) and embed it outside any
// transaction, then in a second transaction claim the outbox row (waiting for a
// concurrent consumer), re-check, write the memory and mark the row processed. Running it
// twice, or on two workers at once, writes one memory.
func (c *Consolidator) SummarizeJob(ctx context.Context, org, job string) (ConsolidatedJob, error) {
	res := ConsolidatedJob{JobID: job}
	var facts Facts
	var done bool
	err := pg.InOrgTx(ctx, c.Pool, org, func(tx pgx.Tx) error {
		id, err := existingSummary(ctx, tx, org, job)
		if err != nil || id != nil {
			res.MemoryID, done = id, id != nil
			return err
		}
		if facts, err = c.gather(ctx, tx, org, job); err != nil {
			return err
		}
		if held, err := c.held(ctx, tx, org, facts.UserID); err != nil || held {
			return cmpErr(err, ErrDeferred)
		}
		return nil
	})
	if errors.Is(err, ErrDeferred) {
		res.Status = "restricted"
		return res, err
	}
	if err != nil {
		return c.failed(ctx, org, job, res, err)
	}
	if done {
		res.Status = "exists"
		return res, c.markDone(ctx, org, job)
	}
	cp, err := c.compose(ctx, facts)
	if err != nil {
		return c.failed(ctx, org, job, res, err)
	}
	err = pg.InOrgTx(ctx, c.Pool, org, func(tx pgx.Tx) error {
		row, ok, err := c.Jobs.ClaimOutbox(ctx, tx, org, job, jobs.OutboxKindConsolidate, false)
		if err != nil {
			return err
		}
		id, err := existingSummary(ctx, tx, org, job)
		if err != nil {
			return err
		}
		if id != nil {
			res.MemoryID, res.Status = id, "exists"
			if ok {
				return c.Jobs.MarkOutboxProcessed(ctx, tx, org, row.ID, c.now())
			}
			return nil
		}
		// Again, in the writing transaction: the subject may have been restricted (or its
		// erasure begun) while the model answered.
		if held, err := c.held(ctx, tx, org, facts.UserID); err != nil || held {
			return cmpErr(err, ErrDeferred)
		}
		m, err := c.store(ctx, tx, org, row.ID, cp)
		if err != nil {
			return err
		}
		res.MemoryID, res.Summarizer, res.Status = &m.ID, cp.summarizer, "written"
		return nil
	})
	if errors.Is(err, ErrDeferred) {
		res.Status = "restricted"
		return res, err
	}
	if err != nil {
		return c.failed(ctx, org, job, res, err)
	}
	if res.Status == "written" {
		c.Metrics.consolidated("job_summary", 1)
	}
	return res, nil
}

// markDone marks a job's outbox row processed when its memory already exists.
func (c *Consolidator) markDone(ctx context.Context, org, job string) error {
	return pg.InOrgTx(ctx, c.Pool, org, func(tx pgx.Tx) error {
		row, ok, err := c.Jobs.ClaimOutbox(ctx, tx, org, job, jobs.OutboxKindConsolidate, true)
		if err != nil || !ok {
			return err
		}
		return c.Jobs.MarkOutboxProcessed(ctx, tx, org, row.ID, c.now())
	})
}

// failed records a failed attempt on the outbox row (attempts, last_error) and returns err
// so that River retries with backoff.
func (c *Consolidator) failed(ctx context.Context, org, job string, res ConsolidatedJob, err error) (ConsolidatedJob, error) {
	res.Status, res.Error = "failed", err.Error()
	_ = pg.InOrgTx(context.WithoutCancel(ctx), c.Pool, org, func(tx pgx.Tx) error {
		return c.Jobs.RecordOutboxFailure(ctx, tx, org, job, jobs.OutboxKindConsolidate, err.Error())
	})
	return res, err
}

// summarizeTx is the on-demand path (POST /v1/admin/consolidation/run): everything in the
// caller's transaction; rows another consumer holds are skipped, not waited for.
func (c *Consolidator) summarizeTx(ctx context.Context, tx pgx.Tx, org string, rep *ConsolidationReport) error {
	rows, err := c.Jobs.PendingOutbox(ctx, tx, org, jobs.OutboxKindConsolidate, c.maxAttempts(), c.limit())
	if err != nil {
		return err
	}
	for _, r := range rows {
		res := ConsolidatedJob{JobID: r.JobID}
		// A savepoint per job: one job's failure does not undo the others.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return pg.Interpret(err)
		}
		err = func() error {
			row, ok, err := c.Jobs.ClaimOutbox(ctx, sp, org, r.JobID, jobs.OutboxKindConsolidate, true)
			if err != nil {
				return err
			}
			if !ok {
				res.Status = "skipped"
				return nil
			}
			id, err := existingSummary(ctx, sp, org, r.JobID)
			if err != nil {
				return err
			}
			if id != nil {
				res.MemoryID, res.Status = id, "exists"
				return c.Jobs.MarkOutboxProcessed(ctx, sp, org, row.ID, c.now())
			}
			f, err := c.gather(ctx, sp, org, r.JobID)
			if err != nil {
				return err
			}
			if held, err := c.held(ctx, sp, org, f.UserID); err != nil || held {
				return cmpErr(err, ErrDeferred)
			}
			cp, err := c.compose(ctx, f)
			if err != nil {
				return err
			}
			m, err := c.store(ctx, sp, org, row.ID, cp)
			if err != nil {
				return err
			}
			res.MemoryID, res.Summarizer, res.Status = &m.ID, cp.summarizer, "written"
			return nil
		}()
		if err != nil {
			_ = sp.Rollback(ctx)
			if errors.Is(err, strata.ErrUnavailable) || ctx.Err() != nil {
				return err
			}
			res.Status, res.Error = "failed", err.Error()
			if errors.Is(err, ErrDeferred) { // the row stays pending; nothing was sent or written
				res.Status, res.Error = "restricted", ""
			}
		} else if err := sp.Commit(ctx); err != nil {
			return pg.Interpret(err)
		}
		switch res.Status {
		case "written":
			rep.JobSummaries.Written++
		case "exists":
			rep.JobSummaries.Exists++
		case "skipped":
			rep.JobSummaries.Skipped++
		case "restricted":
			rep.JobSummaries.Restricted++
		case "failed":
			rep.JobSummaries.Failed++
		}
		if len(rep.JobSummaries.Items) < 20 {
			rep.JobSummaries.Items = append(rep.JobSummaries.Items, res)
		}
	}
	return nil
}

// RunTx runs tasks for org in tx (the on-demand path: the request's transaction) and
// returns the report. Metrics are counted by the returned function, to call after commit.
func (c *Consolidator) RunTx(ctx context.Context, tx pgx.Tx, org string, tasks []string) (ConsolidationReport, func(), error) {
	pol, err := policy.LoadEffective(ctx, tx, org, c.Defaults)
	if err != nil {
		return ConsolidationReport{}, func() {}, err
	}
	rep := newReport(org, c.now(), tasks)
	rep.PolicyVersion = pol.Version
	for _, t := range tasks {
		switch t {
		case TaskJobSummaries:
			err = c.summarizeTx(ctx, tx, org, &rep)
		case TaskCompaction:
			err = c.compact(ctx, tx, org, pol, &rep)
		case TaskMerge:
			err = c.merge(ctx, tx, org, pol, &rep)
		case TaskPromotion:
			err = c.promote(ctx, tx, org, pol, &rep)
		}
		if err != nil {
			return ConsolidationReport{}, func() {}, fmt.Errorf("consolidation %s: %w", t, err)
		}
	}
	return rep, func() { c.countReport(rep) }, nil
}

func (c *Consolidator) countReport(rep ConsolidationReport) {
	c.Metrics.consolidated("job_summary", rep.JobSummaries.Written)
	c.Metrics.consolidated("compacted_events", rep.Compaction.Events)
	c.Metrics.consolidated("merged", rep.Merge.Superseded)
	c.Metrics.consolidated("promoted", rep.Promotion.Promoted)
}

// RunOrg is the periodic path: compaction, merge and promotion for org, each in its own
// transaction (job summaries run as their own River jobs, from the outbox).
func (c *Consolidator) RunOrg(ctx context.Context, org string) (ConsolidationReport, error) {
	rep := newReport(org, c.now(), []string{TaskCompaction, TaskMerge, TaskPromotion})
	for _, t := range rep.Tasks {
		err := pg.InOrgTx(ctx, c.Pool, org, func(tx pgx.Tx) error {
			pol, err := policy.LoadEffective(ctx, tx, org, c.Defaults)
			if err != nil {
				return err
			}
			rep.PolicyVersion = pol.Version
			part := newReport(org, rep.At, nil)
			switch t {
			case TaskCompaction:
				err = c.compact(ctx, tx, org, pol, &part)
				rep.Compaction = part.Compaction
			case TaskMerge:
				err = c.merge(ctx, tx, org, pol, &part)
				rep.Merge = part.Merge
			case TaskPromotion:
				err = c.promote(ctx, tx, org, pol, &part)
				rep.Promotion = part.Promotion
			}
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("consolidation %s for %s: %w", t, org, err)
		}
	}
	c.countReport(rep)
	return rep, nil
}

// cmpErr is err, else def.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// anyHeld reports whether a subject of any of ms is restricted (or being erased).
func (c *Consolidator) anyHeld(ctx context.Context, db pg.DBTX, org string, ms []semantic.Memory) (bool, error) {
	seen := map[string]bool{}
	for _, m := range ms {
		if m.UserID == "" || seen[m.UserID] {
			continue
		}
		seen[m.UserID] = true
		if held, err := c.held(ctx, db, org, m.UserID); err != nil || held {
			return held, err
		}
	}
	return false, nil
}
