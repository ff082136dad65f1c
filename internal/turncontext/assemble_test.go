package turncontext_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
	tc "github.com/strata-mem/strata/internal/turncontext"
	"github.com/strata-mem/strata/internal/working"
)

// The assembler without HTTP: real Postgres and Redis, the stores built as internal/app
// builds them, each assembly in a unit of work of its own (pg.Session) committed as the
// HTTP layer commits a request's.

const org = "acme"

type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	dsn    string
	rdb    redis.UniversalClient
	prefix string
	jobs   *jobs.Store
	events *episodic.Store
	ws     *working.Store
	kv     *keyvalue.Store
	sem    *semantic.Store
	emb    embed.Embedder
	deps   tc.Deps
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool, dsn := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	e := &env{t: t, ctx: ctx, pool: pool, dsn: dsn, rdb: rdb, prefix: prefix,
		jobs: jobs.NewStore(time.Hour, nil), events: episodic.NewStore(episodic.Options{}),
		ws:  working.New(pool, rdb, working.Options{Prefix: prefix}),
		kv:  keyvalue.New(pool, rdb, keyvalue.Options{Prefix: prefix, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}),
		sem: semantic.NewStore(semantic.Options{}, nil), emb: embed.NewLexical(384)}
	e.deps = tc.Deps{Jobs: e.jobs, Events: e.events, Working: e.ws, KV: e.kv, Memories: e.sem, Embedder: e.emb,
		QueuePolicy: policy.QueueLoadEffective, PolicyDefaults: policy.DefaultPolicy(0),
		QueueRestrictionCheck: gdpr.QueueContextCheck, Pool: pool}
	return e
}

// tx runs fn in a committed transaction of org.
func (e *env) tx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	require.NoError(e.t, pg.InOrgTx(e.ctx, e.pool, org, fn))
}

// seed builds a job mid-way (two steps done and logged, one in flight, a checkpoint with a
// working-state snapshot) for user u1, a session with state and a turn, preferences at two
// levels, memories of two users and a finished job's memory.
func (e *env) seed() {
	t, ctx := e.t, e.ctx
	e.tx(func(tx pgx.Tx) error {
		_, _, err := e.jobs.PutJob(ctx, tx, org, "promo-7", jobs.JobSpec{Goal: "Cut the spring promo for three channels",
			Owner: "editor", UserID: "u1"}, nil)
		return err
	})
	for i, step := range []string{"cut", "colour"} {
		e.tx(func(tx pgx.Tx) error {
			c, err := e.jobs.Start(ctx, tx, org, "promo-7", step, jobs.StartInput{Owner: "editor"})
			if err != nil {
				return err
			}
			if _, err := e.jobs.Complete(ctx, tx, org, "promo-7", step, c.FencingToken,
				json.RawMessage(`{"asset":"v`+string(rune('1'+i))+`.mp4"}`)); err != nil {
				return err
			}
			_, err = e.events.Append(ctx, tx, org, "promo-7", []episodic.EventInput{{Op: "render." + step,
				Params: json.RawMessage(`{"step":"` + step + `"}`), Result: json.RawMessage(`{"ok":true}`)}})
			return err
		})
	}
	e.tx(func(tx pgx.Tx) error {
		if _, err := e.jobs.Start(ctx, tx, org, "promo-7", "reframe-tiktok", jobs.StartInput{Owner: "editor"}); err != nil {
			return err
		}
		zero := int64(0)
		_, err := e.jobs.PutCheckpoint(ctx, tx, org, "promo-7", jobs.CheckpointInput{CurrentStep: "reframe-tiktok",
			NextAction: "reframe the graded cut to 9:16", Done: json.RawMessage(`["cut","colour"]`),
			Pending: json.RawMessage(`["reframe-tiktok","captions","export"]`), WorkingState: json.RawMessage(`{"cursor":42}`),
			EventSeq: 2}, &zero)
		return err
	})
	var appended *working.Appended
	e.tx(func(tx pgx.Tx) error {
		if _, _, err := e.ws.Put(ctx, tx, org, "sess-1", working.Write{UserID: "u1", AgentID: "editor",
			State: json.RawMessage(`{"brief":"spring promo, upbeat","channel":"tiktok"}`)}); err != nil {
			return err
		}
		var err error
		appended, err = e.ws.Append(ctx, tx, org, "sess-1", working.NewTurn{Role: "user", Content: "make it punchier"})
		return err
	})
	require.NoError(t, appended.Confirm(ctx))
	for _, kv := range []struct {
		ns, key, value string
		scope          strata.Scope
	}{
		{"preferences", "tone", `"playful"`, strata.Scope{OrgID: org, UserID: "u1"}},
		{"preferences", "tone", `"bold"`, strata.Scope{OrgID: org, SessionID: "sess-1"}},
		{"rules", "max_length", `60`, strata.Scope{OrgID: org}},
		{"brand", "palette", `"teal"`, strata.Scope{OrgID: org}},
	} {
		s := pg.NewSession(e.pool, org)
		tx, err := s.Tx(ctx)
		require.NoError(t, err)
		_, _, err = e.kv.Put(ctx, tx, s.AfterCommit, keyvalue.WriteInput{Namespace: kv.ns, Key: kv.key, Scope: kv.scope,
			Value: json.RawMessage(kv.value)})
		require.NoError(t, err)
		require.NoError(t, s.Commit(ctx))
	}
	memory := func(user, kind, text string, md map[string]any) {
		vs, err := e.emb.Embed(ctx, []string{text})
		require.NoError(t, err)
		e.tx(func(tx pgx.Tx) error {
			_, _, err := e.sem.Create(ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: org, UserID: user}, Kind: kind,
				Text: text, Metadata: md, Vector: vs[0], Space: semantic.Space{Embedder: e.emb.Name(), Model: e.emb.Model(), Dims: e.emb.Dims()}})
			return err
		})
	}
	for _, m := range []string{"u1 wants captions in sentence case", "u1's brand colour is warm teal",
		"u1 dislikes jump cuts in captions", "u1 publishes on TikTok, Reels and Shorts"} {
		memory("u1", semantic.KindFact, m, nil)
	}
	memory("u2", semantic.KindFact, "u2 secret: captions in all caps", nil)
	memory("u1", semantic.KindJob, "Winter promo captions and reframe for three channels", map[string]any{
		"job_id": "promo-3", "outcome": "published", "parameters": map[string]any{"lut": "warm-teal-v2"}})
}

