package consolidation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tiktoken-go/tokenizer"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

// Rolling summaries (docs/summaries.md): when a session's turn buffer spills past its
// window, the spilled turns are folded into the session's summary; when a job's log grows
// past its newest KeepEvents events, the older events are folded into the job's summary.
// Each fold is a new version of the summary (internal/summaries) naming the seqs it covers.
// It runs on River (RollingDispatchArgs finds the subjects due, RollingArgs folds one),
// never inside a request.

// Rolling writes rolling summaries. Pool, Working, Episodic and Jobs are required.
type Rolling struct {
	Pool     *pgxpool.Pool
	Working  *working.Store
	Episodic *episodic.Store
	Jobs     *jobs.Store
	// LLM writes the summaries when set (the server's STRATA_LLM_MODEL); nil: extractive.
	// Its calls count against the org's hourly LLM limits (the extraction policy's, whose
	// defaults are Defaults), shared with extraction; past them the summary is extractive.
	LLM      *RollingLLM
	Defaults policy.LifecyclePolicy
	// Restricted reports a GDPR Art. 18 restriction (app passes gdpr's HeldOn, which also
	// answers true while an erasure of the subject is pending or running, under the
	// subject's lock; it is asked again in each write's transaction): nothing of such a subject is
	// summarised.
	Restricted func(ctx context.Context, db pg.DBTX, org, user string) (bool, error)
	// Every: a subject is offered for a new version once this many seqs wait [20].
	Every int
	// KeepEvents: a job's newest events stay out of its summary (the context shows them)
	// [50; negative: none].
	KeepEvents int
	// Tokens is a summary's budget [400].
	Tokens int
	// Batch bounds the turns or events one version folds in [200]; a longer backlog
	// becomes several versions in one run.
	Batch   int
	Now     func() time.Time
	Log     *slog.Logger
	Metrics *RollingMetrics
}

// RollingWorkerKey is the actor of summary writes in the audit log.
const RollingWorkerKey = "worker:summaries"

func (r *Rolling) every() int64 { return int64(cmpPos(r.Every, 20)) }
func (r *Rolling) keep() int64 {
	if r.KeepEvents < 0 { // none kept
		return 0
	}
	return int64(cmpPos(r.KeepEvents, 50))
}
func (r *Rolling) tokens() int { return cmpPos(r.Tokens, 400) }
func (r *Rolling) batch() int  { return cmpPos(r.Batch, 200) }
func (r *Rolling) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}
func (r *Rolling) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

func cmpPos(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

var (
	cl100k    tokenizer.Codec
	cl100kErr error
)

func init() { cl100k, cl100kErr = tokenizer.Get(tokenizer.Cl100kBase) }

// CountTokens counts s with cl100k_base (the summaries' own token counts; /v1/context
// counts again with the request's model).
func CountTokens(s string) int {
	if cl100kErr != nil {
		return (len(s) + 3) / 4
	}
	n, err := cl100k.Count(s)
	if err != nil {
		return (len(s) + 3) / 4
	}
	return n
}

// RollingResult is what one run did.
type RollingResult struct {
	Status   string             `json:"status" enum:"summarized,nothing,restricted,gone,stale"`
	Versions int                `json:"versions"`
	Latest   *summaries.Summary `json:"latest,omitempty"`
}

// subject is what a fold needs of a session or job.
type subject struct {
	kind, id, user, agent string
	upTo                  int64 // the last seq that may be summarised
}

// fold is one version's input.
type fold struct {
	prev     summaries.Summary
	hasPrev  bool
	passages []Passage
	llmItems []map[string]any
	from, to int64
}

// SummarizeSession folds the session's spilled turns not summarised yet into new versions
// of its summary.
func (r *Rolling) SummarizeSession(ctx context.Context, org, session string) (RollingResult, error) {
	return r.run(ctx, org, summaries.KindSession, session)
}

// SummarizeJob folds the job's events older than the newest KeepEvents, not summarised
// yet, into new versions of its summary.
func (r *Rolling) SummarizeJob(ctx context.Context, org, job string) (RollingResult, error) {
	return r.run(ctx, org, summaries.KindJob, job)
}

func (r *Rolling) run(ctx context.Context, org, kind, id string) (RollingResult, error) {
	res := RollingResult{Status: "nothing"}
	for range 50 {
		var sub subject
		var f fold
		status := ""
		err := pg.InOrgTx(ctx, r.Pool, org, func(tx pgx.Tx) error {
			var err error
			if sub, err = r.subject(ctx, tx, org, kind, id); err != nil {
				return err
			}
			if sub.user != "" && r.Restricted != nil {
				restricted, err := r.Restricted(ctx, tx, org, sub.user)
				if err != nil {
					return err
				}
				if restricted {
					status = "restricted"
					return nil
				}
			}
			f, err = r.read(ctx, tx, org, sub)
			return err
		})
		if errors.Is(err, strata.ErrNotFound) {
			res.Status = "gone"
			return res, nil
		}
		if err != nil {
			return res, err
		}
		if status != "" {
			res.Status = status
			r.Metrics.run(kind, status)
			return res, nil
		}
		if len(f.passages) == 0 && len(f.llmItems) == 0 {
			return res, nil
		}
		n := r.summarize(ctx, org, sub, f)
		var written summaries.Summary
		err = pg.InOrgTx(ctx, r.Pool, org, func(tx pgx.Tx) error {
			if sub.user != "" && r.Restricted != nil { // again, under the subject's lock: an erasure may have begun
				held, err := r.Restricted(ctx, tx, org, sub.user)
				if err != nil || held {
					status = "restricted"
					return err
				}
			}
			var err error
			after := int64(0)
			if f.hasPrev {
				after = f.prev.Version
			}
			if written, err = summaries.Write(ctx, tx, org, n, after); err != nil {
				return err
			}
			return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: RollingWorkerKey, ActorRole: "system",
				AgentID: sub.agent, Action: "summarize-" + kind, EntityType: kind, EntityID: id, Status: 200,
				Details: map[string]any{"version": written.Version, "from_seq": written.FromSeq, "added_from": written.AddedFrom,
					"to_seq": written.ToSeq, "items": written.Items, "tokens": written.Tokens, "summarizer": written.Summarizer,
					"fallback": written.Fallback != ""}})
		})
		if errors.Is(err, strata.ErrConflict) {
			res.Status = "stale" // another worker wrote this version: it carries on from there
			r.Metrics.run(kind, "stale")
			return res, nil
		}
		if err != nil {
			return res, err
		}
		if status != "" { // nothing written
			res.Status = status
			r.Metrics.run(kind, status)
			return res, nil
		}
		res.Status, res.Versions, res.Latest = "summarized", res.Versions+1, &written
		r.Metrics.run(kind, "summarized")
	}
	return res, nil
}

