package consolidation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

const org = "acme"
const day = 24 * time.Hour

type env struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	dsn   string
	cfg   config.Config
	clock *testenv.Clock
	c     *consolidation.Consolidator
	emb   embed.Embedder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	clk := testenv.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	emb := embed.NewLexical(384)
	c := newConsolidator(cfg, pool, emb, slog.New(slog.NewTextHandler(io.Discard, nil)), clk.Now)
	return &env{t: t, ctx: context.Background(), pool: pool, dsn: dsn, cfg: cfg, clock: clk, c: c, emb: emb}
}

func (e *env) tx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	require.NoError(e.t, pg.InOrgTx(e.ctx, e.pool, org, fn))
}

func (e *env) setPolicy(p policy.LifecyclePolicy) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		_, _, err := policy.Save(e.ctx, tx, org, p, e.c.Defaults, nil, "test", e.clock.Now())
		return err
	})
}

func (e *env) run(tasks ...string) consolidation.ConsolidationReport {
	e.t.Helper()
	var rep consolidation.ConsolidationReport
	e.tx(func(tx pgx.Tx) error {
		var err error
		rep, _, err = e.c.RunTx(e.ctx, tx, org, tasks)
		return err
	})
	return rep
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// mediaJob runs a small media job through the stores: two steps, edits with a revert and a
// replaced edit, an asset, and completion (which enqueues the outbox row).
func (e *env) mediaJob(id, user string) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		js, es := e.c.Jobs, e.c.Episodic
		if _, _, err := js.PutJob(e.ctx, tx, org, id, jobs.JobSpec{Goal: "Colour grade and crop the teaser for " + id,
			UserID: user, AgentID: "editor"}, nil); err != nil {
			return err
		}
		if err := es.EnsureJob(e.ctx, tx, org, id); err != nil {
			return err
		}
		for _, step := range []string{"grade", "crop"} {
			cl, err := js.Start(e.ctx, tx, org, id, step, jobs.StartInput{Owner: "editor"})
			if err != nil {
				return err
			}
			e.clock.Advance(30 * time.Second)
			if _, err := js.Complete(e.ctx, tx, org, id, step, cl.FencingToken, raw(`{"ok":true}`)); err != nil {
				return err
			}
		}
		evs, err := es.Append(e.ctx, tx, org, id, []episodic.EventInput{
			{Op: "color.grade", Params: raw(`{"lut":"cold","exposure":0.1}`)},
			{Op: "color.grade", Params: raw(`{"lut":"teal","exposure":0.2}`)},
			{Op: "crop", Params: raw(`{"w":1920,"h":1080}`)},
			{Op: "color.grade", Params: raw(`{"lut":"warm","exposure":0.3}`)},
			{Op: "crop", Params: raw(`{"w":1080,"h":1080}`)},
		})
		if err != nil {
			return err
		}
		if _, _, err := es.Revert(e.ctx, tx, org, id, evs[4].Seq, episodic.RevertInput{Reason: "square was wrong"}); err != nil {
			return err
		}
		if _, _, err := es.PutAsset(e.ctx, tx, org, "teaser-"+id, episodic.AssetInput{URI: "s3://b/teaser.mp4",
			MediaType: "video/mp4", JobID: id, Seq: evs[3].Seq}, nil); err != nil {
			return err
		}
		e.clock.Advance(time.Minute)
		_, err = js.CompleteJob(e.ctx, tx, org, id, "completed", raw(`{"result":"delivered"}`), evs[4].Seq+1)
		return err
	})
}

func (e *env) jobMemories() []semantic.Memory {
	e.t.Helper()
	var ms []semantic.Memory
	e.tx(func(tx pgx.Tx) error {
		rows, err := tx.Query(e.ctx, `SELECT id FROM memories WHERE org_id = $1 AND kind = 'job' AND valid_to IS NULL ORDER BY id`, org)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		ms, err = e.c.Semantic.GetMany(e.ctx, tx, org, ids)
		return err
	})
	return ms
}

