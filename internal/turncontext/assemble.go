package turncontext

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

// Per-turn context assembly (docs/context.md): one call at the start of every turn that
// answers, within a token budget and in priority order, the job's resume summary, the
// working state, the rolling summaries of the session and the job, the preferences that apply, the memories relevant to the query and similar
// past jobs. Composition only: each tier is read through its own store.

// Defaults and limits of an assembly.
const (
	// DefaultTokens is the budget of a request that names none.
	DefaultTokens       = 4000
	defaultTopK         = 10
	defaultRecentTurns  = 6
	defaultRecentEvents = 5
	defaultSimilarJobs  = 3
	maxKVKeysPerNS      = 100
	maxItemChars        = 600
)

// DefaultKVNamespaces are the key-value namespaces resolved when a request names none.
var DefaultKVNamespaces = []string{"preferences", "rules"}

// The tiers as the assembler reads them: only the methods it uses.
type (
	// JobStore reads a job's resume, sending the other reads of the first round trip in
	// the same batch (jobs.Store).
	JobStore interface {
		Resume(ctx context.Context, db pg.DBTX, org, jobID string, also ...func(*pgx.Batch)) (jobs.Resume, error)
	}
	// EventStore queues the read of a job's newest events and log head (episodic.Store).
	EventStore interface {
		QueueLast(b *pgx.Batch, org, job string, n int, res *episodic.LastResult)
	}
	// WorkingStore reads a session's state and turns: from Redis, or through db when Redis
	// lost the session (working.Store).
	WorkingStore interface {
		Get(ctx context.Context, db pg.DBTX, org, session string) (working.State, error)
		Turns(ctx context.Context, db pg.DBTX, org, session string) (working.Buffer, error)
	}
	// KVStore queues the read of a namespace's entries resolved for a scope (keyvalue.Store).
	KVStore interface {
		QueueList(b *pgx.Batch, ns string, sc strata.Scope, resolve bool, after string, limit int, hide []string, res *keyvalue.ListResult)
	}
	// MemoryStore searches memories and records what was served (semantic.Store).
	MemoryStore interface {
		Search(ctx context.Context, tx pgx.Tx, q semantic.Query) ([]semantic.Result, semantic.SearchInfo, error)
		QueueServed(h semantic.CommitHooks, access *semantic.AccessLog, sv semantic.Served, res []semantic.Result)
	}
	// Embedder embeds the query; its name, model and dimensions are the semantic space
	// searched (embed.Embedder).
	Embedder interface {
		Embed(ctx context.Context, texts []string) ([][]float32, error)
		Name() string
		Model() string
		Dims() int
	}
	// PolicyLoader queues the read of an org's effective lifecycle policy, def until it
	// stores its own (policy.QueueLoadEffective).
	PolicyLoader func(b *pgx.Batch, org string, def policy.LifecyclePolicy, res *policy.EffectiveResult)
	// RestrictionCheck queues the GDPR Art. 18 check of the user named and the subjects of
	// the job and session named (gdpr.QueueContextCheck).
	RestrictionCheck func(b *pgx.Batch, org, userID, jobID, sessionID string, restricted *bool, err *error)
)

// GraphStore reads the entities a turn mentions and their relations (graph.Store).
type GraphStore interface {
	Mentions(ctx context.Context, db pg.DBTX, org string, q graph.MentionQuery) ([]graph.Mention, error)
	InForce(ctx context.Context, db pg.DBTX, org string, q graph.InForceQuery) (map[uuid.UUID][]graph.Relation, error)
}

// Session is what an assembly needs of the request's unit of work (pg.Session): its
// transaction (BEGIN rides with the first statement) and its commit hooks, which record the
// memories served.
type Session interface {
	Tx(ctx context.Context) (pgx.Tx, error)
	semantic.CommitHooks
}

// Deps are the stores an Assembler reads, built once by internal/app.
type Deps struct {
	Jobs     JobStore
	Events   EventStore
	Working  WorkingStore
	KV       KVStore
	Memories MemoryStore
	Embedder Embedder
	// Access counts the memories served in batches; nil counts them with the request's
	// COMMIT (STRATA_ACCESS_FLUSH=0).
	Access *semantic.AccessLog
	// QueuePolicy and PolicyDefaults read the org's lifecycle policy (its facts'
	// verification age marks stale memories).
	QueuePolicy    PolicyLoader
	PolicyDefaults policy.LifecyclePolicy
	// QueueRestrictionCheck is required: nothing is assembled for a restricted subject.
	QueueRestrictionCheck RestrictionCheck
	// Graph reads the entities the turn's query mentions (the graph section); nil: no
	// graph section.
	Graph GraphStore
	// Hide returns the org's restricted subjects (gdpr.Restrictions.Subjects: from the
	// replica's cache, no round trip), whose preferences at any level, memories, entities
	// and relations every section leaves out, whoever the request names; nil: none.
	Hide func(ctx context.Context, db pg.DBTX, org string) ([]string, error)
	// Pool gives the similar-jobs search a connection beside the request's transaction
	// when one is free at once; nil: it always runs on the request's transaction.
	Pool *pgxpool.Pool
}

