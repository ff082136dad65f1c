package eviction_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/working"
)

const org = "acme"

const day = 24 * time.Hour

type env struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	dsn   string
	rdb   redis.UniversalClient
	clock *testenv.Clock
	ev    *eviction.Evictor
	sem   *semantic.Store
	epi   *episodic.Store
	jobs  *jobs.Store
	ws    *working.Store
	emb   embed.Embedder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	cfg.RedisPrefix = prefix
	c := testenv.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	ev := newEvictor(cfg, pool, rdb, slog.New(slog.NewTextHandler(io.Discard, nil)), c.Now)
	return &env{t: t, ctx: context.Background(), pool: pool, dsn: dsn, rdb: rdb, clock: c, ev: ev, sem: ev.Semantic,
		epi: ev.Episodic, jobs: ev.Jobs, ws: ev.Working, emb: embed.NewLexical(384)}
}

func (e *env) tx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	require.NoError(e.t, pg.InOrgTx(e.ctx, e.pool, org, fn))
}

func (e *env) setPolicy(p policy.LifecyclePolicy) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		_, _, err := policy.Save(e.ctx, tx, org, p, e.ev.Defaults, nil, "test", e.clock.Now())
		return err
	})
}

type memOpt struct {
	kind          string
	user, session string
	importance    float64
	pinned        bool
}

func (e *env) memory(text string, o memOpt) semantic.Memory {
	e.t.Helper()
	if o.kind == "" {
		o.kind = "fact"
	}
	vs, err := e.emb.Embed(e.ctx, []string{text})
	require.NoError(e.t, err)
	var m semantic.Memory
	e.tx(func(tx pgx.Tx) error {
		var err error
		m, _, err = e.sem.Insert(e.ctx, tx, semantic.NewMemory{Scope: strata.Scope{OrgID: org, UserID: o.user, SessionID: o.session},
			Kind: o.kind, Text: text, Importance: o.importance, Pinned: o.pinned, Vector: vs[0],
			Space: semantic.Space{Embedder: e.emb.Name(), Model: e.emb.Model(), Dims: e.emb.Dims()}})
		return err
	})
	return m
}

func (e *env) exists(id uuid.UUID) bool {
	e.t.Helper()
	found := true
	e.tx(func(tx pgx.Tx) error {
		_, err := e.sem.Get(e.ctx, tx, org, id)
		if err == strata.ErrNotFound {
			found = false
			return nil
		}
		return err
	})
	return found
}

func (e *env) run(apply bool) eviction.EvictionReport {
	e.t.Helper()
	var rep eviction.EvictionReport
	var after func(context.Context)
	e.tx(func(tx pgx.Tx) error {
		var err error
		rep, after, err = e.ev.Run(e.ctx, tx, org, apply, eviction.WorkerActor)
		return err
	})
	after(e.ctx)
	return rep
}

// item finds the report item of tier/reason/kind.
func item(rep eviction.EvictionReport, tier, reason, kind string) *eviction.EvictionItem {
	for i := range rep.Items {
		it := rep.Items[i]
		if it.Tier == tier && it.Reason == reason && it.Kind == kind {
			return &rep.Items[i]
		}
	}
	return nil
}

func ids(ms ...semantic.Memory) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID.String()
	}
	return out
}

// off is a policy with every eviction rule off, to switch on one at a time.
func off() policy.LifecyclePolicy {
	z, zero := "0", 0
	return policy.LifecyclePolicy{
		Memories: policy.MemoryLifecyclePolicy{Default: policy.MemoryRules{MaxAge: &z, MaxInactivity: &z, MaxItemsPerScope: &zero,
			DeleteSupersededAfter: &z}},
		Working:     policy.WorkingRules{SessionTTL: &z},
		Episodic:    policy.EpisodicRules{CompletedJobRetention: &z},
		Checkpoints: policy.CheckpointRules{KeepVersions: &zero},
		Steps:       policy.StepRules{KeepAttempts: &zero},
		KeyValue:    policy.KeyValueRules{HistoryRetention: &z},
	}
}