// subject reads the session's or job's scope and how far a summary may reach.
func (r *Rolling) subject(ctx context.Context, tx pgx.Tx, org, kind, id string) (subject, error) {
	s := subject{kind: kind, id: id}
	switch kind {
	case summaries.KindSession:
		si, err := r.Working.Session(ctx, tx, org, id, false)
		if err != nil {
			return s, err
		}
		s.user, s.agent, s.upTo = si.UserID, si.AgentID, si.TurnSeq-int64(r.Working.BufferSize())
	default:
		j, err := r.Jobs.GetJob(ctx, tx, org, id)
		if err != nil {
			return s, err
		}
		h, err := r.Episodic.Head(ctx, tx, org, id)
		if err != nil && !errors.Is(err, strata.ErrNotFound) {
			return s, err
		}
		s.user, s.agent, s.upTo = j.UserID, j.AgentID, h.LastSeq-r.keep()
	}
	return s, nil
}

// read gathers the next version's input: the previous summary and up to Batch turns or
// events after it, through upTo.
func (r *Rolling) read(ctx context.Context, tx pgx.Tx, org string, sub subject) (fold, error) {
	var f fold
	prev, err := summaries.Latest(ctx, tx, org, sub.kind, sub.id)
	switch {
	case errors.Is(err, strata.ErrNotFound):
	case err != nil:
		return f, err
	default:
		f.prev, f.hasPrev = prev, true
	}
	after := f.prev.ToSeq
	if sub.upTo <= after {
		return f, nil
	}
	limit := int(min(int64(r.batch()), sub.upTo-after))
	if sub.kind == summaries.KindSession {
		turns, err := r.Working.TurnsAfter(ctx, tx, org, sub.id, after, limit)
		if err != nil {
			return f, err
		}
		for _, t := range turns {
			if t.Seq > sub.upTo {
				break
			}
			w := 1.0
			if t.Role == "user" {
				w = 1.25
			}
			f.passages = append(f.passages, Passage{Seq: t.Seq, Label: t.Role, Text: t.Content, Weight: w})
			f.llmItems = append(f.llmItems, map[string]any{"seq": t.Seq, "role": t.Role, "content": t.Content})
			f.to = t.Seq
		}
	} else {
		evs, err := r.Episodic.List(ctx, tx, org, sub.id, episodic.ListQuery{AfterSeq: after, ThroughSeq: sub.upTo, Limit: limit})
		if err != nil {
			return f, err
		}
		reverted := map[int64]bool{}
		for _, e := range evs {
			if e.RevertsSeq > 0 {
				reverted[e.RevertsSeq] = true
			}
		}
		for _, e := range evs {
			text := e.Op
			if p := compactJSON(e.Params, 300); p != "" && p != "{}" {
				text += " " + p
			}
			if res := compactJSON(e.Result, 300); res != "" && res != "null" {
				text += " → " + res
			}
			label := "#" + strconv.FormatInt(e.Seq, 10)
			w := 1.0
			if reverted[e.Seq] {
				label += " (reverted)"
				w = 0.5
			}
			f.passages = append(f.passages, Passage{Seq: e.Seq, Label: label, Text: text + ".", Weight: w})
			// Params and results travel compacted and cut (a 200-event prompt stays bounded).
			f.llmItems = append(f.llmItems, map[string]any{"seq": e.Seq, "op": e.Op, "params": compactJSON(e.Params, 300),
				"result": compactJSON(e.Result, 300), "reverted": reverted[e.Seq]})
			f.to = e.Seq
		}
	}
	if len(f.llmItems) == 0 {
		return f, nil
	}
	// The first seq read: after+1, except for a session re-created after a delete, whose
	// numbering continues past turns that are gone.
	f.from = f.passages[0].Seq
	return f, nil
}

