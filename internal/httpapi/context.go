package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	tc "github.com/strata-mem/strata/internal/turncontext"
	"github.com/strata-mem/strata/internal/working"
)

// Per-turn context assembly (docs/context.md): one call at the start of every turn that
// answers, within a token budget and in priority order, the job's resume summary, the
// working state, the preferences that apply, the memories relevant to the query and similar
// past jobs. Composition only: each tier is read through its own store.

// Defaults and limits of POST /v1/context.
const (
	defaultContextTokens = 4000
	defaultRecentTurns   = 6
	defaultRecentEvents  = 5
	defaultSimilarJobs   = 3
	maxKVKeysPerNS       = 100
	maxItemChars         = 600
)

// DefaultKVNamespaces are the key-value namespaces /v1/context resolves when the request
// names none.
var DefaultKVNamespaces = []string{"preferences", "rules"}

type contextRequest struct {
	ScopeBody
	JobID        string   `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job the agent is working on: its resume summary comes first."`
	Query        string   `json:"query,omitempty" maxLength:"4096" doc:"What this turn is about (the user's message, the step at hand): memories and similar jobs are ranked against it. Without it those two sections are empty."`
	MaxTokens    int      `json:"max_tokens,omitempty" minimum:"50" maximum:"1000000" doc:"Token budget of the whole context (default 4000)."`
	Model        string   `json:"model,omitempty" maxLength:"100" pattern:"^[A-Za-z0-9._:/-]+$" doc:"The model the context is for: its tokenizer counts (gpt-4o, gpt-4.1, o3, gpt-4, gpt-3.5-turbo, ... or an encoding: o200k_base, cl100k_base). Other models are counted with o200k_base and marked estimated. Default gpt-4o."`
	KVNamespaces []string `json:"kv_namespaces,omitempty" maxItems:"20" doc:"Key-value namespaces whose keys apply as preferences, each resolved for the scope (session > agent > user > org). Default [\"preferences\", \"rules\"]."`
	TopK         int      `json:"top_k,omitempty" minimum:"1" maximum:"100" doc:"Memories to consider (default 10)."`
	SimilarJobs  *int     `json:"similar_jobs,omitempty" minimum:"0" maximum:"50" doc:"Similar past jobs to consider (default 3; 0: none)."`
	RecentTurns  *int     `json:"recent_turns,omitempty" minimum:"0" maximum:"200" doc:"Newest session turns to consider with the working state (default 6; 0: none)."`
	RecentEvents *int     `json:"recent_events,omitempty" minimum:"0" maximum:"200" doc:"Newest job events to consider after the completed steps (default 5; 0: none)."`
	// Poisoning controls (quarantine.go): the same filters as memory search.
	Trust      []string              `json:"trust,omitempty" maxItems:"5" doc:"Only memories (and job memories) of these trust levels."`
	Provenance *provenanceFilterBody `json:"provenance,omitempty" doc:"Only (or never) memories written by these keys, agents or jobs."`
}

type contextInput struct {
	Body contextRequest
}

// ContextJob is the job's position, for the agent's bookkeeping.
type ContextJob struct {
	JobID             string `json:"job_id"`
	Status            string `json:"status"`
	CurrentStep       string `json:"current_step,omitempty"`
	NextAction        string `json:"next_action,omitempty"`
	CheckpointVersion int64  `json:"checkpoint_version" doc:"Send it as If-Match with the next checkpoint."`
	LastEventSeq      int64  `json:"last_event_seq"`
	CompletedSteps    int    `json:"completed_steps"`
	InFlight          int    `json:"in_flight"`
}

// ContextBody is the assembled context.
type ContextBody struct {
	Model        string        `json:"model"`
	Encoding     string        `json:"encoding" doc:"The BPE vocabulary that counted (o200k_base, cl100k_base, ...)."`
	Estimated    bool          `json:"estimated" doc:"True when the model is not an OpenAI model: counts are o200k_base's, an estimate."`
	MaxTokens    int           `json:"max_tokens"`
	Tokens       int           `json:"tokens" doc:"Tokens of prompt: never more than max_tokens."`
	Prompt       string        `json:"prompt" doc:"Every included section, in priority order, ready to put in the model's context."`
	Sections     []tc.Packed   `json:"sections" doc:"job, working_state, preferences, memories, similar_jobs (always all five, in this order): tokens used and what was left out."`
	Job          *ContextJob   `json:"job,omitempty"`
	KVNamespaces []string      `json:"kv_namespaces"`
	Timings      ContextTiming `json:"timings_ms" doc:"Where the time went (milliseconds)."`
}