func sp(s string) *string { return &s }
func ip(i int) *int       { return &i }

func TestEvictionMaxAgePerKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Memories.Kinds = map[string]policy.MemoryRules{"job": {MaxAge: sp("10d")}}
	e.setPolicy(p)
	job := e.memory("job summary: graded the teaser warm", memOpt{kind: "job"})
	pinnedJob := e.memory("job summary: pinned reference grade", memOpt{kind: "job", pinned: true})
	fact := e.memory("the brand colour is orange", memOpt{})
	e.clock.Advance(9 * day)
	newer := e.memory("job summary: cut the trailer", memOpt{kind: "job"})
	e.clock.Advance(2 * day) // job is 11 days old, newer 2 days

	rep := e.run(true)
	it := item(rep, eviction.TierMemories, eviction.ReasonMaxAge, "job")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, 1, it.Count)
	require.Equal(t, ids(job), it.SampleIDs)
	require.Equal(t, "10d", it.LifecyclePolicy)
	require.Equal(t, 1, rep.Total)
	require.False(t, e.exists(job.ID))
	require.True(t, e.exists(pinnedJob.ID), "pinned memories are exempt")
	require.True(t, e.exists(fact.ID), "the rule is for kind job only")
	require.True(t, e.exists(newer.ID))

	// The audit record lists ids, policy and reason, never content.
	var recs []audit.Record
	e.tx(func(tx pgx.Tx) error {
		var err error
		recs, err = audit.List(e.ctx, tx, org, audit.Filter{Action: "evict", Limit: 10})
		return err
	})
	require.Len(t, recs, 1)
	d := recs[0].Details
	require.Equal(t, "max_age", d["reason"])
	require.Equal(t, "job", d["kind"])
	require.Equal(t, "10d", d["policy"])
	require.EqualValues(t, 1, d["count"])
	require.Equal(t, []any{job.ID.String()}, d["ids"])
	raw, _ := json.Marshal(recs[0])
	require.NotContains(t, string(raw), "teaser")

	// Idempotent: nothing left to do.
	require.Equal(t, 0, e.run(true).Total)
}

func TestEvictionMaxInactivity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Memories.Default.MaxInactivity = sp("30d")
	e.setPolicy(p)
	idle := e.memory("the client prefers serif fonts", memOpt{})
	read := e.memory("the client prefers warm colour grades", memOpt{})
	verified := e.memory("the deadline is friday", memOpt{})
	e.clock.Advance(20 * day)
	e.tx(func(tx pgx.Tx) error { // read at day 20 (search served it)
		return e.sem.RecordServed(e.ctx, tx, semantic.Served{Scope: strata.Scope{OrgID: org}, RequestID: "r1", Operation: "search"},
			[]semantic.Result{{Memory: read}})
	})
	e.tx(func(tx pgx.Tx) error { _, err := e.sem.Verify(e.ctx, tx, org, verified.ID, "k"); return err })
	e.clock.Advance(11 * day) // idle: 31 days; read and verified: 11

	prev := e.run(false)
	it := item(prev, eviction.TierMemories, eviction.ReasonMaxInactivity, "fact")
	require.NotNil(t, it)
	require.Equal(t, ids(idle), it.SampleIDs)
	require.True(t, e.exists(idle.ID), "a preview changes nothing")
	e.run(true)
	require.False(t, e.exists(idle.ID))
	require.True(t, e.exists(read.ID))
	require.True(t, e.exists(verified.ID))
}