// summarize writes the version's text: the LLM's when it answers well, else extractive
// (with why in Fallback).
func (r *Rolling) summarize(ctx context.Context, org string, sub subject, f fold) summaries.New {
	n := summaries.New{Kind: sub.kind, SubjectID: sub.id, UserID: sub.user, AgentID: sub.agent, FromSeq: 1,
		AddedFrom: f.from, ToSeq: f.to, Items: len(f.llmItems), At: r.now()}
	if f.hasPrev {
		n.FromSeq = f.prev.FromSeq
	} else {
		n.FromSeq = f.from
	}
	budget := r.tokens()
	if r.LLM != nil {
		text, err := r.llmSummary(ctx, org, sub.kind, f, budget)
		if err == nil {
			n.Text, n.Summarizer, n.PromptVer = text, r.LLM.Name(), RollingPromptVersion
			n.Tokens = CountTokens(text)
			r.Metrics.summary(sub.kind, "llm")
			return n
		}
		n.Fallback = fallbackReason(err)
		r.Metrics.summary(sub.kind, "fallback")
		r.log().WarnContext(ctx, "rolling summary: the LLM's answer was unusable; writing the extractive summary",
			"org", org, "kind", sub.kind, "items", len(f.llmItems), "reason", n.Fallback)
	} else {
		r.Metrics.summary(sub.kind, "extractive")
	}
	var ps []Passage
	if f.hasPrev && f.prev.Text != "" {
		ps = append(ps, Passage{Text: f.prev.Text, Weight: 0.9})
	}
	ps = append(ps, f.passages...)
	n.Text = Extract(ps, budget, CountTokens)
	if n.Text == "" {
		n.Text = fmt.Sprintf("(%d %s with nothing to summarise)", len(f.llmItems), map[string]string{
			summaries.KindSession: "turns", summaries.KindJob: "events"}[sub.kind])
	}
	n.Summarizer, n.Tokens = "extractive", CountTokens(n.Text)
	return n
}

// errLLMLimit: the org used its hourly LLM calls or tokens (the extraction policy's limits,
// shared with extraction).
var errLLMLimit = errors.New("the org's hourly LLM limit is used up")

