package gdpr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

// Deadline is how long a controller has to answer a data-subject request (Art. 12(3): one
// month; Strata records 30 days).
const Deadline = 30 * 24 * time.Hour

// MaxRounds bounds how often an erasure repeats its phases when verification still finds
// data (written for the subject while the erasure ran).
const MaxRounds = 3

// Phases are the erasure's steps, in order. River jobs go first so no queued work re-creates
// data behind the erasure; restrictions go last.
var Phases = []string{"river", "jobs", "episodic", "checkpoints", "assets", "graph", "semantic", "extraction", "summaries", "keyvalue", "working", "idempotency", "restrictions"}

// Engine runs erasures. Any number of engines (replicas) may run; an erasure's lease makes
// one of them work it at a time.
type Engine struct {
	Pool    *pgxpool.Pool
	Working *working.Store
	KV      *keyvalue.Store
	Pseudo  *audit.Pseudonymizer
	Log     *slog.Logger
	Batch   int           // rows per batch transaction (default 1000)
	Pause   time.Duration // between batches
	Lease   time.Duration // how long a worker's claim lasts without progress (default 30s)
	Now     func() time.Time
	// DropScopeIndexes drops the subject's semantic scope indexes (their definitions name
	// the user; semantic/scopeindex.go) once its memories are erased, and returns how many;
	// nil when the server builds none. It needs the tables' owner, which the request pool is not.
	DropScopeIndexes func(ctx context.Context, org, user string) (int, error)
}

// graph is the graph tier's store (it holds nothing but its clock).
func (e *Engine) graph() *graph.Store { return graph.NewStore(graph.Options{Now: e.now}) }

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC()
	}
	return time.Now().UTC()
}

func (e *Engine) batch() int {
	if e.Batch > 0 {
		return e.Batch
	}
	return 1000
}

func (e *Engine) lease() time.Duration {
	if e.Lease > 0 {
		return e.Lease
	}
	return 30 * time.Second
}

// ErrLeaseLost: another worker took the erasure over (this one was too slow or presumed
// dead); this worker stops without writing.
var ErrLeaseLost = errors.New("gdpr: the erasure's lease moved to another worker")

// LeaseHeldError: a live worker holds the erasure; retry after Until.
type LeaseHeldError struct{ Until time.Time }

func (e *LeaseHeldError) Error() string {
	return "gdpr: erasure is being worked until " + e.Until.String()
}

// BusyError: a phase must wait (a River job naming the subject is running).
type BusyError struct {
	Phase string
	Wait  time.Duration
}

func (e *BusyError) Error() string { return "gdpr: phase " + e.Phase + " must wait" }

type claim struct {
	org, id, owner, user string
	done                 []string
	rounds               int
}

