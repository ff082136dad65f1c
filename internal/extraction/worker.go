package extraction

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/tracecause"
)

// BatchTurns is how many turns one model call reads.
const BatchTurns = 40

// SessionArgs extracts one session's waiting turns. The args name the org, session and
// user, so an erasure of the user deletes the queued job with them.
type SessionArgs struct {
	Org     string `json:"org"`
	Session string `json:"session"`
	UserID  string `json:"user_id,omitempty"`
}

// Kind names the job.
func (SessionArgs) Kind() string { return "extract_session" }

// InsertOpts: one job per session waiting or running; a failure is not retried by River
// (the dispatcher offers the session again after its retry_after).
func (SessionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
}

// DispatchArgs is the periodic (leader-elected) job that queues a SessionArgs for every
// session whose turns have waited long enough.
type DispatchArgs struct{}

// Kind names the job.
func (DispatchArgs) Kind() string { return "extraction_dispatch" }

// InsertOpts keeps one waiting at a time.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Second}}
}

// DueSession is a session Due offers, with the trace context of the request whose turn last
// made it pending.
type DueSession struct {
	SessionArgs
	TraceParent string // W3C traceparent; "" when that request was not traced
}

// Due lists org's sessions to extract now: turns waiting, quiet for the debounce or at least
// every_turns of them, not backed off.
func Due(ctx context.Context, tx pgx.Tx, org string, rules policy.Extraction, now time.Time, limit int) ([]DueSession, error) {
	n := rules.EveryTurns
	if n <= 0 {
		n = 1 << 30
	}
	rows, err := tx.Query(ctx, `SELECT session_id, coalesce(user_id, ''), coalesce(trace_parent, '') FROM extraction_state
		WHERE org_id = $1 AND pending_seq > extracted_seq AND (retry_after IS NULL OR retry_after <= $2)
		  AND (last_turn_at <= $3 OR pending_seq - extracted_seq >= $4)
		ORDER BY last_turn_at LIMIT $5`, org, now, now.Add(-rules.Debounce), n, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueSession, error) {
		a := DueSession{SessionArgs: SessionArgs{Org: org}}
		return a, r.Scan(&a.Session, &a.UserID, &a.TraceParent)
	})
	return out, pg.Interpret(err)
}

// DispatchWorker offers every org's due sessions to the session workers.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	Extractor *Extractor
	ExtraOrg  string
}