// Assembler assembles per-turn contexts. Safe for concurrent use.
type Assembler struct {
	d     Deps
	space semantic.Space
}

// NewAssembler returns an assembler on d. Every store, the embedder and both queue funcs
// are required.
func NewAssembler(d Deps) *Assembler {
	if d.Jobs == nil || d.Events == nil || d.Working == nil || d.KV == nil || d.Memories == nil ||
		d.Embedder == nil || d.QueuePolicy == nil || d.QueueRestrictionCheck == nil {
		panic("turncontext: NewAssembler needs every store, the embedder, QueuePolicy and QueueRestrictionCheck")
	}
	return &Assembler{d: d, space: semantic.Space{Embedder: d.Embedder.Name(), Model: d.Embedder.Model(), Dims: d.Embedder.Dims()}}
}

// Request is one turn's context request. Scope carries the caller's org (the session's)
// and the user, agent and session named. Zero values take the defaults; field errors
// name the request's fields bare ("query", "kv_namespaces[1]", "trust[0]").
type Request struct {
	Scope        strata.Scope
	JobID        string
	Query        string
	Model        string
	MaxTokens    int      // 0: DefaultTokens
	KVNamespaces []string // none: DefaultKVNamespaces
	TopK         int      // 0: 10
	SimilarJobs  *int     // nil: 3
	RecentTurns  *int     // nil: 6
	RecentEvents *int     // nil: 5
	// Poisoning controls: the same filters as memory search.
	Trust      []string
	Provenance *semantic.ProvenanceFilter
	// RequestID and KeyID go in the retrieval log of the memories served.
	RequestID string
	KeyID     string
}

// Job is the job's position, for the agent's bookkeeping.
type Job struct {
	JobID             string
	Status            string
	CurrentStep       string
	NextAction        string
	CheckpointVersion int64
	LastEventSeq      int64
	CompletedSteps    int
	InFlight          int
}

// Timings is the server-side cost of one assembly, in milliseconds.
type Timings struct {
	Job         float64 // the first round trip (and the job section)
	Working     float64 // the session's state and turns (Redis), beside the searches
	Preferences float64 // rendering the preferences read in the first round trip
	Search      float64 // the memory and similar-jobs searches
	Graph       float64 // the entities mentioned and their relations
	Pack        float64
}