// assemble runs one assembly in a unit of work of its own and commits it.
func (e *env) assemble(a *tc.Assembler, req tc.Request) (*tc.Assembled, error) {
	e.t.Helper()
	s := pg.NewSession(e.pool, org)
	out, err := a.Assemble(e.ctx, s, req)
	if err != nil {
		s.Rollback(e.ctx)
		return nil, err
	}
	require.NoError(e.t, s.Commit(e.ctx))
	return out, nil
}

func (e *env) retrievals(operation string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, testenv.OwnerConn(e.t, e.dsn).QueryRow(e.ctx,
		`SELECT count(*) FROM memory_retrievals WHERE org_id = $1 AND operation = $2`, org, operation).Scan(&n))
	return n
}

func fullRequest() tc.Request {
	return tc.Request{Scope: strata.Scope{OrgID: org, UserID: "u1", AgentID: "editor", SessionID: "sess-1"},
		JobID: "promo-7", Query: "captions for the reels version", MaxTokens: 8000, RequestID: "req-1", KeyID: "key-1"}
}

func TestAssembleReadsEveryTierIntoTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	a := tc.NewAssembler(e.deps)

	c, err := e.assemble(a, fullRequest())
	require.NoError(t, err)
	counter, err := tc.NewCounter("gpt-4o")
	require.NoError(t, err)
	require.Equal(t, "o200k_base", c.Encoding)
	require.Equal(t, counter.Count(c.Prompt), c.Tokens)
	var names []string
	for _, s := range c.Sections {
		names = append(names, s.Name)
		require.Zero(t, s.LeftOutCount, s.Name)
	}
	require.Equal(t, []string{tc.SectionJob, tc.SectionWorking, tc.SectionSummary, tc.SectionPreferences, tc.SectionMemories, tc.SectionGraph, tc.SectionSimilarJobs}, names)
	p := c.Prompt
	last := -1
	for _, h := range []string{"## Job promo-7 (running)", "## Working state (session sess-1", "## Preferences",
		"## Relevant memories", "## Similar past jobs"} {
		i := strings.Index(p, h)
		require.Greater(t, i, last, "%q in order in:\n%s", h, p)
		last = i
	}
	for _, s := range []string{"Current step: reframe-tiktok", `- Done: cut → {"asset":"v1.mp4"}`, "- Event #2 render.colour",
		"- In flight: reframe-tiktok, held by editor", `- brief: "spring promo, upbeat"`, "- [user] make it punchier",
		`- preferences/tone = "bold" (session)`, "- rules/max_length = 60 (org)", "u1 wants captions in sentence case",
		"- Job promo-3: Winter promo", `parameters: {"lut":"warm-teal-v2"}`} {
		require.Contains(t, p, s)
	}
	require.NotContains(t, p, "u2 secret", "another user's memory never shows")
	require.NotContains(t, p, "brand/palette", "only the default namespaces")
	require.Equal(t, &tc.Job{JobID: "promo-7", Status: "running", CurrentStep: "reframe-tiktok",
		NextAction: "reframe the graded cut to 9:16", CheckpointVersion: 1, LastEventSeq: 2, CompletedSteps: 2, InFlight: 1}, c.Job)
	require.Equal(t, tc.DefaultKVNamespaces, c.KVNamespaces)
	served := len(c.Sections[4].Included) + len(c.Sections[6].Included)
	require.Positive(t, served)
	require.Equal(t, served, e.retrievals("context"), "what the model was given is in the retrieval log, once committed")

	// A budget that cannot hold everything: the job comes first, what is left out is
	// reported with its cost, and only what was included is logged as served.
	small := fullRequest()
	small.MaxTokens = 150
	c, err = e.assemble(a, small)
	require.NoError(t, err)
	require.LessOrEqual(t, c.Tokens, 150)
	require.Equal(t, counter.Count(c.Prompt), c.Tokens)
	require.Contains(t, c.Prompt, "## Job promo-7")
	leftOut := 0
	for _, s := range c.Sections {
		require.Equal(t, s.Candidates, len(s.Included)+s.LeftOutCount, s.Name)
		for _, lo := range s.LeftOut {
			require.Positive(t, lo.Tokens)
		}
		leftOut += s.LeftOutCount
	}
	require.Positive(t, leftOut)
	require.Empty(t, c.Sections[4].Included, "memories wait for the job")
	require.Equal(t, "left out: the budget was spent on higher-priority sections", c.Sections[4].Note)
	require.Equal(t, served, e.retrievals("context"), "nothing served, nothing logged")

	// Another namespace and tokenizer, no session and no query: the checkpoint's snapshot.
	zero := 0
	c, err = e.assemble(a, tc.Request{Scope: strata.Scope{OrgID: org, UserID: "u1"}, JobID: "promo-7",
		KVNamespaces: []string{"brand"}, Model: "gpt-4", SimilarJobs: &zero})
	require.NoError(t, err)
	require.Equal(t, "cl100k_base", c.Encoding)
	require.Contains(t, c.Prompt, `- brand/palette = "teal" (org)`)
	require.Contains(t, c.Prompt, "## Working state (snapshot from checkpoint v1)\n- cursor: 42")
	require.Equal(t, "no query given", c.Sections[4].Note)

	// Without a side connection (no pool) the similar-jobs search runs on the request's
	// transaction, with the same answer.
	d := e.deps
	d.Pool = nil
	alone, err := e.assemble(tc.NewAssembler(d), fullRequest())
	require.NoError(t, err)
	full, err := e.assemble(a, fullRequest())
	require.NoError(t, err)
	require.Equal(t, full.Prompt, alone.Prompt)
}

func TestAssembleForARestrictedUserYieldsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	a := tc.NewAssembler(e.deps)
	e.tx(func(tx pgx.Tx) error {
		_, _, err := gdpr.Restrict(e.ctx, tx, org, "u1", "compliance", "objection", time.Now())
		return err
	})
	note := "processing of this user's data is restricted (GDPR Art. 18): nothing is assembled"
	for name, req := range map[string]tc.Request{
		"user named":          fullRequest(),
		"job of the user":     {Scope: strata.Scope{OrgID: org}, JobID: "promo-7", Query: "captions"},
		"session of the user": {Scope: strata.Scope{OrgID: org, SessionID: "sess-1"}, Query: "captions"},
	} {
		c, err := e.assemble(a, req)
		require.NoError(t, err, name)
		require.Empty(t, c.Prompt, name)
		require.Zero(t, c.Tokens, name)
		require.Nil(t, c.Job, name)
		require.Len(t, c.Sections, 7, name)
		for _, s := range c.Sections {
			require.Equal(t, note, s.Note, "%s: %s", name, s.Name)
			require.Empty(t, s.Included, "%s: %s", name, s.Name)
		}
	}
	require.Zero(t, e.retrievals("context"), "nothing served")

	// Another user of the org is served as before.
	c, err := e.assemble(a, tc.Request{Scope: strata.Scope{OrgID: org, UserID: "u2"}, Query: "captions"})
	require.NoError(t, err)
	require.Contains(t, c.Prompt, "u2 secret: captions in all caps")
}