func (e *env) outboxProcessed(job string) bool {
	var done bool
	e.tx(func(tx pgx.Tx) error {
		var err error
		done, err = e.c.Jobs.OutboxDone(e.ctx, tx, org, job)
		return err
	})
	return done
}

func TestSettledParameters(t *testing.T) {
	t.Parallel()
	evs := []episodic.Event{
		{Seq: 1, Op: "a", Params: raw(`{"v":1}`)},
		{Seq: 2, Op: "b", Params: raw(`{"v":1}`)},
		{Seq: 3, Op: "a", Params: raw(`{"v":2}`)},
		{Seq: 4, Op: "revert", RevertsSeq: 3},
		{Seq: 5, Op: "c", Params: raw(`{}`)},
		{Seq: 6, Op: "revert", RevertsSeq: 5},
		{Seq: 7, Op: episodic.OpCompaction, Params: raw(`{}`)},
	}
	settled, edits, reverted, overridden := consolidation.Settle(evs)
	require.Equal(t, []consolidation.Edit{{Op: "a", Params: raw(`{"v":1}`), Seq: 1}, {Op: "b", Params: raw(`{"v":1}`), Seq: 2}}, settled,
		"a falls back to its last edit not reverted; c was reverted entirely")
	require.Equal(t, 4, edits)
	require.Equal(t, 2, reverted)
	require.Equal(t, 0, overridden)
}

func TestJobSummaryExtractive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mediaJob("job-1", "u1")
	res, err := e.c.SummarizeJob(e.ctx, org, "job-1")
	require.NoError(t, err)
	require.Equal(t, "written", res.Status)
	require.Equal(t, "extractive", res.Summarizer)
	require.True(t, e.outboxProcessed("job-1"))

	ms := e.jobMemories()
	require.Len(t, ms, 1)
	m := ms[0]
	require.Equal(t, *res.MemoryID, m.ID)
	require.Equal(t, "u1", m.UserID, "job memories live at the job's user level")
	require.Equal(t, "consolidated", m.Trust)
	require.Equal(t, "job-1", m.Provenance.JobID)
	md := m.Metadata
	require.Equal(t, "job-1", md["job_id"])
	require.Equal(t, map[string]any{"result": "delivered"}, md["outcome"])
	require.Equal(t, map[string]any{
		"color.grade": map[string]any{"lut": "warm", "exposure": 0.3},
		"crop":        map[string]any{"w": float64(1920), "h": float64(1080)},
	}, md["parameters"], "final parameters per op: the last edit not reverted")
	require.EqualValues(t, 1, md["reverted_edits"])
	require.EqualValues(t, 2, md["overridden_edits"])
	require.Len(t, md["steps"], 2)
	require.Len(t, md["assets"], 1)
	require.Contains(t, m.Text, "Job job-1 (completed): Colour grade and crop the teaser for job-1.")
	require.Contains(t, m.Text, `color.grade {"lut":"warm","exposure":0.3}`)
	require.Contains(t, m.Text, "teaser-job-1 v1 (video/mp4)")
	require.Contains(t, m.Text, "1 reverted, 2 replaced")

	// Deterministic and idempotent: a second run writes nothing.
	res2, err := e.c.SummarizeJob(e.ctx, org, "job-1")
	require.NoError(t, err)
	require.Equal(t, "exists", res2.Status)
	require.Equal(t, res.MemoryID, res2.MemoryID)
	require.Len(t, e.jobMemories(), 1)
	rep := e.run(consolidation.TaskJobSummaries)
	require.Equal(t, 0, rep.JobSummaries.Written+rep.JobSummaries.Exists, "the outbox row is processed")
}

