package consolidation

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
)

// Run is a run of consecutive superseded events of one job.
type Run struct {
	From, To int64
	Ops      map[string]int
}

// Events is the run's length.
func (r Run) Events() int {
	n := 0
	for _, c := range r.Ops {
		n += c
	}
	return n
}

// SupersededRuns finds the runs of at least minRun consecutive superseded events in a
// job's own events (seq order). An event is superseded when a revert points at it, when a
// later edit of the same op that was not reverted replaced it, or when it is itself a
// revert (bookkeeping of an undone edit). The settled edit of each op (its last one not
// reverted) and compaction summaries never are.
func SupersededRuns(evs []episodic.Brief, minRun int) []Run {
	reverted := map[int64]bool{}
	for _, e := range evs {
		if e.Op == episodic.OpRevert && e.RevertsSeq > 0 {
			reverted[e.RevertsSeq] = true
		}
	}
	lastLive := map[string]int64{}
	for _, e := range evs {
		if e.Op != episodic.OpRevert && e.Op != episodic.OpCompaction && !reverted[e.Seq] {
			lastLive[e.Op] = e.Seq
		}
	}
	superseded := func(e episodic.Brief) bool {
		switch {
		case e.Op == episodic.OpCompaction:
			return false
		case e.Op == episodic.OpRevert:
			return true
		case reverted[e.Seq]:
			return true
		default:
			return lastLive[e.Op] != e.Seq
		}
	}
	var runs []Run
	var cur *Run
	var prev int64
	flush := func() {
		if cur != nil && cur.Events() >= minRun {
			runs = append(runs, *cur)
		}
		cur = nil
	}
	for _, e := range evs {
		if !superseded(e) || (cur != nil && e.Seq != prev+1) {
			flush()
		}
		if superseded(e) {
			if cur == nil {
				cur = &Run{From: e.Seq, Ops: map[string]int{}}
			}
			cur.To = e.Seq
			cur.Ops[e.Op]++
		}
		prev = e.Seq
	}
	flush()
	return runs
}

func describeRun(r Run) string {
	ops := make([]string, 0, len(r.Ops))
	for op := range r.Ops {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = fmt.Sprintf("%s ×%d", op, r.Ops[op])
	}
	return fmt.Sprintf("Compacted events %d–%d: %d superseded edits (%s). They were reverted or replaced by a later "+
		"edit of the same op; the settled values are in later events. Read them with ?raw=true.",
		r.From, r.To, r.Events(), strings.Join(parts, ", "))
}

// compact examines finished jobs older than the policy's compact_after that were not
// examined yet: each run of superseded edits long enough gets a summary event (op
// strata.compaction), and the default read view of the job shows that event instead of
// the run. Raw events stay until retention removes the log. Jobs of restricted data
// subjects (GDPR Art. 18) are left unexamined until the restriction is lifted.
func (c *Consolidator) compact(ctx context.Context, tx pgx.Tx, org string, pol policy.Effective, rep *ConsolidationReport) error {
	if pol.CompactAfter <= 0 {
		return nil
	}
	now := c.now()
	rows, err := tx.Query(ctx, `SELECT j.job_id FROM jobs j
		LEFT JOIN job_consolidation c ON c.org_id = j.org_id AND c.job_id = j.job_id
		WHERE j.org_id = $1 AND j.status <> 'running' AND j.finished_at < $2 AND c.compacted_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = j.org_id AND r.user_id = j.user_id)
		ORDER BY j.finished_at, j.job_id LIMIT $3`, org, now.Add(-pol.CompactAfter), c.limit())
	if err != nil {
		return pg.Interpret(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return pg.Interpret(err)
	}
	for _, job := range ids {
		briefs, err := c.Episodic.OwnBriefs(ctx, tx, org, job)
		if err != nil {
			return err
		}
		runs := SupersededRuns(briefs, pol.CompactMinRun)
		hidden := 0
		for _, r := range runs {
			params, _ := json.Marshal(map[string]any{"from_seq": r.From, "to_seq": r.To, "events": r.Events(), "ops": r.Ops})
			result, _ := json.Marshal(map[string]any{"summary": describeRun(r)})
			evs, err := c.Episodic.Append(ctx, tx, org, job, []episodic.EventInput{{
				Op: episodic.OpCompaction, Params: params, Result: result, AgentID: "strata.consolidation",
				IdempotencyKey: fmt.Sprintf("strata.compaction:%d-%d", r.From, r.To),
			}})
			if err != nil {
				return err
			}
			if err := c.Episodic.AddCompaction(ctx, tx, org, job, episodic.Compaction{FromSeq: r.From, ToSeq: r.To,
				SummarySeq: evs[0].Seq, Events: r.Events()}, now); err != nil {
				return err
			}
			hidden += r.Events()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO job_consolidation (org_id, job_id, compacted_at, compacted_runs, compacted_events)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (org_id, job_id) DO UPDATE
			SET compacted_at = excluded.compacted_at, compacted_runs = excluded.compacted_runs,
			    compacted_events = excluded.compacted_events`, org, job, now, len(runs), hidden); err != nil {
			return pg.Interpret(err)
		}
		rep.Compaction.Jobs++
		if len(runs) == 0 {
			continue
		}
		rep.Compaction.Runs += len(runs)
		rep.Compaction.Events += hidden
		if len(rep.Compaction.JobIDs) < 20 {
			rep.Compaction.JobIDs = append(rep.Compaction.JobIDs, job)
		}
		if err := audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "worker", Action: "consolidate",
			EntityType: "job", EntityID: job, Details: map[string]any{"task": TaskCompaction, "runs": len(runs), "events": hidden}}); err != nil {
			return err
		}
	}
	return nil
}