// recordingWorking is the real working store, recording what each read went through:
// Redis alone (the assembler's no-Postgres DBTX) or the request's transaction.
type recordingWorking struct {
	*working.Store
	mu    sync.Mutex
	viaTx int
	other int
}

func (w *recordingWorking) note(db pg.DBTX) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := db.(pgx.Tx); ok {
		w.viaTx++
	} else {
		w.other++
	}
}

func (w *recordingWorking) Get(ctx context.Context, db pg.DBTX, org, session string) (working.State, error) {
	w.note(db)
	return w.Store.Get(ctx, db, org, session)
}

func (w *recordingWorking) Turns(ctx context.Context, db pg.DBTX, org, session string) (working.Buffer, error) {
	w.note(db)
	return w.Store.Turns(ctx, db, org, session)
}

func (w *recordingWorking) counts() (viaTx, other int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, o := w.viaTx, w.other
	w.viaTx, w.other = 0, 0
	return v, o
}

// TestAssembleReadsALostSessionFromPostgres: the working state is read from Redis alone
// beside the searches; when Redis lost the session, it is read again through the request's
// transaction and the section is the same as before the loss.
func TestAssembleReadsALostSessionFromPostgres(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rw := &recordingWorking{Store: e.ws}
	d := e.deps
	d.Working = rw
	a := tc.NewAssembler(d)

	before, err := e.assemble(a, fullRequest())
	require.NoError(t, err)
	require.Contains(t, before.Prompt, `- brief: "spring promo, upbeat"`)
	require.Contains(t, before.Prompt, "- [user] make it punchier")
	viaTx, other := rw.counts()
	require.Zero(t, viaTx, "Redis had the session: no Postgres read")
	require.Equal(t, 2, other, "state and turns")

	keys, err := testenv.RedisKeys(e.ctx, e.rdb, e.prefix+"*")
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, testenv.RedisDel(e.ctx, e.rdb, keys))

	after, err := e.assemble(a, fullRequest())
	require.NoError(t, err)
	viaTx, _ = rw.counts()
	require.Positive(t, viaTx, "the lost session is read through the request's transaction")
	require.Equal(t, before.Sections[1].Text, after.Sections[1].Text, "the working state, restored from Postgres")
	require.Equal(t, before.Sections[0].Text, after.Sections[0].Text)
	require.Equal(t, before.Sections[3].Text, after.Sections[3].Text)

	// Restored into Redis: the next assembly reads it from there again.
	_, err = e.assemble(a, fullRequest())
	require.NoError(t, err)
	viaTx, _ = rw.counts()
	require.Zero(t, viaTx)
}

// TestAssembleNamesBadFieldsBare: field errors name the request's fields bare, for the
// caller to locate (the HTTP layer prefixes "body.").
func TestAssembleNamesBadFieldsBare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := tc.NewAssembler(e.deps)
	scope := strata.Scope{OrgID: org}
	for _, c := range []struct {
		req   tc.Request
		field string
	}{
		{tc.Request{Scope: scope, Query: "a\x00b"}, "query"},
		{tc.Request{Scope: scope, KVNamespaces: []string{"ok", "bad ns"}}, "kv_namespaces[1]"},
		{tc.Request{Scope: scope, Trust: []string{"gossip"}}, "trust[0]"},
		{tc.Request{Scope: scope, Provenance: &semantic.ProvenanceFilter{ExcludeAgentIDs: []string{"a b"}}}, "provenance.exclude_agent_ids[0]"},
	} {
		_, err := e.assemble(a, c.req)
		var fe *strata.FieldError
		require.True(t, errors.As(err, &fe), "%v: %v", c.field, err)
		require.Equal(t, c.field, fe.Field)
	}
}