// chatServer speaks the chat-completions wire format; fail makes it answer 500.
func chatServer(t *testing.T, answer string, fail bool) (*httptest.Server, *[]map[string]any) {
	var mu sync.Mutex
	var reqs []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, "not found", 404)
			return
		}
		var body map[string]any
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		mu.Lock()
		reqs = append(reqs, body)
		mu.Unlock()
		if fail {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"error":{"message":"model overloaded","type":"server_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": answer}}},
			"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &reqs
}

func TestJobSummaryLLM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	answer := "Graded the teaser with the warm LUT at exposure 0.3 and kept the 1920x1080 crop; the square crop was reverted."
	srv, reqs := chatServer(t, "  "+answer+"\n", false)
	llm, err := consolidation.NewLLM(consolidation.LLMOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "summary-model"})
	require.NoError(t, err)
	e.c.Summarizer = llm
	e.mediaJob("job-llm", "")
	res, err := e.c.SummarizeJob(e.ctx, org, "job-llm")
	require.NoError(t, err)
	require.Equal(t, "llm:summary-model", res.Summarizer)
	ms := e.jobMemories()
	require.Len(t, ms, 1)
	require.Equal(t, answer, ms[0].Text)
	require.Equal(t, "llm:summary-model", ms[0].Metadata["summarizer"])
	require.Equal(t, map[string]any{"lut": "warm", "exposure": 0.3}, ms[0].Metadata["parameters"].(map[string]any)["color.grade"],
		"the settled parameters come from the log, not from the model")

	require.Len(t, *reqs, 1)
	req := (*reqs)[0]
	require.Equal(t, "summary-model", req["model"])
	msgs := req["messages"].([]any)
	require.Len(t, msgs, 2)
	require.Equal(t, "system", msgs[0].(map[string]any)["role"])
	user := msgs[1].(map[string]any)["content"].(string)
	var facts map[string]any
	require.NoError(t, json.Unmarshal([]byte(user), &facts), "the facts travel as JSON")
	require.Equal(t, "job-llm", facts["job_id"])
	require.Contains(t, user, `"lut":"warm"`)

	// A failing model falls back to the extractive summary.
	e2 := newEnv(t)
	bad, _ := chatServer(t, "", true)
	llm2, err := consolidation.NewLLM(consolidation.LLMOptions{BaseURL: bad.URL + "/v1", Model: "summary-model"})
	require.NoError(t, err)
	e2.c.Summarizer = llm2
	e2.mediaJob("job-down", "")
	res, err = e2.c.SummarizeJob(e2.ctx, org, "job-down")
	require.NoError(t, err)
	require.Equal(t, "extractive", res.Summarizer)
	ms = e2.jobMemories()
	require.Len(t, ms, 1)
	require.True(t, strings.HasPrefix(ms[0].Text, "Job job-down (completed)"), ms[0].Text)
}

func TestCompactionHidesSupersededRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tx(func(tx pgx.Tx) error {
		if _, _, err := e.c.Jobs.PutJob(e.ctx, tx, org, "long", jobs.JobSpec{Goal: "tune"}, nil); err != nil {
			return err
		}
		in := []episodic.EventInput{{Op: "ingest", Params: raw(`{"src":"a"}`)}} // 1: settled
		for i := range 5 {                                                      // 2..6: replaced by 7
			in = append(in, episodic.EventInput{Op: "grade", Params: raw(fmt.Sprintf(`{"v":%d}`, i))})
		}
		in = append(in, episodic.EventInput{Op: "grade", Params: raw(`{"v":99}`)}) // 7: settled
		in = append(in, episodic.EventInput{Op: "crop", Params: raw(`{"w":1}`)})   // 8: reverted by 9
		if _, err := e.c.Episodic.Append(e.ctx, tx, org, "long", in); err != nil {
			return err
		}
		if _, _, err := e.c.Episodic.Revert(e.ctx, tx, org, "long", 8, episodic.RevertInput{}); err != nil { // 9
			return err
		}
		_, err := e.c.Jobs.CompleteJob(e.ctx, tx, org, "long", "completed", nil, 9)
		return err
	})
	e.clock.Advance(6 * day)
	require.Equal(t, 0, e.run(consolidation.TaskCompaction).Compaction.Jobs, "younger than compact_after (7d)")
	e.clock.Advance(2 * day)
	rep := e.run(consolidation.TaskCompaction)
	require.Equal(t, 1, rep.Compaction.Jobs)
	require.Equal(t, 1, rep.Compaction.Runs, "2..6 is a run; 8..9 is shorter than compact_min_run (3)")
	require.Equal(t, 5, rep.Compaction.Events)

	var view, rawView []episodic.Event
	e.tx(func(tx pgx.Tx) error {
		var err error
		if view, err = e.c.Episodic.List(e.ctx, tx, org, "long", episodic.ListQuery{HideCompacted: true}); err != nil {
			return err
		}
		rawView, err = e.c.Episodic.List(e.ctx, tx, org, "long", episodic.ListQuery{})
		return err
	})
	seqs := func(evs []episodic.Event) []int64 {
		out := []int64{}
		for _, ev := range evs {
			out = append(out, ev.Seq)
		}
		return out
	}
	require.Equal(t, []int64{1, 7, 8, 9, 10}, seqs(view))
	require.Len(t, rawView, 10, "raw events remain")
	sum := view[4]
	require.Equal(t, episodic.OpCompaction, sum.Op)
	var params map[string]any
	require.NoError(t, json.Unmarshal(sum.Params, &params))
	require.EqualValues(t, 2, params["from_seq"])
	require.EqualValues(t, 6, params["to_seq"])
	require.Contains(t, string(sum.Result), "Compacted events 2–6: 5 superseded edits (grade ×5)")

	// Once per job.
	rep = e.run(consolidation.TaskCompaction)
	require.Equal(t, 0, rep.Compaction.Jobs)

	// Retention later removes the raw events with the rest of the log.
	var n int
	e.tx(func(tx pgx.Tx) error {
		var err error
		var m int64
		m, _, err = e.c.Episodic.DeleteLog(e.ctx, tx, org, "long")
		n = int(m)
		return err
	})
	require.Equal(t, 10, n)
}

func (e *env) insert(text string, sc strata.Scope, prov semantic.Provenance, pinned bool, imp float64) semantic.Memory {
	e.t.Helper()
	vs, err := e.emb.Embed(e.ctx, []string{text})
	require.NoError(e.t, err)
	sc.OrgID = org
	var m semantic.Memory
	e.tx(func(tx pgx.Tx) error {
		m, _, err = e.c.Semantic.Insert(e.ctx, tx, semantic.NewMemory{Scope: sc, Kind: "fact", Text: text, Importance: imp,
			Pinned: pinned, Provenance: prov, Vector: vs[0], Space: semantic.Space{Embedder: e.emb.Name(), Model: e.emb.Model(), Dims: e.emb.Dims()}})
		return err
	})
	return m
}

func (e *env) get(id uuid.UUID) semantic.Memory {
	e.t.Helper()
	var m semantic.Memory
	e.tx(func(tx pgx.Tx) error {
		var err error
		m, err = e.c.Semantic.Get(e.ctx, tx, org, id)
		return err
	})
	return m
}