// ContextTiming is the server-side cost of one assembly.
type ContextTiming struct {
	Job         float64 `json:"job" doc:"The first round trip: the job's resume and newest events, every namespace's preferences and the restriction check, in one pipeline."`
	Working     float64 `json:"working_state" doc:"Reading the session's state and turns (Redis), beside the searches."`
	Preferences float64 `json:"preferences" doc:"Rendering the preferences read in the first round trip."`
	Search      float64 `json:"search" doc:"The memory and similar-jobs searches (the query's embedding is computed beside the first round trip)."`
	Pack        float64 `json:"pack"`
}

type contextOutput struct {
	Body ContextBody
}

// contextStores are the tier stores the assembly reads.
type contextStores struct {
	jobs  *jobs.Store
	ep    *episodic.Store
	ws    *working.Store
	kv    *keyvalue.Store
	sem   *semantic.Store
	emb   embed.Embedder
	space semantic.Space
	pool  *pgxpool.Pool // for the similar-jobs search, which runs beside the request's transaction
}

func (s *Server) newContextStores() contextStores {
	return contextStores{jobs: s.jobs, ep: s.events, ws: s.working, kv: s.kv, sem: s.memories, emb: s.emb, space: s.space, pool: s.pool}
}

// contextSideConnWait is how long context waits for a free connection to search similar
// jobs beside its own transaction before doing it on that transaction.
const contextSideConnWait = 2 * time.Millisecond

// sideSession is a session bound to org on a connection reserved now for work beside the
// request's transaction (pg.Session.Reserve), or nil when none is free within
// contextSideConnWait: then the work runs on the request's own transaction, since waiting
// for a second connection while holding one starves a small pool under load. The func it
// returns rolls the session back off the response's path (it only reads; call it either way).
func sideSession(ctx context.Context, pool *pgxpool.Pool, org string) (*pg.Session, func()) {
	if pool == nil {
		return nil, func() {}
	}
	s := pg.NewSession(pool, org)
	end := func() { go s.Rollback(context.WithoutCancel(ctx)) }
	if !s.Reserve(ctx, contextSideConnWait) {
		return nil, end
	}
	return s, end
}

// errNeedsPostgres is what redisOnly answers every statement with.
var errNeedsPostgres = errors.New("httpapi: this read needs Postgres")

// redisOnly is a pg.DBTX that runs nothing: context reads the working tier through it
// beside its own transaction (a pgx transaction is not safe for concurrent use), so a read
// that Redis alone answers costs no connection, and one that needs the durable copy fails
// with errNeedsPostgres and is done again on the request's transaction.
type redisOnly struct{}