// counts are the round trips sent through a request's transaction, and those of them the
// memory searches sent.
type counts struct {
	all, inSearch, searches atomic.Int64
}

// countingTx is the request's real transaction, counting the statements and batches sent
// through it (each one round trip; BEGIN rides with the first).
type countingTx struct {
	pgx.Tx
	c *counts
}

func (t countingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.c.all.Add(1)
	return t.Tx.Exec(ctx, sql, args...)
}

func (t countingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.c.all.Add(1)
	return t.Tx.Query(ctx, sql, args...)
}

func (t countingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.c.all.Add(1)
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t countingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.c.all.Add(1)
	return t.Tx.SendBatch(ctx, b)
}

// countingSession is a request's unit of work whose transaction counts its round trips.
type countingSession struct {
	*pg.Session
	c counts
}

func (s *countingSession) Tx(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.Session.Tx(ctx)
	return countingTx{tx, &s.c}, err
}

// countingMemories is the real memory store, telling apart the round trips its searches
// send through a counted transaction (nothing else uses the transaction meanwhile: a pgx
// transaction is not safe for concurrent use, and the assembler never shares it).
type countingMemories struct{ *semantic.Store }

func (m countingMemories) Search(ctx context.Context, tx pgx.Tx, q semantic.Query) ([]semantic.Result, semantic.SearchInfo, error) {
	ct, ok := tx.(countingTx)
	if !ok {
		return m.Store.Search(ctx, tx, q)
	}
	before := ct.c.all.Load()
	defer func() { ct.c.inSearch.Add(ct.c.all.Load() - before); ct.c.searches.Add(1) }()
	return m.Store.Search(ctx, tx, q)
}

// TestAssembleRoundTrips: everything read by key (restriction check, resume, events,
// preferences, policy) is one round trip on the request's transaction, the working state
// costs none while Redis has it, and a query adds the searches alone (similar jobs on a
// side connection when one is free at once, after the memory search on the transaction
// when not). When Redis lost the session, reading it goes through the transaction.
func TestAssembleRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	d := e.deps
	d.Memories = countingMemories{e.sem}
	a := tc.NewAssembler(d)
	d.Pool = nil
	alone := tc.NewAssembler(d)
	rt := func(a *tc.Assembler, req tc.Request) (outside, searches int64) {
		t.Helper()
		s := &countingSession{Session: pg.NewSession(e.pool, org)}
		_, err := a.Assemble(e.ctx, s, req)
		require.NoError(t, err)
		require.NoError(t, s.Commit(e.ctx))
		return s.c.all.Load() - s.c.inSearch.Load(), s.c.searches.Load()
	}
	noQuery := fullRequest()
	noQuery.Query = ""
	noJob := noQuery
	noJob.JobID = ""
	for name, req := range map[string]tc.Request{"job, session, preferences": noQuery, "no job": noJob} {
		outside, searches := rt(a, req)
		require.EqualValues(t, 1, outside, name)
		require.Zero(t, searches, name)
	}
	outside, searches := rt(a, fullRequest())
	require.EqualValues(t, 1, outside, "a query adds the searches alone")
	require.Contains(t, []int64{1, 2}, searches, "the memory search, and similar jobs unless a side connection was free")
	outside, searches = rt(alone, fullRequest())
	require.EqualValues(t, 1, outside)
	require.EqualValues(t, 2, searches, "no side connection: both searches on the transaction")

	keys, err := testenv.RedisKeys(e.ctx, e.rdb, e.prefix+"ws:*")
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, testenv.RedisDel(e.ctx, e.rdb, keys))
	outside, _ = rt(a, noQuery)
	require.Greater(t, outside, int64(1), "the lost session is read through the transaction")
	outside, _ = rt(a, noQuery)
	require.EqualValues(t, 1, outside, "and restored into Redis")
}