func TestMergeKeepsProvenance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u1 := strata.Scope{UserID: "u1"}
	seq := int64(4)
	a := e.insert("The user prefers dark mode in the editor.", u1, semantic.Provenance{KeyID: "k1", AgentID: "agent-a", JobID: "job-a"}, false, 0.4)
	b := e.insert("The user prefers dark mode in the editor", u1, semantic.Provenance{KeyID: "k2", AgentID: "agent-b", JobID: "job-b", EventSeq: &seq}, false, 0.8)
	c := e.insert("the user prefers dark mode in the editor!", u1, semantic.Provenance{KeyID: "k3"}, false, 0.5)
	light := e.insert("The user prefers light mode in the terminal.", u1, semantic.Provenance{}, false, 0.5)
	other := e.insert("The user prefers dark mode in the editor.", strata.Scope{UserID: "u2"}, semantic.Provenance{}, false, 0.5)
	e.clock.Advance(time.Minute)

	rep := e.run(consolidation.TaskMerge)
	require.Equal(t, 1, rep.Merge.Clusters, "%+v", rep.Merge)
	require.Equal(t, 2, rep.Merge.Superseded)
	item := rep.Merge.Items[0]
	merged := e.get(item.MemoryID)
	require.Equal(t, b.RootID, merged.RootID, "the most important memory survives, as a new version")
	require.Equal(t, 2, merged.Version)
	require.Nil(t, merged.ValidTo)
	require.InDelta(t, 0.8, merged.Importance, 1e-6)
	from := merged.Metadata["merged_from"].([]any)
	require.Len(t, from, 2)
	got := map[string]map[string]any{}
	for _, f := range from {
		p := f.(map[string]any)
		got[p["id"].(string)] = p
	}
	require.Equal(t, "job-a", got[a.ID.String()]["job_id"])
	require.Equal(t, "agent-a", got[a.ID.String()]["agent_id"])
	require.Equal(t, "k1", got[a.ID.String()]["key_id"])
	require.Equal(t, "k3", got[c.ID.String()]["key_id"])
	require.Equal(t, "job-b", merged.Provenance.JobID, "the survivor keeps its own provenance")

	for _, x := range []semantic.Memory{a, c} {
		old := e.get(x.ID) // superseded, not deleted
		require.NotNil(t, old.ValidTo)
		require.Equal(t, merged.ID, *old.SupersededBy)
	}
	require.Nil(t, e.get(light.ID).ValidTo, "light mode is another fact")
	require.Nil(t, e.get(other.ID).ValidTo, "another scope is never merged")

	// Search serves the merged memory only.
	var res []semantic.Result
	e.tx(func(tx pgx.Tx) error {
		vs, _ := e.emb.Embed(e.ctx, []string{"dark mode"})
		var err error
		res, _, err = e.c.Semantic.Search(e.ctx, tx, semantic.Query{Scope: strata.Scope{OrgID: org, UserID: "u1"}, Text: "dark mode",
			Vector: vs[0], Space: semantic.Space{Embedder: e.emb.Name(), Model: e.emb.Model(), Dims: e.emb.Dims()}, TopK: 10})
		return err
	})
	var served []uuid.UUID
	for _, r := range res {
		served = append(served, r.Memory.ID)
	}
	require.Contains(t, served, merged.ID)
	require.NotContains(t, served, a.ID)
	require.NotContains(t, served, c.ID)

	// Idempotent.
	e.clock.Advance(time.Minute)
	rep = e.run(consolidation.TaskMerge)
	require.Equal(t, 0, rep.Merge.Clusters)
}