// Run works erasure id of org to completion (or until ctx ends, the lease is lost, or a
// phase must wait). owner names this worker (stable across retries of one River job).
func (e *Engine) Run(ctx context.Context, org, id, owner string) error {
	c, err := e.claim(ctx, org, id, owner)
	if err != nil || c == nil {
		return err
	}
	for {
		for _, ph := range Phases {
			if slices.Contains(c.done, ph) {
				continue
			}
			if err := e.runPhase(ctx, c, ph); err != nil {
				e.recordError(ctx, c, err)
				return err
			}
			c.done = append(c.done, ph)
		}
		v, err := Verify(ctx, e.Pool, e.Working, org, c.user)
		if err != nil {
			e.recordError(ctx, c, err)
			return err
		}
		if v.Clean || c.rounds+1 >= MaxRounds {
			return e.complete(ctx, c, v)
		}
		// Something was written for the subject meanwhile: another round.
		if err := e.step(ctx, c, "", func(context.Context, pgx.Tx, func(func())) (map[string]int64, bool, error) { return nil, true, nil },
			func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE gdpr_erasures SET phases_done = '{}', rounds = rounds + 1 WHERE org_id = $1 AND id = $2`, org, id)
				return err
			}); err != nil {
			return err
		}
		c.done, c.rounds = nil, c.rounds+1
	}
}

func (e *Engine) claim(ctx context.Context, org, id, owner string) (*claim, error) {
	c := &claim{org: org, id: id, owner: owner}
	var user *string
	now := e.now()
	var found bool
	var status string
	var until *time.Time
	err := pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE gdpr_erasures SET status = 'running', started_at = coalesce(started_at, $3),
				lease_owner = $4, lease_until = $5, attempts = attempts + 1
			WHERE org_id = $1 AND id = $2 AND status IN ('pending', 'running')
			  AND (lease_until IS NULL OR lease_until < $3 OR lease_owner = $4)
			RETURNING user_id, phases_done, rounds`, org, id, now, owner, now.Add(e.lease())).Scan(&user, &c.done, &c.rounds)
		if err == nil {
			found = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT status, lease_until FROM gdpr_erasures WHERE org_id = $1 AND id = $2`, org, id).Scan(&status, &until)
		if errors.Is(err, pgx.ErrNoRows) {
			status = "missing"
			return nil
		}
		return err
	})
	if err != nil {
		return nil, pg.Interpret(err)
	}
	if found {
		if user == nil || *user == "" {
			return nil, fmt.Errorf("gdpr: erasure %s has no subject", id)
		}
		c.user = *user
		return c, nil
	}
	switch status {
	case "completed", "failed", "missing":
		return nil, nil // nothing to do
	}
	u := now.Add(time.Second)
	if until != nil {
		u = until.Add(time.Second)
	}
	return nil, &LeaseHeldError{Until: u}
}

// step runs one batch in its own transaction (a pg.Session; fn gets its AfterCommit for
// work that must wait for the commit, such as cache invalidation): it locks the erasure
// row, checks the lease, runs fn, adds fn's counts to the receipt, marks phase done when fn says so, extends the lease, and
// runs extra (if any) before committing.
func (e *Engine) step(ctx context.Context, c *claim, phase string, fn func(context.Context, pgx.Tx, func(func())) (map[string]int64, bool, error), extra func(pgx.Tx) error) error {
	sess := pg.NewSession(e.Pool, c.org)
	defer sess.Rollback(ctx)
	tx, err := sess.Tx(ctx)
	if err != nil {
		return err
	}
	// Batches are small, but a few steps erase a tier's rows of the subject in one statement
	// (working turns, key-value history): allow them more than the pool's per-statement limit.
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '15min'`); err != nil {
		return pg.Interpret(err)
	}
	var owner *string
	var progress []byte
	if err := tx.QueryRow(ctx, `SELECT lease_owner, progress FROM gdpr_erasures WHERE org_id = $1 AND id = $2 FOR UPDATE`,
		c.org, c.id).Scan(&owner, &progress); err != nil {
		return pg.Interpret(err)
	}
	if owner == nil || *owner != c.owner {
		return ErrLeaseLost
	}
	counts, done, err := fn(ctx, tx, sess.AfterCommit)
	if err != nil {
		return err
	}
	p := map[string]int64{}
	if err := json.Unmarshal(progress, &p); err != nil {
		return fmt.Errorf("gdpr: decoding progress: %w", err)
	}
	for k, v := range counts {
		p[k] += v
	}
	pj, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE gdpr_erasures SET progress = $3, lease_until = $4, last_error = NULL,
			phases_done = CASE WHEN $5 <> '' AND NOT ($5 = ANY(phases_done)) THEN array_append(phases_done, $5) ELSE phases_done END
		WHERE org_id = $1 AND id = $2`, c.org, c.id, pj, e.now().Add(e.lease()), map[bool]string{true: phase, false: ""}[done]); err != nil {
		return pg.Interpret(err)
	}
	if extra != nil {
		if err := extra(tx); err != nil {
			return pg.Interpret(err)
		}
	}
	return sess.Commit(ctx)
}

// loop repeats a batch function until it reports done, pausing between batches.
func (e *Engine) loop(ctx context.Context, c *claim, phase string, fn func(context.Context, pgx.Tx, func(func())) (map[string]int64, bool, error)) error {
	for {
		var finished bool
		err := e.step(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			m, done, err := fn(ctx, tx, afterCommit)
			finished = done
			return m, done, err
		}, nil)
		if err != nil {
			return err
		}
		if finished {
			return nil
		}
		if e.Pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(e.Pause):
			}
		}
	}
}

func (e *Engine) runPhase(ctx context.Context, c *claim, phase string) error {
	org, user, n := c.org, c.user, e.batch()
	switch phase {
	case "river":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			removed, running, err := eraseRiverJobs(ctx, tx, org, user, n)
			if err != nil {
				return nil, false, err
			}
			if running > 0 && removed < int64(n) {
				return nil, false, &BusyError{Phase: phase, Wait: 10 * time.Second}
			}
			return map[string]int64{"river.jobs": removed}, removed < int64(n), nil
		})
	case "jobs":
		// One job at a time, forks before their parents; each job's log in batches, then
		// the job row with everything hanging off it and the stored responses of its routes.
		for {
			var tree []string
			if err := pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
				var err error
				tree, err = subjectJobTree(ctx, tx, org, user)
				return err
			}); err != nil {
				return err
			}
			if len(tree) == 0 {
				return e.step(ctx, c, phase, func(context.Context, pgx.Tx, func(func())) (map[string]int64, bool, error) { return nil, true, nil }, nil)
			}
			job := tree[0]
			err := e.loop(ctx, c, "", func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
				evs, logDone, err := episodic.DeleteJobLogBatch(ctx, tx, org, job, n)
				if err != nil {
					return nil, false, err
				}
				m := map[string]int64{"episodic.events_deleted": evs}
				if !logDone {
					return m, false, nil
				}
				je, err := jobs.DeleteJob(ctx, tx, org, job)
				if err != nil {
					return nil, false, err
				}
				idem, err := idempotency.ErasePathPrefixes(ctx, tx, org, []string{"/v1/jobs/" + job})
				if err != nil {
					return nil, false, err
				}
				m["jobs.jobs"], m["jobs.checkpoints"], m["jobs.steps"], m["jobs.attempts"], m["jobs.handoffs"], m["jobs.outbox"], m["jobs.langgraph"] =
					je.Jobs, je.Checkpoints, je.Steps, je.Attempts, je.Handoffs, je.Outbox, je.LangGraph
				m["idempotency.records"] = idem
				return m, true, nil
			})
			if err != nil {
				return err
			}
		}
	case "episodic":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := episodic.RedactUserEventsBatch(ctx, tx, org, user, n)
			return map[string]int64{"episodic.events_redacted": k}, k < int64(n), err
		})
	case "checkpoints":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			cp, ob, lg, err := jobs.RedactUserCheckpoints(ctx, tx, org, user)
			return map[string]int64{"jobs.checkpoints_redacted": cp, "jobs.outbox": ob, "jobs.langgraph": lg}, true, err
		})
	case "assets":
		if err := e.loop(ctx, c, "", func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			ids, versions, err := episodic.DeleteUserAssetsBatch(ctx, tx, org, user, n)
			if err != nil {
				return nil, false, err
			}
			prefixes := make([]string, len(ids))
			for i, id := range ids {
				prefixes[i] = "/v1/assets/" + id
			}
			idem, err := idempotency.ErasePathPrefixes(ctx, tx, org, prefixes)
			return map[string]int64{"assets.assets": int64(len(ids)), "assets.versions": versions, "idempotency.records": idem},
				len(ids) < n, err
		}); err != nil {
			return err
		}
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := episodic.RedactUserAssetVersions(ctx, tx, org, user)
			return map[string]int64{"assets.versions_redacted": k}, true, err
		})
	case "graph":
		// Before semantic: the subject's entities and relations, and every relation that
		// names one of their entities, in batches (graph memory is derived from their memories).
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			d, done, err := e.graph().EraseUserBatch(ctx, tx, org, user, n)
			return map[string]int64{"graph.entities": d.Entities, "graph.relations": d.Relations}, done, err
		})
	case "semantic":
		if err := e.loop(ctx, c, "", func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			me, err := semantic.EraseUserMemoriesBatch(ctx, tx, org, user, n)
			return map[string]int64{"semantic.memories": me.Memories, "semantic.versions": me.Versions,
				"semantic.retrievals": me.Retrievals, "idempotency.records": me.Idempotency}, me.Memories < int64(n), err
		}); err != nil {
			return err
		}
		var indexes int
		if e.DropScopeIndexes != nil {
			var err error
			if indexes, err = e.DropScopeIndexes(ctx, org, user); err != nil {
				return fmt.Errorf("dropping the subject's scope indexes: %w", err)
			}
		}
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := semantic.EraseUserRetrievals(ctx, tx, org, user, n)
			counts := map[string]int64{"semantic.retrievals": k}
			if indexes > 0 {
				counts["semantic.scope_indexes"], indexes = int64(indexes), 0
			}
			return counts, k < int64(n), err
		})
	case "extraction":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			x, err := extraction.EraseUser(ctx, tx, org, user)
			return map[string]int64{"extraction.states": x.States, "extraction.provenance": x.Provenance}, true, err
		})
	case "summaries":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := summaries.EraseUser(ctx, tx, org, user)
			return map[string]int64{"summaries.versions": k}, true, err
		})
	case "keyvalue":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := e.KV.EraseUser(ctx, tx, afterCommit, org, user)
			return map[string]int64{"keyvalue.entries": k.Entries, "keyvalue.versions": k.Versions}, true, err
		})
	case "working":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			sessions, err := e.Working.SessionsOfUser(ctx, tx, org, user)
			if err != nil {
				return nil, false, err
			}
			prefixes := make([]string, len(sessions))
			for i, s := range sessions {
				prefixes[i] = "/v1/sessions/" + s
			}
			idem, err := idempotency.ErasePathPrefixes(ctx, tx, org, prefixes)
			if err != nil {
				return nil, false, err
			}
			w, err := e.Working.EraseUser(ctx, tx, org, user)
			return map[string]int64{"working.sessions": int64(w.Sessions), "working.redis_keys": w.RedisKeys,
				"working.states": w.States, "working.turns": w.Turns, "idempotency.records": idem}, true, err
		})
	case "idempotency":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			k, err := idempotency.EraseSubject(ctx, tx, org, user)
			return map[string]int64{"idempotency.records": k}, true, err
		})
	case "restrictions":
		return e.loop(ctx, c, phase, func(ctx context.Context, tx pgx.Tx, afterCommit func(func())) (map[string]int64, bool, error) {
			tag, err := tx.Exec(ctx, `DELETE FROM gdpr_restrictions WHERE org_id = $1 AND user_id = $2`, org, user)
			return map[string]int64{"gdpr.restrictions": tag.RowsAffected()}, true, pg.Interpret(err)
		})
	}
	return fmt.Errorf("gdpr: unknown phase %q", phase)
}

// complete records the verification, clears the raw subject id and audits the erasure.
func (e *Engine) complete(ctx context.Context, c *claim, v Verification) error {
	vj, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.step(ctx, c, "", func(context.Context, pgx.Tx, func(func())) (map[string]int64, bool, error) { return nil, false, nil },
		func(tx pgx.Tx) error {
			now := e.now()
			var progress []byte
			if err := tx.QueryRow(ctx, `UPDATE gdpr_erasures SET status = 'completed', finished_at = $3, verification = $4,
					user_id = NULL, lease_owner = NULL, lease_until = NULL
				WHERE org_id = $1 AND id = $2 RETURNING progress`, c.org, c.id, now, vj).Scan(&progress); err != nil {
				return err
			}
			var counts map[string]int64
			_ = json.Unmarshal(progress, &counts)
			if err := outbox.Emit(ctx, tx, c.org, outbox.New{Type: outbox.ErasureCompleted, DedupeKey: "erasure.completed:" + c.id,
				Data: map[string]any{"erasure_id": c.id, "subject": e.Pseudo.Subject(c.org, c.user), "verified_clean": v.Clean}}); err != nil {
				return err
			}
			return audit.Append(ctx, tx, audit.Entry{OrgID: c.org, ActorKeyID: "worker:gdpr", ActorRole: "system",
				Action: "erasure-completed", EntityType: "gdpr.erasure", EntityID: c.id,
				Subject: e.Pseudo.Subject(c.org, c.user),
				Details: map[string]any{"counts": counts, "verified_clean": v.Clean, "rounds": c.rounds + 1}})
		})
}

func (e *Engine) recordError(ctx context.Context, c *claim, err error) {
	var busy *BusyError
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, context.Canceled) || errors.As(err, &busy) {
		return
	}
	msg := err.Error()
	if len(msg) > 500 {
		msg = msg[:500]
	}
	_ = pg.InOrgTx(context.WithoutCancel(ctx), e.Pool, c.org, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE gdpr_erasures SET last_error = $3 WHERE org_id = $1 AND id = $2 AND lease_owner = $4`,
			c.org, c.id, msg, c.owner)
		return err
	})
}