func TestEvictionMaxItemsPerScopeByRetentionScore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Memories.Kinds = map[string]policy.MemoryRules{"fact": {MaxItemsPerScope: ip(2)}}
	e.setPolicy(p)
	low := e.memory("u1 fact low importance", memOpt{user: "u1", importance: 0.1})
	high := e.memory("u1 fact high importance", memOpt{user: "u1", importance: 0.9})
	mid := e.memory("u1 fact middle importance", memOpt{user: "u1", importance: 0.5})
	pinned := e.memory("u1 pinned fact", memOpt{user: "u1", importance: 0, pinned: true})
	other := e.memory("u2 only fact", memOpt{user: "u2", importance: 0})
	pref := e.memory("u1 preference a", memOpt{user: "u1", kind: "preference"})
	pref2 := e.memory("u1 preference b", memOpt{user: "u1", kind: "preference"})
	pref3 := e.memory("u1 preference c", memOpt{user: "u1", kind: "preference"})
	e.clock.Advance(time.Hour)

	rep := e.run(true)
	it := item(rep, eviction.TierMemories, eviction.ReasonMaxItems, "fact")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, ids(low), it.SampleIDs, "the lowest retention score goes first")
	require.Equal(t, 1, rep.Total)
	for _, m := range []semantic.Memory{high, mid, pinned, other, pref, pref2, pref3} {
		require.True(t, e.exists(m.ID), m.Text)
	}
	require.False(t, e.exists(low.ID))
	require.Equal(t, 0, e.run(true).Total)
}

func TestEvictionSupersededVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Memories.Default.DeleteSupersededAfter = sp("5d")
	e.setPolicy(p)
	m := e.memory("the logo is blue", memOpt{})
	pm := e.memory("the slogan is short", memOpt{pinned: true})
	space := semantic.Space{Embedder: e.emb.Name(), Model: e.emb.Model(), Dims: e.emb.Dims()}
	var cur, pcur semantic.Memory
	e.tx(func(tx pgx.Tx) error {
		vs, _ := e.emb.Embed(e.ctx, []string{"the logo is green", "the slogan is long"})
		t1, t2 := "the logo is green", "the slogan is long"
		var err error
		if cur, err = e.sem.Supersede(e.ctx, tx, org, m.ID, semantic.Patch{Text: &t1, Vector: vs[0], Space: space}); err != nil {
			return err
		}
		pcur, err = e.sem.Supersede(e.ctx, tx, org, pm.ID, semantic.Patch{Text: &t2, Vector: vs[1], Space: space})
		return err
	})
	e.clock.Advance(4 * day)
	require.Equal(t, 0, e.run(true).Total, "superseded 4 days ago: kept")
	e.clock.Advance(2 * day)
	rep := e.run(true)
	it := item(rep, eviction.TierMemories, eviction.ReasonSuperseded, "fact")
	require.NotNil(t, it)
	require.Equal(t, ids(m), it.SampleIDs)
	require.False(t, e.exists(m.ID))
	require.True(t, e.exists(cur.ID), "the current version stays")
	require.True(t, e.exists(pm.ID), "a pinned lineage keeps its history")
	require.True(t, e.exists(pcur.ID))
}

func TestEvictionWorkingSessionTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Working.SessionTTL = sp("30d")
	e.setPolicy(p)
	put := func(session string) {
		e.tx(func(tx pgx.Tx) error {
			_, _, err := e.ws.Put(e.ctx, tx, org, session, working.Write{State: json.RawMessage(`{"step":1}`), UserID: "u1",
				TTL: 24 * time.Hour})
			return err
		})
	}
	put("old")
	e.clock.Advance(20 * day)
	put("recent")
	e.clock.Advance(11 * day) // old idle 31 days, recent 11

	rep := e.run(true)
	it := item(rep, eviction.TierWorking, eviction.ReasonSessionTTL, "")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, []string{"old"}, it.SampleIDs)
	owner := testenv.OwnerConn(t, e.dsn)
	var state *string
	var deleted bool
	require.NoError(t, owner.QueryRow(e.ctx, `SELECT state::text, deleted_at IS NOT NULL FROM working_sessions
		WHERE org_id = $1 AND session_id = 'old'`, org).Scan(&state, &deleted))
	require.Nil(t, state)
	require.True(t, deleted, "a tombstone keeps the version counter")
	require.NoError(t, owner.QueryRow(e.ctx, `SELECT deleted_at IS NOT NULL FROM working_sessions
		WHERE org_id = $1 AND session_id = 'recent'`, org).Scan(&deleted))
	require.False(t, deleted)
	_, err := e.ws.Get(e.ctx, e.pool, org, "old")
	require.ErrorIs(t, err, strata.ErrNotFound, "gone from Redis and Postgres")
	require.Equal(t, 0, e.run(true).Total)
}