// Work dispatches.
func (w *DispatchWorker) Work(ctx context.Context, _ *river.Job[DispatchArgs]) error {
	x := w.Extractor
	orgs, err := queue.Orgs(ctx, x.Pool, w.ExtraOrg)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	for _, org := range orgs {
		if err := pg.InOrgTx(ctx, x.Pool, org, func(tx pgx.Tx) error {
			eff, err := policy.LoadEffective(ctx, tx, org, x.Defaults)
			if err != nil || !eff.Extraction.Enabled {
				return err
			}
			due, err := Due(ctx, tx, org, eff.Extraction, x.now(), 500)
			if err != nil || len(due) == 0 {
				return err
			}
			params := make([]river.InsertManyParams, len(due))
			for i, a := range due {
				params[i] = river.InsertManyParams{Args: a.SessionArgs}
				if md := tracecause.JobMetadata(a.TraceParent); md != nil {
					// The job's span links to the request whose turn made the session due.
					params[i].InsertOpts = &river.InsertOpts{Metadata: md}
				}
			}
			_, err = client.InsertManyTx(ctx, tx, params)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// SessionWorker extracts one session.
type SessionWorker struct {
	river.WorkerDefaults[SessionArgs]
	Extractor *Extractor
	// Done, when set, is called after each run (tests wait on it).
	Done func(SessionArgs, RunResult, error)
}

// Timeout leaves room for several model calls.
func (w *SessionWorker) Timeout(*river.Job[SessionArgs]) time.Duration { return 10 * time.Minute }

// Work runs the extraction.
func (w *SessionWorker) Work(ctx context.Context, job *river.Job[SessionArgs]) error {
	res, err := w.Extractor.RunSession(ctx, job.Args.Org, job.Args.Session)
	if w.Done != nil {
		w.Done(job.Args, res, err)
	}
	return err
}

// RunResult is what one RunSession did.
type RunResult struct {
	Status  string `json:"status" enum:"extracted,nothing,disabled,failed,restricted,rate_limited,gone"`
	Batches int    `json:"batches"`
	Turns   int    `json:"turns"`
	Counts  map[string]int
	Usage   Usage
}

var errStale = errors.New("extraction: the session's cursor moved while the model answered")

// RunSession extracts every waiting turn of the session in batches of BatchTurns, each
// batch's decisions and the cursor in one transaction. Failures are recorded on the
// session (status, last_error, failures, retry_after), audited and counted; the turns stay
// waiting. A restricted subject or a used-up hourly limit is not an error: the session is
// backed off.
func (x *Extractor) RunSession(ctx context.Context, org, session string) (RunResult, error) {
	res := RunResult{Counts: map[string]int{}}
	for batch := 0; batch < 25; batch++ {
		r, done, err := x.runBatch(ctx, org, session)
		if errors.Is(err, errStale) {
			x.Metrics.run("stale")
			continue
		}
		if r.Status != "" {
			res.Status = r.Status
		}
		res.Usage.Calls += r.Usage.Calls
		res.Usage.PromptTokens += r.Usage.PromptTokens
		res.Usage.CompletionTokens += r.Usage.CompletionTokens
		if err != nil {
			return res, err
		}
		if r.Status == "extracted" {
			res.Batches++
			res.Turns += r.Turns
			for k, v := range r.Counts {
				res.Counts[k] += v
			}
		}
		if done {
			break
		}
	}
	if res.Status == "" {
		res.Status = "nothing"
	}
	return res, nil
}

func (x *Extractor) runBatch(ctx context.Context, org, session string) (res RunResult, done bool, err error) {
	now := x.now()
	var st SessionExtraction
	var req Request
	var rules policy.Extraction
	err = pg.InOrgTx(ctx, x.Pool, org, func(tx pgx.Tx) error {
		si, err := x.Working.Session(ctx, tx, org, session, false)
		if err != nil {
			return err
		}
		eff, err := policy.LoadEffective(ctx, tx, org, x.Defaults)
		if err != nil {
			return err
		}
		rules = eff.Extraction
		if st, err = ensureState(ctx, tx, org, session, si.UserID, si.AgentID, now); err != nil {
			return err
		}
		turns, err := x.Working.TurnsAfter(ctx, tx, org, session, st.ExtractedSeq, BatchTurns)
		if err != nil {
			return err
		}
		req = Request{Org: org, UserID: si.UserID, AgentID: si.AgentID, SessionID: session, Model: rules.Model}
		for _, t := range turns {
			req.Turns = append(req.Turns, Turn{Seq: t.Seq, Role: t.Role, Content: t.Content, WrittenBy: t.WrittenBy})
		}
		return nil
	})
	if errors.Is(err, strata.ErrNotFound) {
		return RunResult{Status: "gone"}, true, nil
	}
	if err != nil {
		return res, true, err
	}
	if !rules.Enabled {
		return RunResult{Status: "disabled"}, true, nil
	}
	if len(req.Turns) == 0 {
		return RunResult{}, true, nil
	}
	var dec Decisions
	err = pg.InOrgTx(ctx, x.Pool, org, func(tx pgx.Tx) error {
		var err error
		dec, err = x.Extract(ctx, tx, req)
		return err
	})
	res.Usage = dec.Usage
	var rl *RateLimitedError
	switch {
	case errors.Is(err, strata.ErrRestricted):
		x.setStatus(ctx, org, session, "restricted", "", false, now.Add(time.Minute))
		x.Metrics.run("restricted")
		return RunResult{Status: "restricted"}, true, nil
	case errors.As(err, &rl):
		x.setStatus(ctx, org, session, "rate_limited", rl.Error(), false, now.Add(rl.Wait))
		x.Metrics.run("rate_limited")
		return RunResult{Status: "rate_limited", Usage: dec.Usage}, true, nil
	case err != nil:
		x.fail(ctx, org, session, st, req, dec, err)
		res.Status = "failed"
		return res, true, err
	}
	last := req.Turns[len(req.Turns)-1].Seq
	var hooks []func()
	err = pg.InOrgTx(ctx, x.Pool, org, func(tx pgx.Tx) error {
		cur, err := ensureState(ctx, tx, org, session, req.UserID, req.AgentID, now)
		if err != nil {
			return err
		}
		if cur.ExtractedSeq != st.ExtractedSeq {
			return errStale
		}
		// Again, in the writing transaction: the subject may have been restricted, or its
		// erasure begun, while the model answered (app passes gdpr's HeldOn, which also
		// takes the subject's lock, so an erasure created later waits for this commit).
		if x.Restricted != nil && req.UserID != "" {
			held, err := x.Restricted(ctx, tx, org, req.UserID)
			if err != nil {
				return err
			}
			if held {
				return strata.ErrRestricted
			}
		}
		if err := x.applyPaused(ctx, tx, func(f func()) { hooks = append(hooks, f) }, req, &dec); err != nil {
			return err
		}
		if err := advance(ctx, tx, org, session, last, x.now()); err != nil {
			return err
		}
		return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "system", AgentID: req.AgentID,
			Action: "extract-memories", EntityType: "session", EntityID: session, Status: 200,
			Details: map[string]any{"turns": len(req.Turns), "from_seq": req.Turns[0].Seq, "to_seq": last,
				"decisions": dec.Counts(), "entities": len(dec.Entities), "relations": len(dec.Relations),
				"model": dec.Model, "prompt_version": dec.PromptVersion,
				"llm_calls": dec.Usage.Calls, "tokens": dec.Usage.Tokens()}})
	})
	if errors.Is(err, errStale) {
		return res, false, err
	}
	if errors.Is(err, strata.ErrRestricted) { // nothing applied; the turns stay queued
		x.setStatus(ctx, org, session, "restricted", "", false, now.Add(time.Minute))
		x.Metrics.run("restricted")
		return RunResult{Status: "restricted"}, true, nil
	}
	if err != nil {
		x.fail(ctx, org, session, st, req, dec, err)
		res.Status = "failed"
		return res, true, err
	}
	for _, h := range hooks {
		h()
	}
	x.Metrics.run("extracted")
	res.Status, res.Turns, res.Counts = "extracted", len(req.Turns), dec.Counts()
	return res, len(req.Turns) < BatchTurns, nil
}

// applyPaused is Apply, with STRATA_EXTRACTION_APPLY_PAUSE between decisions when set.
func (x *Extractor) applyPaused(ctx context.Context, tx pgx.Tx, ac AfterCommit, req Request, dec *Decisions) error {
	if x.ApplyPause <= 0 || len(dec.Decisions) < 2 {
		return x.Apply(ctx, tx, ac, req, dec)
	}
	all := dec.Decisions
	for i := range all {
		one := *dec
		one.Decisions = all[i : i+1]
		if err := x.applyDecisions(ctx, tx, ac, req, &one); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(x.ApplyPause): // kept: the crash test's window inside one apply transaction
		}
	}
	if err := x.applyGraph(ctx, tx, req, dec); err != nil {
		return err
	}
	dec.Applied = true
	x.Metrics.decided(*dec)
	return nil
}

// FailedKey is the dedupe key of the extraction.failed event of the attempt that read st: one
// event per session, successful runs and failure count, so two replicas (or a redelivered job)
// failing the same attempt emit once, while the first failure after a later success — when
// failures is back at 0 — is an attempt of its own. The session id comes first and the two
// counts last, so no two sessions' keys collide whatever their ids contain.
func FailedKey(session string, st SessionExtraction) string {
	return fmt.Sprintf("extraction.failed:%s:%d:%d", session, st.Runs, st.Failures+1)
}

// fail records a failed run: status, backoff, metric and an audit entry (counts, no content).
func (x *Extractor) fail(ctx context.Context, org, session string, st SessionExtraction, req Request, dec Decisions, err error) {
	backoff := time.Duration(1<<min(st.Failures, 10)) * 5 * time.Second
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300]
	}
	x.setStatus(ctx, org, session, "failed", msg, true, x.now().Add(backoff))
	x.Metrics.run("failed")
	x.Log.WarnContext(ctx, "extraction failed; the turns stay queued", "org", org, "turns", len(req.Turns),
		"llm_calls", dec.Usage.Calls, "err", msg)
	aerr := pg.InOrgTx(context.WithoutCancel(ctx), x.Pool, org, func(tx pgx.Tx) error {
		if eerr := outbox.Emit(ctx, tx, org, outbox.New{Type: outbox.ExtractionFailed, DedupeKey: FailedKey(session, st),
			Data: map[string]any{"session_id": session, "agent_id": req.AgentID, "failures": st.Failures + 1,
				"malformed": errors.Is(err, ErrMalformed)}}); eerr != nil {
			return eerr
		}
		return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: WorkerKey, ActorRole: "system", AgentID: req.AgentID,
			Action: "extract-memories-failed", EntityType: "session", EntityID: session, Status: 500,
			Details: map[string]any{"turns": len(req.Turns), "llm_calls": dec.Usage.Calls, "tokens": dec.Usage.Tokens(),
				"malformed": errors.Is(err, ErrMalformed), "failures": st.Failures + 1}})
	})
	if aerr != nil {
		x.Log.WarnContext(ctx, "extraction: auditing a failure", "org", org, "err", fmt.Sprint(aerr))
	}
}