// subjectJobTree returns the subject's jobs and every fork descending from them (a fork's
// view is built from its parent's checkpoints and events), deepest first, so deleting in
// this order never leaves a fork pointing at a deleted parent.
func subjectJobTree(ctx context.Context, q pg.DBTX, org, user string) ([]string, error) {
	rows, err := q.Query(ctx, `WITH RECURSIVE links AS (
			SELECT job_id, parent_job_id FROM jobs WHERE org_id = $1 AND parent_job_id IS NOT NULL
			UNION SELECT job_id, parent_job_id FROM episodic_jobs WHERE org_id = $1 AND parent_job_id IS NOT NULL),
		t(job_id, depth) AS (
			SELECT job_id, 0 FROM jobs WHERE org_id = $1 AND user_id = $2
			UNION SELECT l.job_id, t.depth + 1 FROM t JOIN links l ON l.parent_job_id = t.job_id WHERE t.depth < 64)
		SELECT job_id FROM t GROUP BY job_id ORDER BY max(depth) DESC, job_id`, org, user)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// eraseRiverJobs deletes up to limit River jobs (any state but running) whose arguments name
// the subject — the user id and the org both appear as JSON string values somewhere in the
// args — other than the erasure's own (whose args carry only ids). running counts the ones
// still executing, which the erasure waits for.
func eraseRiverJobs(ctx context.Context, tx pgx.Tx, org, user string, limit int) (removed, running int64, err error) {
	const match = `kind NOT LIKE 'gdpr\_%'
		AND jsonb_path_exists(args, '$.** ? (@ == $u)', jsonb_build_object('u', $2::text))
		AND jsonb_path_exists(args, '$.** ? (@ == $o)', jsonb_build_object('o', $1::text))`
	// A rolling summary and a session's extraction re-check the subject under its lock in
	// each writing transaction (HeldOn), so a running one is not waited for — it may be the
	// orphan of a killed server, running only in River's table until its rescue an hour
	// later — and its row goes now.
	tag, err := tx.Exec(ctx, `DELETE FROM river_job WHERE id IN (
			SELECT id FROM river_job WHERE (state <> 'running' OR kind IN ('rolling_summary', 'extract_session')) AND `+match+`
			LIMIT $3)`, org, user, limit)
	if err != nil {
		return 0, 0, pg.Interpret(err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'running'
		AND kind NOT IN ('rolling_summary', 'extract_session') AND `+match, org, user).Scan(&running); err != nil {
		return tag.RowsAffected(), 0, pg.Interpret(err)
	}
	return tag.RowsAffected(), running, nil
}