func (e *env) finishedJob(id string, edits int) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		if _, _, err := e.jobs.PutJob(e.ctx, tx, org, id, jobs.JobSpec{Goal: "render " + id}, nil); err != nil {
			return err
		}
		in := make([]episodic.EventInput, edits)
		for i := range in {
			in[i] = episodic.EventInput{Op: "crop", Params: json.RawMessage(fmt.Sprintf(`{"x":%d}`, i))}
		}
		if _, err := e.epi.Append(e.ctx, tx, org, id, in); err != nil {
			return err
		}
		_, err := e.jobs.CompleteJob(e.ctx, tx, org, id, "completed", nil, int64(edits))
		return err
	})
}

func (e *env) consolidated(id string) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		row, ok, err := e.jobs.ClaimOutbox(e.ctx, tx, org, id, jobs.OutboxKindConsolidate, false)
		require.True(e.t, ok)
		if err != nil {
			return err
		}
		return e.jobs.MarkOutboxProcessed(e.ctx, tx, org, row.ID, e.clock.Now())
	})
}

func (e *env) eventCount(id string) int {
	var n int
	require.NoError(e.t, pg.InOrgTx(e.ctx, e.pool, org, func(tx pgx.Tx) error {
		return tx.QueryRow(e.ctx, `SELECT count(*) FROM episodic_events WHERE org_id = $1 AND job_id = $2`, org, id).Scan(&n)
	}))
	return n
}

func TestEvictionEpisodicRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Episodic.CompletedJobRetention = sp("180d")
	e.setPolicy(p)
	e.finishedJob("old", 5)
	e.finishedJob("pending", 3) // never consolidated: its summary still needs the log
	e.finishedJob("parent", 4)
	e.consolidated("old")
	e.consolidated("parent")
	e.tx(func(tx pgx.Tx) error { _, err := e.epi.Fork(e.ctx, tx, org, "parent", "child", 2); return err })
	e.clock.Advance(100 * day)
	e.finishedJob("young", 2)
	e.consolidated("young")
	e.clock.Advance(81 * day)

	rep := e.run(true)
	it := item(rep, eviction.TierEpisodic, eviction.ReasonJobRetention, "")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, []string{"old"}, it.SampleIDs, "unconsolidated, forked and young logs are kept")
	require.Equal(t, 0, e.eventCount("old"))
	require.Equal(t, 3, e.eventCount("pending"))
	require.Equal(t, 4, e.eventCount("parent"))
	require.Equal(t, 2, e.eventCount("young"))
	var evs []episodic.Event
	e.tx(func(tx pgx.Tx) error {
		var err error
		evs, err = e.epi.List(e.ctx, tx, org, "old", episodic.ListQuery{})
		return err
	})
	require.Empty(t, evs, "the log reads as empty, not 404")
	require.Equal(t, 0, e.run(true).Total)
}

func TestEvictionCheckpointVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Checkpoints.KeepVersions = ip(2)
	e.setPolicy(p)
	e.tx(func(tx pgx.Tx) error {
		if _, _, err := e.jobs.PutJob(e.ctx, tx, org, "j", jobs.JobSpec{Goal: "g"}, nil); err != nil {
			return err
		}
		for i := 1; i <= 6; i++ {
			if _, err := e.jobs.PutCheckpoint(e.ctx, tx, org, "j", jobs.CheckpointInput{Goal: "g", CurrentStep: fmt.Sprint(i)}, nil); err != nil {
				return err
			}
		}
		_, _, err := e.jobs.Fork(e.ctx, tx, org, "j", 2, jobs.ForkInput{NewJobID: "j-fork"})
		return err
	})
	rep := e.run(true)
	it := item(rep, eviction.TierCheckpoints, eviction.ReasonKeepVersions, "")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, []string{"j@1", "j@3", "j@4"}, it.SampleIDs, "version 2 is a fork point")
	var versions []int64
	e.tx(func(tx pgx.Tx) error {
		rows, err := tx.Query(e.ctx, `SELECT version FROM job_checkpoints WHERE org_id = $1 AND job_id = 'j' ORDER BY version`, org)
		if err != nil {
			return err
		}
		versions, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	require.Equal(t, []int64{2, 5, 6}, versions)
	e.tx(func(tx pgx.Tx) error { // the fork still reads its starting point
		_, err := e.jobs.GetCheckpoint(e.ctx, tx, org, "j-fork", 2)
		return err
	})
	require.Equal(t, 0, e.run(true).Total)
}

// Step attempts beyond the newest N of each step go (preview first: nothing changes); the
// current claim stays whatever its age.
func TestEvictionStepAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.Steps.KeepAttempts = ip(2)
	e.setPolicy(p)
	e.tx(func(tx pgx.Tx) error {
		if _, _, err := e.jobs.PutJob(e.ctx, tx, org, "j", jobs.JobSpec{Goal: "g"}, nil); err != nil {
			return err
		}
		for i := 1; i <= 4; i++ {
			c, err := e.jobs.Start(e.ctx, tx, org, "j", "s", jobs.StartInput{Owner: "w"})
			if err != nil {
				return err
			}
			if i < 4 {
				if _, err := e.jobs.Fail(e.ctx, tx, org, "j", "s", c.FencingToken, "boom", jobs.DispositionRetryable); err != nil {
					return err
				}
			}
		}
		_, err := e.jobs.Start(e.ctx, tx, org, "j", "one", jobs.StartInput{Owner: "w"})
		return err
	})
	count := func() (n int) {
		e.tx(func(tx pgx.Tx) error {
			return tx.QueryRow(e.ctx, `SELECT count(*) FROM job_step_attempts WHERE org_id = $1`, org).Scan(&n)
		})
		return n
	}
	require.Equal(t, 5, count())
	rep := e.run(false)
	it := item(rep, eviction.TierAttempts, eviction.ReasonKeepAttempts, "")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, []string{"j/s#1", "j/s#2"}, it.SampleIDs)
	require.Equal(t, 5, count(), "a preview changes nothing")
	require.Equal(t, 2, e.run(true).Total)
	require.Equal(t, 3, count())
	var tokens []int64
	e.tx(func(tx pgx.Tx) error {
		as, err := e.jobs.ListAttempts(e.ctx, tx, org, "j", "s", 0, 10)
		for _, a := range as {
			tokens = append(tokens, a.FencingToken)
		}
		return err
	})
	require.Equal(t, []int64{3, 4}, tokens, "the newest two, the current claim among them")
	require.Equal(t, 0, e.run(true).Total)
}

func TestEvictionKeyValueHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := off()
	p.KeyValue.HistoryRetention = sp("90d")
	e.setPolicy(p)
	for i := 1; i <= 3; i++ {
		s := pg.NewSession(e.pool, org)
		tx, err := s.Tx(e.ctx)
		require.NoError(t, err)
		_, _, err = e.ev.KV.Put(e.ctx, tx, s.AfterCommit, keyvalueInput(i))
		require.NoError(t, err)
		require.NoError(t, s.Commit(e.ctx))
	}
	owner := testenv.OwnerConn(t, e.dsn)
	_, err := owner.Exec(e.ctx, `UPDATE kv_versions SET written_at = $1 WHERE version < 3`, e.clock.Now().Add(-100*day))
	require.NoError(t, err)
	_, err = owner.Exec(e.ctx, `UPDATE kv_versions SET written_at = $1 WHERE version = 3`, e.clock.Now().Add(-95*day))
	require.NoError(t, err)
	rep := e.run(true)
	it := item(rep, eviction.TierKeyValue, eviction.ReasonKVHistory, "")
	require.NotNil(t, it, "%+v", rep)
	require.Equal(t, []string{"prefs/theme@user#1", "prefs/theme@user#2"}, it.SampleIDs, "the current version stays, however old")
	var n int
	require.NoError(t, owner.QueryRow(e.ctx, `SELECT count(*) FROM kv_versions`).Scan(&n))
	require.Equal(t, 1, n)
	raw, _ := json.Marshal(rep)
	require.NotContains(t, string(raw), "u-secret", "refs never name the scope id (a user id)")
}

func TestEvictionPreviewEqualsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The defaults: max_inactivity 365d, superseded 90d, sessions 30d, logs 180d.
	var ms []semantic.Memory
	for i := range 12 {
		ms = append(ms, e.memory(fmt.Sprintf("old fact number %d about the edit", i), memOpt{user: "u1"}))
	}
	pinned := e.memory("pinned forever", memOpt{pinned: true})
	e.finishedJob("done", 3)
	e.consolidated("done")
	e.clock.Advance(400 * day)
	fresh := e.memory("a fresh fact", memOpt{})

	countRows := func() (n int) {
		e.tx(func(tx pgx.Tx) error {
			return tx.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM memories) + (SELECT count(*) FROM episodic_events)`).Scan(&n)
		})
		return n
	}
	before := countRows()
	prev := e.run(false)
	require.False(t, prev.Applied)
	require.Equal(t, before, countRows(), "a preview changes nothing")
	require.Equal(t, 13, prev.Total, "%+v", prev) // 12 memories + 1 log
	again := e.run(false)
	require.Equal(t, prev, again)

	run := e.run(true)
	require.True(t, run.Applied)
	prev.Applied = true
	require.Equal(t, prev, run, "run reports exactly what preview announced")
	for _, m := range ms {
		require.False(t, e.exists(m.ID))
	}
	require.True(t, e.exists(pinned.ID))
	require.True(t, e.exists(fresh.ID))
	require.Equal(t, 0, e.run(true).Total, "re-running finds nothing")
	require.Equal(t, 0, e.run(false).Total)
}

func keyvalueInput(i int) keyvalue.WriteInput {
	return keyvalue.WriteInput{Namespace: "prefs", Key: "theme", Scope: strata.Scope{OrgID: org, UserID: "u-secret"},
		Value: json.RawMessage(fmt.Sprintf(`{"v":%d}`, i)), Actor: "k"}
}

// newEvictor builds an evictor as the server composes one (internal/app), on the test's
// clock.
func newEvictor(cfg config.Config, pool *pgxpool.Pool, rdb redis.UniversalClient, log *slog.Logger, now func() time.Time) *eviction.Evictor {
	return &eviction.Evictor{
		Semantic: semantic.NewStore(semantic.Options{DedupThreshold: cfg.DedupThreshold, StaleAfter: cfg.VerifyAge}, now),
		Episodic: episodic.NewStore(episodic.Options{MaxJSONDepth: cfg.MaxJSONDepth}),
		Jobs:     jobs.NewStore(cfg.StalledAfter, now),
		Working:  working.New(pool, rdb, working.Options{Prefix: cfg.RedisPrefix, TTL: cfg.SessionTTL, Now: now}),
		KV:       keyvalue.New(pool, rdb, keyvalue.Options{Prefix: cfg.RedisPrefix, Log: log}),
		Defaults: policy.DefaultPolicy(cfg.VerifyAge),
		Now:      now,
		Log:      log,
	}
}