func (redisOnly) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNeedsPostgres
}
func (redisOnly) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errNeedsPostgres
}
func (redisOnly) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{errNeedsPostgres} }

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (s *Server) assembleContext(ctx context.Context, st contextStores, b contextRequest) (*contextOutput, error) {
	if err := strata.CheckText("body.query", b.Query); err != nil {
		return nil, err
	}
	counter, err := tc.NewCounter(b.Model)
	if err != nil {
		return nil, strata.Invalid("body.model", "%s", err.Error())
	}
	budget := b.MaxTokens
	if budget == 0 {
		budget = defaultContextTokens
	}
	nss := b.KVNamespaces
	if len(nss) == 0 {
		nss = DefaultKVNamespaces
	}
	for i, ns := range nss {
		if !strata.ValidID(ns) {
			return nil, strata.Invalid("body.kv_namespaces["+strconv.Itoa(i)+"]", "must be 1-200 characters of A-Z a-z 0-9 . _ : -")
		}
	}
	topK := b.TopK
	if topK == 0 {
		topK = 10
	}
	similar, turns, events := intOr(b.SimilarJobs, defaultSimilarJobs), intOr(b.RecentTurns, defaultRecentTurns), intOr(b.RecentEvents, defaultRecentEvents)
	var filters semantic.Query
	if err := trustProvenanceFilters(ctx, b.Trust, b.Provenance, &filters); err != nil {
		return nil, err
	}
	scope := b.Scope(ctx)
	out := &contextOutput{}
	body := &out.Body
	body.Model, body.Encoding, body.Estimated, body.MaxTokens, body.KVNamespaces =
		counter.Model(), counter.Encoding(), counter.Estimated(), budget, nss

	org := orgOf(ctx)
	hasQuery := strings.TrimSpace(b.Query) != ""

	// The query's embedding is computed beside the first round trip and off the Postgres
	// connection: with a remote embedder it is an HTTP call, which must not hold one.
	var qvec []float32
	var embErr error
	embedded := make(chan struct{})
	if hasQuery {
		go func() {
			defer close(embedded)
			vs, err := st.emb.Embed(ctx, []string{b.Query})
			if err == nil && len(vs) != 1 {
				err = fmt.Errorf("embedding the query: %d vectors for one text", len(vs))
			}
			if err == nil {
				qvec = vs[0]
			}
			embErr = err
		}()
	} else {
		close(embedded)
	}

	tx, err := pg.TxFrom(ctx)
	if err != nil {
		return nil, err
	}
	// One round trip (with the transaction's BEGIN) for everything read by key: the GDPR
	// restriction check (Art. 18: the user named, or the subject of the job or session), the
	// job's resume (job, checkpoint, steps, handoffs), its newest events and log head, each
	// namespace's preferences, and the org's lifecycle policy (its facts' verification age
	// marks stale memories, as in memory search). When the check says restricted, nothing
	// else it read is used.
	t0 := time.Now()
	var restricted bool
	var restrictErr error
	prefs := make([]keyvalue.ListResult, len(nss))
	var last episodic.LastResult
	var policy eviction.EffectiveResult
	queue := func(bt *pgx.Batch) {
		gdpr.QueueContextCheck(bt, org, b.UserID, b.JobID, b.SessionID, &restricted, &restrictErr)
		if hasQuery {
			eviction.QueueLoadEffective(bt, org, s.policyDefaults, &policy)
		}
		for i, ns := range nss {
			st.kv.QueueList(bt, ns, scope, true, "", maxKVKeysPerNS+1, &prefs[i])
		}
		if b.JobID != "" {
			st.ep.QueueLast(bt, org, b.JobID, max(events, 1), &last)
		}
	}
	var res jobs.Resume
	var resErr error
	if b.JobID != "" {
		res, resErr = st.jobs.Resume(ctx, tx, org, b.JobID, queue)
	} else {
		bt := &pgx.Batch{}
		queue(bt)
		if err := tx.SendBatch(ctx, bt).Close(); err != nil {
			resErr = pg.Interpret(err)
		}
	}
	if resErr != nil && !errors.Is(resErr, strata.ErrNotFound) {
		return nil, resErr
	}
	if restrictErr != nil {
		return nil, restrictErr
	}
	if restricted {
		note := "processing of this user's data is restricted (GDPR Art. 18): nothing is assembled"
		r := tc.Pack(counter, budget, []tc.Section{{Name: tc.SectionJob, Note: note}, {Name: tc.SectionWorking, Note: note},
			{Name: tc.SectionPreferences, Note: note}, {Name: tc.SectionMemories, Note: note}, {Name: tc.SectionSimilarJobs, Note: note}})
		body.Sections, body.Prompt, body.Tokens = r.Sections, r.Prompt, r.Tokens
		return out, nil
	}
	var snapshot json.RawMessage
	var snapshotVersion int64
	jobSec := tc.Section{Name: tc.SectionJob, Note: "no job_id given"}
	if b.JobID != "" {
		var cj *ContextJob
		jobSec, cj, snapshot, snapshotVersion, err = contextJobSection(b.JobID, res, resErr, last, events)
		if err != nil {
			return nil, err
		}
		body.Job = cj
	}
	t1 := time.Now()
	body.Timings.Job = msOf(t1.Sub(t0))
	prefSec, err := contextPreferences(nss, prefs)
	if err != nil {
		return nil, err
	}
	body.Timings.Preferences = msOf(time.Since(t1))

	// The session's working state and newest turns come from Redis while the searches use
	// the connection. Only when Redis lost the session (or is down) does reading it need
	// Postgres: then it is read again, after the searches, through the request's transaction.
	type workResult struct {
		sec tc.Section
		err error
		d   time.Duration
	}
	workc := make(chan workResult, 1)
	go func() {
		t := time.Now()
		sec, err := contextWorking(ctx, st.ws, redisOnly{}, org, b.SessionID, turns, snapshot, snapshotVersion)
		workc <- workResult{sec, err, time.Since(t)}
	}()

	t2 := time.Now()
	memSec := tc.Section{Name: tc.SectionMemories, Note: "no query given"}
	jobsSec := tc.Section{Name: tc.SectionSimilarJobs, Note: "no query given"}
	var memRes, jobRes []semantic.Result
	if hasQuery {
		<-embedded
		if embErr != nil {
			return nil, embErr
		}
		if policy.Err != nil {
			return nil, policy.Err
		}
		filters.StaleAfter = policy.Effective.ForKind(semantic.KindFact).VerifyAge
		memSec, jobsSec, memRes, jobRes, err = contextSearch(ctx, st, tx, scope, b.Query, qvec, b.JobID, topK, similar, filters)
		if err != nil {
			return nil, err
		}
	}
	body.Timings.Search = msOf(time.Since(t2))

	wr := <-workc
	if errors.Is(wr.err, errNeedsPostgres) {
		t := time.Now()
		wr.sec, wr.err = contextWorking(ctx, st.ws, sessionTx{ctx}, org, b.SessionID, turns, snapshot, snapshotVersion)
		wr.d += time.Since(t)
	}
	if wr.err != nil {
		return nil, wr.err
	}
	body.Timings.Working = msOf(wr.d)
	workSec := wr.sec

	t4 := time.Now()
	r := tc.Pack(counter, budget, []tc.Section{jobSec, workSec, prefSec, memSec, jobsSec})
	body.Sections, body.Prompt, body.Tokens = r.Sections, r.Prompt, r.Tokens
	body.Timings.Pack = msOf(time.Since(t4))

	// The retrieval log records the memories the model is actually given.
	served := func(res []semantic.Result, p tc.Packed) []semantic.Result {
		in := make(map[string]bool, len(p.Included))
		for _, id := range p.Included {
			in[id] = true
		}
		var keep []semantic.Result
		for _, x := range res {
			if in[x.Memory.ID.String()] {
				keep = append(keep, x)
			}
		}
		return keep
	}
	give := append(served(memRes, r.Sections[3]), served(jobRes, r.Sections[4])...)
	if len(give) > 0 {
		p, _ := auth.FromContext(ctx)
		st.sem.QueueServed(pg.SessionFrom(ctx), s.access, semantic.Served{Scope: scope, RequestID: requestID(ctx),
			Operation: "context", KeyID: p.KeyID, JobID: b.JobID}, give)
	}
	return out, nil
}