func (e *env) served(m semantic.Memory, session string, times int) {
	e.t.Helper()
	e.tx(func(tx pgx.Tx) error {
		for i := range times {
			if err := e.c.Semantic.RecordServed(e.ctx, tx, semantic.Served{Scope: strata.Scope{OrgID: org, UserID: m.UserID, SessionID: session},
				RequestID: fmt.Sprintf("r-%s-%d", session, i), Operation: "search"}, []semantic.Result{{Memory: m}}); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestPromotionThreshold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s1 := strata.Scope{UserID: "u1", SessionID: "s1"}
	s2 := strata.Scope{UserID: "u1", SessionID: "s2"}
	hotA := e.insert("The user's company is called Acme Films.", s1, semantic.Provenance{JobID: "j1"}, false, 0.5)
	hotB := e.insert("The user's company is called Acme Films", s2, semantic.Provenance{JobID: "j2"}, false, 0.7)
	cold1 := e.insert("The user likes long coffee breaks.", s1, semantic.Provenance{}, false, 0.5)
	cold2 := e.insert("The user likes long coffee breaks", s2, semantic.Provenance{}, false, 0.5)
	lonely := e.insert("The user is editing a wedding video.", s1, semantic.Provenance{}, false, 0.5)
	other := e.insert("The user's company is called Acme Films.", strata.Scope{UserID: "u2", SessionID: "s9"}, semantic.Provenance{}, false, 0.5)
	e.clock.Advance(10 * day)
	e.served(hotA, "s1", 2)
	e.served(hotB, "s2", 1)
	e.served(lonely, "s1", 20)
	e.served(other, "s9", 20)
	e.clock.Advance(time.Hour)

	rep := e.run(consolidation.TaskPromotion)
	p := rep.Promotion
	require.Equal(t, 2, p.Evaluated, "%+v", p) // hot and cold: seen in 2 sessions each
	require.Equal(t, 1, p.Promoted)
	require.Equal(t, 2, p.Superseded)
	hot := p.Items[0]
	require.True(t, hot.Promoted)
	require.Equal(t, 2, hot.Sessions)
	require.Equal(t, 3, hot.Reads)
	// heat = 1·2 + 0.5·ln(1+3) + 1·0.5^(1h/7d)
	require.InDelta(t, 2+0.5*math.Log(4)+math.Pow(0.5, 1.0/168), hot.Score, 1e-6)
	cold := p.Items[1]
	require.False(t, cold.Promoted)
	require.Equal(t, "heat below the threshold", cold.Reason)
	require.InDelta(t, 2+0+math.Pow(0.5, 241.0/168), cold.Score, 1e-6) // written 10 days 1 hour ago, never read

	user := e.get(*hot.MemoryID)
	require.Equal(t, "u1", user.UserID)
	require.Equal(t, "", user.SessionID, "promoted to user level")
	require.Equal(t, hotA.Text, user.Text, "the most read wording")
	require.InDelta(t, 0.7, user.Importance, 1e-6)
	require.Len(t, user.Metadata["promoted_from"], 2)
	require.Equal(t, user.ID, *e.get(hotA.ID).SupersededBy)
	require.Equal(t, user.ID, *e.get(hotB.ID).SupersededBy)
	require.Nil(t, e.get(cold1.ID).ValidTo)
	require.Nil(t, e.get(lonely.ID).ValidTo, "one session only, however often read")
	require.Nil(t, e.get(other.ID).ValidTo)

	// Lowering the threshold promotes the cold fact too; re-running changes nothing more.
	thr := 2.2
	e.setPolicy(policy.LifecyclePolicy{Consolidation: policy.ConsolidationRules{Promotion: policy.PromotionRules{Threshold: &thr}}})
	rep = e.run(consolidation.TaskPromotion)
	require.Equal(t, 1, rep.Promotion.Promoted)
	require.NotNil(t, e.get(cold1.ID).ValidTo)
	require.NotNil(t, e.get(cold2.ID).ValidTo)
	rep = e.run(consolidation.TaskPromotion)
	require.Equal(t, 0, rep.Promotion.Promoted)
}

// newConsolidator builds a consolidator as the server composes one (internal/app), on the
// test's clock.
func newConsolidator(cfg config.Config, pool *pgxpool.Pool, emb embed.Embedder, log *slog.Logger, now func() time.Time) *consolidation.Consolidator {
	return &consolidation.Consolidator{
		Pool: pool,
		Semantic: semantic.NewStore(semantic.Options{DedupThreshold: cfg.DedupThreshold, StaleAfter: cfg.VerifyAge,
			EfSearch: cfg.HNSWEfSearch, ExactBelow: cfg.SearchExactBelow}, now),
		Episodic: episodic.NewStore(episodic.Options{MaxJSONDepth: cfg.MaxJSONDepth}),
		Jobs:     jobs.NewStore(cfg.StalledAfter, now),
		Embedder: emb,
		Defaults: policy.DefaultPolicy(cfg.VerifyAge),
		Now:      now,
		Log:      log,
	}
}