// Assembled is an assembled context.
type Assembled struct {
	Model        string
	Encoding     string
	Estimated    bool
	MaxTokens    int
	Tokens       int    // tokens of Prompt: never more than MaxTokens
	Prompt       string // every included section, in priority order
	Sections     []Packed
	Job          *Job // nil without a job, or when there is no such job
	KVNamespaces []string
	Timings      Timings
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
var errNeedsPostgres = errors.New("turncontext: this read needs Postgres")

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

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func intOr(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

// Assemble assembles req's context in sess, the request's unit of work: everything read by
// key in one round trip (with the transaction's BEGIN) while the query is embedded, then
// the searches on the transaction while the working state is read from Redis. The
// memories given to the model are recorded in the retrieval log at sess's COMMIT.
func (a *Assembler) Assemble(ctx context.Context, sess Session, req Request) (*Assembled, error) {
	if err := strata.CheckText("query", req.Query); err != nil {
		return nil, err
	}
	counter, err := NewCounter(req.Model)
	if err != nil {
		return nil, strata.Invalid("model", "%s", err.Error())
	}
	budget := req.MaxTokens
	if budget == 0 {
		budget = DefaultTokens
	}
	nss := req.KVNamespaces
	if len(nss) == 0 {
		nss = DefaultKVNamespaces
	}
	for i, ns := range nss {
		if !strata.ValidID(ns) {
			return nil, strata.Invalid("kv_namespaces["+strconv.Itoa(i)+"]", "must be 1-200 characters of A-Z a-z 0-9 . _ : -")
		}
	}
	topK := req.TopK
	if topK == 0 {
		topK = defaultTopK
	}
	similar, turns, events := intOr(req.SimilarJobs, defaultSimilarJobs), intOr(req.RecentTurns, defaultRecentTurns), intOr(req.RecentEvents, defaultRecentEvents)
	var filters semantic.Query
	if err := semantic.SetFilters(&filters, req.Trust, req.Provenance); err != nil {
		return nil, err
	}
	scope := req.Scope
	out := &Assembled{Model: counter.Model(), Encoding: counter.Encoding(), Estimated: counter.Estimated(),
		MaxTokens: budget, KVNamespaces: nss}

	org := scope.OrgID
	hasQuery := strings.TrimSpace(req.Query) != ""

	// The query's embedding is computed beside the first round trip and off the Postgres
	// connection: with a remote embedder it is an HTTP call, which must not hold one.
	var qvec []float32
	var embErr error
	embedded := make(chan struct{})
	if hasQuery {
		go func() {
			defer close(embedded)
			vs, err := a.d.Embedder.Embed(ctx, []string{req.Query})
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

	tx, err := sess.Tx(ctx)
	if err != nil {
		return nil, err
	}
	// The org's restricted subjects (Art. 18), whose items every section leaves out even when
	// the request names someone else (an agent- or session-level preference they own): from
	// the replica's cache (no round trip; none for an org that restricts nobody).
	var hide []string
	if a.d.Hide != nil {
		if hide, err = a.d.Hide(ctx, tx, org); err != nil {
			return nil, err
		}
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
	var pol policy.EffectiveResult
	var sessSum, jobSum summaries.LatestResult
	// Most orgs have no graph: one index probe in this round trip keeps the graph section
	// off every turn of theirs.
	var anyEntity bool
	var anyEntityErr error
	queue := func(bt *pgx.Batch) {
		a.d.QueueRestrictionCheck(bt, org, scope.UserID, req.JobID, scope.SessionID, &restricted, &restrictErr)
		if hasQuery {
			a.d.QueuePolicy(bt, org, a.d.PolicyDefaults, &pol)
			if a.d.Graph != nil {
				graph.QueueAnyEntity(bt, org, &anyEntity, &anyEntityErr)
			}
		}
		for i, ns := range nss {
			a.d.KV.QueueList(bt, ns, scope, true, "", maxKVKeysPerNS+1, hide, &prefs[i])
		}
		if req.JobID != "" {
			a.d.Events.QueueLast(bt, org, req.JobID, max(events, 1), &last)
			summaries.QueueLatest(bt, org, summaries.KindJob, req.JobID, &jobSum)
		}
		if scope.SessionID != "" {
			summaries.QueueLatest(bt, org, summaries.KindSession, scope.SessionID, &sessSum)
		}
	}
	var res jobs.Resume
	var resErr error
	if req.JobID != "" {
		res, resErr = a.d.Jobs.Resume(ctx, tx, org, req.JobID, queue)
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
		r := Pack(counter, budget, []Section{{Name: SectionJob, Note: note}, {Name: SectionWorking, Note: note},
			{Name: SectionSummary, Note: note}, {Name: SectionPreferences, Note: note}, {Name: SectionMemories, Note: note}, {Name: SectionGraph, Note: note},
			{Name: SectionSimilarJobs, Note: note}})
		out.Sections, out.Prompt, out.Tokens = r.Sections, r.Prompt, r.Tokens
		return out, nil
	}
	var snapshot json.RawMessage
	var snapshotVersion int64
	jobSec := Section{Name: SectionJob, Note: "no job_id given"}
	if req.JobID != "" {
		jobSec, out.Job, snapshot, snapshotVersion, err = jobSection(req.JobID, res, resErr, last, events)
		if err != nil {
			return nil, err
		}
	}
	t1 := time.Now()
	out.Timings.Job = msOf(t1.Sub(t0))
	prefSec, err := preferencesSection(nss, prefs)
	if err != nil {
		return nil, err
	}
	sumSec, err := summarySection(req.JobID, scope.SessionID, jobSum, sessSum)
	if err != nil {
		return nil, err
	}
	out.Timings.Preferences = msOf(time.Since(t1))

	// The session's working state and newest turns come from Redis while the searches use
	// the connection. Only when Redis lost the session (or is down) does reading it need
	// Postgres: then it is read again, after the searches, through the request's transaction.
	type workResult struct {
		sec Section
		err error
		d   time.Duration
	}
	workc := make(chan workResult, 1)
	go func() {
		t := time.Now()
		sec, err := workingSection(ctx, a.d.Working, redisOnly{}, org, scope.SessionID, turns, snapshot, snapshotVersion)
		workc <- workResult{sec, err, time.Since(t)}
	}()

	t2 := time.Now()
	memSec := Section{Name: SectionMemories, Note: "no query given"}
	jobsSec := Section{Name: SectionSimilarJobs, Note: "no query given"}
	var memRes, jobRes []semantic.Result
	if hasQuery {
		<-embedded
		if embErr != nil {
			return nil, embErr
		}
		if pol.Err != nil {
			return nil, pol.Err
		}
		filters.StaleAfter = pol.Effective.ForKind(semantic.KindFact).VerifyAge
		memSec, jobsSec, memRes, jobRes, err = a.search(ctx, tx, scope, req.Query, qvec, req.JobID, topK, similar, filters, hide)
		if err != nil {
			return nil, err
		}
	}
	out.Timings.Search = msOf(time.Since(t2))

	t3 := time.Now()
	graphSec := Section{Name: SectionGraph, Note: "no query given"}
	switch {
	case !hasQuery:
	case a.d.Graph == nil:
		graphSec.Note = "graph memory is off on this server"
	case anyEntityErr != nil:
		return nil, anyEntityErr
	case !anyEntity:
		graphSec.Note = "this org has no entities"
	default:
		if graphSec, err = a.graphSection(ctx, tx, scope, req.Query, hide); err != nil {
			return nil, err
		}
	}
	out.Timings.Graph = msOf(time.Since(t3))

	wr := <-workc
	if errors.Is(wr.err, errNeedsPostgres) {
		t := time.Now()
		wr.sec, wr.err = workingSection(ctx, a.d.Working, tx, org, scope.SessionID, turns, snapshot, snapshotVersion)
		wr.d += time.Since(t)
	}
	if wr.err != nil {
		return nil, wr.err
	}
	out.Timings.Working = msOf(wr.d)
	workSec := wr.sec

	t4 := time.Now()
	r := Pack(counter, budget, []Section{jobSec, workSec, sumSec, prefSec, memSec, graphSec, jobsSec})
	out.Sections, out.Prompt, out.Tokens = r.Sections, r.Prompt, r.Tokens
	out.Timings.Pack = msOf(time.Since(t4))

	// The retrieval log records the memories the model is actually given.
	served := func(res []semantic.Result, p Packed) []semantic.Result {
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
	give := append(served(memRes, r.Sections[4]), served(jobRes, r.Sections[6])...)
	if len(give) > 0 {
		a.d.Memories.QueueServed(sess, a.d.Access, semantic.Served{Scope: scope, RequestID: req.RequestID,
			Operation: "context", KeyID: req.KeyID, JobID: req.JobID}, give)
	}
	return out, nil
}

// search runs the memory search on the request's transaction and the similar-jobs search
// beside it, and renders both sections.
func (a *Assembler) search(ctx context.Context, tx pgx.Tx, scope strata.Scope, query string, vec []float32, jobID string, topK, similar int, filters semantic.Query, hide []string) (
	Section, Section, []semantic.Result, []semantic.Result, error) {
	memSec := Section{Name: SectionMemories, Header: "## Relevant memories for: " + Truncate(query, 200)}
	jobsSec := Section{Name: SectionSimilarJobs, Header: "## Similar past jobs (settled parameters: reuse them)"}
	q := semantic.Query{Scope: scope, Text: query, Vector: vec, Space: a.space, TopK: topK,
		Trust: filters.Trust, Provenance: filters.Provenance, StaleAfter: filters.StaleAfter, Hide: hide}
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
		js, end := sideSession(ctx, a.d.Pool, scope.OrgID)
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
				jobsRes, _, jobsErr = a.d.Memories.Search(ctx, jtx, jq)
			}()
		}
	}
	mems, _, err := a.d.Memories.Search(ctx, tx, q)
	wg.Wait()
	if err != nil {
		return memSec, jobsSec, nil, nil, err
	}
	if similar > 0 && !beside {
		jobsRes, _, jobsErr = a.d.Memories.Search(ctx, tx, jq)
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
		line := "- Job " + jid + ": " + Truncate(r.Memory.Text, maxItemChars)
		if o, ok := md["outcome"]; ok {
			line += "; outcome: " + compactAny(o)
		}
		if p, ok := md["parameters"]; ok {
			line += "; parameters: " + compactAny(p)
		}
		jobsSec.Items = append(jobsSec.Items, Item{ID: r.Memory.ID.String(), Order: len(jobsSec.Items), Text: line})
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
		memSec.Items = append(memSec.Items, Item{ID: r.Memory.ID.String(), Order: len(memSec.Items),
			Text: "- " + Truncate(r.Memory.Text, 2*maxItemChars) + " (" + tags + ")"})
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