func intOr(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

// compact renders JSON on one line, cut to maxItemChars.
func compact(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return tc.Truncate(string(raw), maxItemChars)
	}
	return tc.Truncate(b.String(), maxItemChars)
}

// contextJobSection renders the job's section from its resume (resErr: Resume's error,
// strata.ErrNotFound when there is no such job) and its newest events and log head.
func contextJobSection(jobID string, r jobs.Resume, resErr error, last episodic.LastResult, nEvents int) (
	tc.Section, *ContextJob, json.RawMessage, int64, error) {
	sec := tc.Section{Name: tc.SectionJob}
	if errors.Is(resErr, strata.ErrNotFound) {
		sec.Note = "no job " + jobID + " in this org yet (create it with PUT /v1/jobs/" + jobID + ")"
		return sec, nil, nil, 0, nil
	}
	if resErr != nil {
		return sec, nil, nil, 0, resErr
	}
	if last.Err != nil {
		return sec, nil, nil, 0, last.Err
	}
	var evs []episodic.Event
	if nEvents > 0 {
		evs = last.Events
	}
	// The view's seqs are gap-free, so the newest event's seq is the log's head.
	lastSeq := last.Head.LastSeq
	if len(last.Events) > 0 {
		lastSeq = last.Events[len(last.Events)-1].Seq
	}
	j := r.Job
	cj := &ContextJob{JobID: j.JobID, Status: j.Status, NextAction: r.NextAction, CheckpointVersion: j.CheckpointVersion,
		LastEventSeq: lastSeq, CompletedSteps: len(r.CompletedSteps), InFlight: len(r.InFlight)}
	var h strings.Builder
	fmt.Fprintf(&h, "## Job %s (%s)", j.JobID, j.Status)
	if j.Goal != "" {
		fmt.Fprintf(&h, "\nGoal: %s", tc.Truncate(j.Goal, 2000))
	}
	if r.Checkpoint != nil && r.Checkpoint.CurrentStep != "" {
		cj.CurrentStep = r.Checkpoint.CurrentStep
	} else if len(r.InFlight) > 0 {
		cj.CurrentStep = r.InFlight[0].StepID
	}
	if cj.CurrentStep != "" {
		fmt.Fprintf(&h, "\nCurrent step: %s", cj.CurrentStep)
	}
	if r.NextAction != "" {
		fmt.Fprintf(&h, "\nNext action: %s", tc.Truncate(r.NextAction, 2000))
	}
	fmt.Fprintf(&h, "\nProgress: %d steps done, %d in flight, %d failed; checkpoint v%d; last event #%d.",
		len(r.CompletedSteps), len(r.InFlight), len(r.FailedSteps), j.CheckpointVersion, lastSeq)
	if j.Status == "running" {
		h.WriteString("\nSteps marked done are finished: never run them again (start_step answers their stored result).")
	} else {
		h.WriteString("\nThis job is finished: it takes no more steps (fork it from a checkpoint to continue).")
	}
	sec.Header = h.String()

	for _, f := range r.InFlight {
		sec.Items = append(sec.Items, tc.Item{ID: "in_flight:" + f.StepID, Order: 0, Text: fmt.Sprintf(
			"- In flight: %s, held by %s (lease %s until %s, fencing token %d, attempt %d)",
			f.StepID, f.Owner, f.Lease, f.LeaseExpiresAt.UTC().Format(time.RFC3339), f.FencingToken, f.Attempts)})
	}
	for _, f := range r.FailedSteps {
		sec.Items = append(sec.Items, tc.Item{ID: "failed:" + f.StepID, Order: 1, Text: fmt.Sprintf(
			"- Failed: %s (%s): %s", f.StepID, f.Disposition, tc.Truncate(f.Error, maxItemChars))})
	}
	for _, ho := range r.PendingHandoffs {
		line := fmt.Sprintf("- Pending handoff %s: %s → %s (the job stays with %s until %s acknowledges)", ho.ID, ho.From, ho.To, ho.From, ho.To)
		if c := compact(ho.Context); c != "" && c != "{}" {
			line += "; context: " + c
		}
		sec.Items = append(sec.Items, tc.Item{ID: "handoff:" + ho.ID, Order: 2, Text: line})
	}
	if r.Checkpoint != nil {
		if p := compact(r.Checkpoint.Pending); p != "" && p != "[]" {
			sec.Items = append(sec.Items, tc.Item{ID: "pending", Order: 3, Text: "- Pending: " + p})
		}
		if s := compact(r.Checkpoint.State); s != "" && s != "{}" {
			sec.Items = append(sec.Items, tc.Item{ID: "checkpoint_state", Order: 4, Text: "- Task state: " + s})
		}
	}
	// Completed steps: chosen newest first, shown in completion order.
	n := len(r.CompletedSteps)
	for i := n - 1; i >= 0; i-- {
		c := r.CompletedSteps[i]
		line := "- Done: " + c.StepID
		if res := compact(c.Result); res != "" {
			line += " → " + res
		}
		sec.Items = append(sec.Items, tc.Item{ID: "done:" + c.StepID, Order: 10 + i, Text: line})
	}
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		line := fmt.Sprintf("- Event #%d %s", e.Seq, e.Op)
		if p := compact(e.Params); p != "" && p != "{}" {
			line += " " + p
		}
		if res := compact(e.Result); res != "" {
			line += " → " + res
		}
		sec.Items = append(sec.Items, tc.Item{ID: "event:" + strconv.FormatInt(e.Seq, 10), Order: 10 + n + i, Text: line})
	}
	var snap json.RawMessage
	var snapV int64
	if r.Checkpoint != nil {
		snap, snapV = r.WorkingState, r.Checkpoint.Version
	}
	return sec, cj, snap, snapV, nil
}