// llmSummary calls the LLM within the org's hourly limits (policy extraction
// max_calls_per_hour, max_tokens_per_hour; the same budget as extraction) and counts what
// it used.
func (r *Rolling) llmSummary(ctx context.Context, org, kind string, f fold, budget int) (string, error) {
	hour := r.now().Truncate(time.Hour)
	err := pg.InOrgTx(ctx, r.Pool, org, func(tx pgx.Tx) error {
		def := r.Defaults
		if def.Extraction.MaxCallsPerHour == nil { // not composed: the built-in defaults
			def = policy.DefaultPolicy(0)
		}
		eff, err := policy.LoadEffective(ctx, tx, org, def)
		if err != nil {
			return err
		}
		calls, tokens, err := extraction.HourUsage(ctx, tx, org, hour)
		if err != nil {
			return err
		}
		if calls >= eff.Extraction.MaxCallsPerHour || tokens >= int64(eff.Extraction.MaxTokensPerHour) {
			return errLLMLimit
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	text, use, err := r.LLM.Summarize(ctx, kind, f.prev.Text, f.llmItems, budget)
	if use.Calls > 0 {
		if uerr := pg.InOrgTx(context.WithoutCancel(ctx), r.Pool, org, func(tx pgx.Tx) error {
			return extraction.AddHourUsage(ctx, tx, org, hour, use)
		}); uerr != nil {
			r.log().WarnContext(ctx, "rolling summary: recording LLM usage", "org", org, "err", uerr)
		}
	}
	return text, err
}

func fallbackReason(err error) string {
	var m *MalformedError
	if errors.As(err, &m) {
		return "malformed answer after " + strconv.Itoa(m.Attempts) + " attempts: " + m.Reason
	}
	if errors.Is(err, errLLMLimit) {
		return errLLMLimit.Error() + " (policy extraction.max_calls_per_hour / max_tokens_per_hour)"
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return "llm call failed: " + msg
}

// RollingMetrics counts rolling summaries.
type RollingMetrics struct {
	Runs      *prometheus.CounterVec
	Summaries *prometheus.CounterVec
}

// NewRollingMetrics registers the rolling summaries' counters on reg.
func NewRollingMetrics(reg prometheus.Registerer) *RollingMetrics {
	m := &RollingMetrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_summary_runs_total",
			Help: "Rolling summary versions by subject kind (session, job) and outcome (summarized, restricted, stale)."}, []string{"kind", "outcome"}),
		Summaries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_summaries_total",
			Help: "Rolling summary texts by subject kind and writer: llm, extractive, fallback (the LLM's answer was unusable)."}, []string{"kind", "summarizer"}),
	}
	reg.MustRegister(m.Runs, m.Summaries)
	return m
}

func (m *RollingMetrics) run(kind, outcome string) {
	if m != nil {
		m.Runs.WithLabelValues(kind, outcome).Inc()
	}
}

func (m *RollingMetrics) summary(kind, by string) {
	if m != nil {
		m.Summaries.WithLabelValues(kind, by).Inc()
	}
}

// Candidates lists org's subjects of kind due a new version: sessions with at least Every
// spilled turns beyond their summary (written in the last 24 hours), jobs with at least
// Every events beyond their summary and their newest KeepEvents.
func (r *Rolling) Candidates(ctx context.Context, tx pgx.Tx, org, kind string, limit int) ([]RollingArgs, error) {
	var out []RollingArgs
	after := ""
	users := map[string]string{}
	for len(out) < limit {
		var cands []summaries.Candidate
		switch kind {
		case summaries.KindSession:
			ls, err := r.Working.LongSessions(ctx, tx, org, int64(r.Working.BufferSize())+r.every()-1,
				r.now().Add(-24*time.Hour), after, 500)
			if err != nil || len(ls) == 0 {
				return out, err
			}
			for _, l := range ls {
				cands = append(cands, summaries.Candidate{ID: l.SessionID, UpTo: l.TurnSeq - int64(r.Working.BufferSize())})
				users[l.SessionID] = l.UserID
			}
			after = ls[len(ls)-1].SessionID
		default:
			ls, err := r.Episodic.LongLogs(ctx, tx, org, r.keep()+r.every()-1, after, 500)
			if err != nil || len(ls) == 0 {
				return out, err
			}
			for _, l := range ls {
				cands = append(cands, summaries.Candidate{ID: l.JobID, UpTo: l.LastSeq - r.keep()})
			}
			after = ls[len(ls)-1].JobID
		}
		due, _, err := summaries.Due(ctx, tx, org, kind, cands, r.every())
		if err != nil {
			return out, err
		}
		if kind == summaries.KindJob && len(due) > 0 {
			ids := make([]string, len(due))
			for i, d := range due {
				ids[i] = d.ID
			}
			us, err := r.Jobs.Users(ctx, tx, org, ids)
			if err != nil {
				return out, err
			}
			for id, u := range us {
				users[id] = u
			}
		}
		for _, d := range due {
			out = append(out, RollingArgs{Org: org, Of: kind, ID: d.ID, UserID: users[d.ID]})
		}
		if len(cands) < 500 {
			break
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// itemsJSON is the LLM's input document.
func itemsJSON(kind, prev string, items []map[string]any) (string, error) {
	key := "turns"
	if kind == summaries.KindJob {
		key = "events"
	}
	b, err := json.Marshal(map[string]any{"previous_summary": prev, key: items})
	if len(b) > 96<<10 {
		// Keep the prompt bounded: long contents are cut (the extractive fallback sees them whole).
		for _, it := range items {
			for _, f := range []string{"content"} {
				if s, ok := it[f].(string); ok && len(s) > 2000 {
					it[f] = strings.ToValidUTF8(s[:2000], "") + "…"
				}
			}
		}
		b, err = json.Marshal(map[string]any{"previous_summary": prev, key: items})
	}
	return string(b), err
}