// contextWorking renders the working-state section: the session's state document and
// newest turns, or else the checkpoint's snapshot. db is where the working tier reads the
// durable copy when Redis lost the session (redisOnly: not at all).
func contextWorking(ctx context.Context, ws *working.Store, db pg.DBTX, org, session string, nTurns int,
	snapshot json.RawMessage, snapshotVersion int64) (tc.Section, error) {
	sec := tc.Section{Name: tc.SectionWorking}
	var doc json.RawMessage
	if session != "" {
		state, err := ws.Get(ctx, db, org, session)
		switch {
		case errors.Is(err, strata.ErrNotFound):
			sec.Note = "session " + session + " has no state yet"
		case err != nil:
			return sec, err
		default:
			doc = state.State
			sec.Header = fmt.Sprintf("## Working state (session %s, version %d)", session, state.Version)
		}
		if nTurns > 0 && doc != nil {
			buf, err := ws.Turns(ctx, db, org, session)
			if err != nil && !errors.Is(err, strata.ErrNotFound) {
				return sec, err
			}
			ts := buf.Turns
			if len(ts) > nTurns {
				ts = ts[len(ts)-nTurns:]
			}
			for i := len(ts) - 1; i >= 0; i-- {
				t := ts[i]
				sec.Items = append(sec.Items, tc.Item{ID: "turn:" + strconv.FormatInt(t.Seq, 10), Order: 1_000_000 + i,
					Text: fmt.Sprintf("- [%s] %s", t.Role, tc.Truncate(t.Content, 2*maxItemChars))})
			}
		}
	}
	if doc == nil && len(bytes.TrimSpace(snapshot)) > 0 && string(bytes.TrimSpace(snapshot)) != "null" {
		doc = snapshot
		sec.Header = fmt.Sprintf("## Working state (snapshot from checkpoint v%d)", snapshotVersion)
		sec.Note = ""
	}
	if doc == nil {
		if sec.Note == "" {
			sec.Note = "no session_id given and no checkpoint snapshot"
		}
		return sec, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil {
		sec.Items = append([]tc.Item{{ID: "state", Text: "- " + compact(doc)}}, sec.Items...)
		return sec, nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	stateItems := make([]tc.Item, 0, len(keys))
	for i, k := range keys {
		stateItems = append(stateItems, tc.Item{ID: "state." + k, Order: i, Text: "- " + k + ": " + compact(obj[k])})
	}
	sec.Items = append(stateItems, sec.Items...)
	return sec, nil
}

// contextPreferences renders the preferences section from each namespace's resolved entries
// (read by QueueList in the first round trip).
func contextPreferences(nss []string, lists []keyvalue.ListResult) (tc.Section, error) {
	sec := tc.Section{Name: tc.SectionPreferences,
		Header: "## Preferences that apply (resolved: session > agent > user > org)"}
	for i, ns := range nss {
		if lists[i].Err != nil {
			return sec, lists[i].Err
		}
		es := lists[i].Entries
		if len(es) > maxKVKeysPerNS {
			es = es[:maxKVKeysPerNS]
		}
		for _, e := range es {
			sec.Items = append(sec.Items, tc.Item{ID: ns + "/" + e.Key, Order: len(sec.Items),
				Text: fmt.Sprintf("- %s/%s = %s (%s)", ns, e.Key, compact(e.Value), e.Level)})
		}
	}
	if len(sec.Items) == 0 {
		sec.Note = "no keys in " + strings.Join(nss, ", ") + " for this scope"
	}
	return sec, nil
}

func contextSearch(ctx context.Context, st contextStores, tx pgx.Tx, scope strata.Scope, query string, vec []float32, jobID string, topK, similar int, filters semantic.Query) (
	tc.Section, tc.Section, []semantic.Result, []semantic.Result, error) {
	memSec := tc.Section{Name: tc.SectionMemories, Header: "## Relevant memories for: " + tc.Truncate(query, 200)}
	jobsSec := tc.Section{Name: tc.SectionSimilarJobs, Header: "## Similar past jobs (settled parameters: reuse them)"}
	q := semantic.Query{Scope: scope, Text: query, Vector: vec, Space: st.space, TopK: topK,
		Trust: filters.Trust, Provenance: filters.Provenance, StaleAfter: filters.StaleAfter}
	// The similar-jobs search runs at the same time on a connection of its own (a read-only
	// transaction bound to the same org), the memory search on the request's — when the
	// pool has a connection free right now (sideSession). Otherwise it follows the memory
	// search on the request's own transaction.
	var jobsRes []semantic.Result
	var jobsErr error
	var wg sync.WaitGroup
	jq := q
	jq.Kinds, jq.TopK = []string{semantic.KindJob}, similar+1
	beside := false
	if similar > 0 {
		js, end := sideSession(ctx, st.pool, scope.OrgID)
		defer end()
		if js != nil {
			beside = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				jtx, err := js.Tx(ctx)
				if err != nil {
					jobsErr = err
					return
				}
				jobsRes, _, jobsErr = st.sem.Search(ctx, jtx, jq)
			}()
		}
	}
	mems, _, err := st.sem.Search(ctx, tx, q)
	wg.Wait()
	if err != nil {
		return memSec, jobsSec, nil, nil, err
	}
	if similar > 0 && !beside {
		jobsRes, _, jobsErr = st.sem.Search(ctx, tx, jq)
	}
	if jobsErr != nil {
		return memSec, jobsSec, nil, nil, jobsErr
	}
	var keptJobs []semantic.Result
	asJob := map[string]bool{}
	for _, r := range jobsRes {
		md := r.Memory.Metadata
		jid, _ := md["job_id"].(string)
		if jid != "" && jid == jobID || len(keptJobs) == similar {
			continue
		}
		keptJobs = append(keptJobs, r)
		asJob[r.Memory.ID.String()] = true
		line := "- Job " + jid + ": " + tc.Truncate(r.Memory.Text, maxItemChars)
		if o, ok := md["outcome"]; ok {
			line += "; outcome: " + compactAny(o)
		}
		if p, ok := md["parameters"]; ok {
			line += "; parameters: " + compactAny(p)
		}
		jobsSec.Items = append(jobsSec.Items, tc.Item{ID: r.Memory.ID.String(), Order: len(jobsSec.Items), Text: line})
	}
	var keptMems []semantic.Result
	for _, r := range mems {
		if asJob[r.Memory.ID.String()] {
			continue
		}
		keptMems = append(keptMems, r)
		tags := r.Memory.Kind + ", " + r.Memory.Trust
		if r.Stale {
			tags += ", stale: verify before relying on it"
		}
		memSec.Items = append(memSec.Items, tc.Item{ID: r.Memory.ID.String(), Order: len(memSec.Items),
			Text: "- " + tc.Truncate(r.Memory.Text, 2*maxItemChars) + " (" + tags + ")"})
	}
	if len(memSec.Items) == 0 {
		memSec.Note = "no memory in this scope matches the query"
	}
	if len(jobsSec.Items) == 0 {
		jobsSec.Note = "no similar finished job"
		if similar == 0 {
			jobsSec.Note = "similar_jobs is 0"
		}
	}
	return memSec, jobsSec, keptMems, keptJobs, nil
}

func compactAny(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return tc.Truncate(string(b), maxItemChars)
}

var opGetContext = huma.Operation{
	OperationID: "get-context", Method: http.MethodPost, Path: "/v1/context", Tags: []string{"context"},
	Summary: "Assemble this turn's context within a token budget",
	Description: "The one call an agent makes at the start of every turn. Answers, in priority order and within " +
		"max_tokens (counted with the model's tokenizer): the job's resume summary (current step, next action, " +
		"steps done — never redo them), the working state (session state document and newest turns, or the " +
		"checkpoint's snapshot), the preferences that apply (kv_namespaces resolved session > agent > user > org), " +
		"the memories most relevant to query, and similar past jobs. Each section reports the tokens it used and " +
		"the items left out for the budget. Reads only (memories served are recorded in the retrieval log).",
}

func (s *Server) getContext(ctx context.Context, r *Request, in *contextInput) (*contextOutput, error) {
	return s.assembleContext(ctx, s.newContextStores(), in.Body)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// sessionTx is the request's transaction, begun only when a store touches Postgres.
type sessionTx struct{ ctx context.Context }

func (t sessionTx) tx() (pgx.Tx, error) { return pg.TxFrom(t.ctx) }

func (t sessionTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := t.tx()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

func (t sessionTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.tx()
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

func (t sessionTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := t.tx()
	if err != nil {
		return errRow{err}
	}
	return tx.QueryRow(ctx, sql, args...)
}
