package consolidation_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/working"
)

type rollEnv struct {
	t          *testing.T
	ctx        context.Context
	r          *consolidation.Rolling
	w          *working.Store
	restricted atomic.Bool
}

// newRolling builds a Rolling on real Postgres and Redis with a turn buffer of 5.
func newRolling(t *testing.T, llm *llmtest.Server) *rollEnv {
	t.Helper()
	pool, _ := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	e := &rollEnv{t: t, ctx: context.Background()}
	e.w = working.New(pool, rdb, working.Options{Prefix: prefix, BufferSize: 5})
	e.r = &consolidation.Rolling{Pool: pool, Working: e.w, Episodic: episodic.NewStore(episodic.Options{}),
		Jobs: jobs.NewStore(0, nil), Every: 3, Tokens: 120,
		Restricted: func(context.Context, pg.DBTX, string, string) (bool, error) { return e.restricted.Load(), nil }}
	if llm != nil {
		var err error
		e.r.LLM, err = consolidation.NewRollingLLM(consolidation.LLMOptions{BaseURL: llm.BaseURL(), APIKey: "sk-test", Model: "fake"})
		require.NoError(t, err)
	}
	return e
}

func (e *rollEnv) say(session string, turns ...string) {
	e.t.Helper()
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		var a *working.Appended
		require.NoError(e.t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
			var err error
			a, err = e.w.Append(e.ctx, tx, org, session, working.NewTurn{Role: role, Content: c, UserID: "sam", AgentID: "editor"})
			return err
		}))
		require.NoError(e.t, a.Confirm(e.ctx))
	}
}

func (e *rollEnv) latest(session string) (summaries.Summary, error) {
	var s summaries.Summary
	err := pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		var err error
		s, err = summaries.Latest(e.ctx, tx, org, summaries.KindSession, session)
		return err
	})
	return s, err
}

func (e *rollEnv) due() []consolidation.RollingArgs {
	var out []consolidation.RollingArgs
	require.NoError(e.t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		var err error
		out, err = e.r.Candidates(e.ctx, tx, org, summaries.KindSession, 100)
		return err
	}))
	return out
}

var mediaChat = []string{
	"Hi there!",
	"Hello, how can I help?",
	"I edit wedding films for Lumen Studio in Porto.",
	"Nice. What should I keep in mind?",
	"Always export the final cut in 4K at 25 fps, never 30.",
	"Got it.",
	"ok thanks",
	"Anything else?",
	"The client's brand colour is warm teal #1A7F8E, use it for the titles.",
	"Noted.",
	"The delivery deadline for the Silva wedding is 14 December.",
	"Understood.",
}

// TestRollingSessionSummaryExtractive: the turns spilled past the buffer (12 turns, buffer
// 5: seqs 1-7) are summarised extractively into version 1; six more turns make version 2,
// which adds seqs 8-13 and still covers from seq 1. The summary keeps the informative
// sentences within the budget and drops the small talk. A subject due again is offered by
// Candidates only once enough turns spilled.
func TestRollingSessionSummaryExtractive(t *testing.T) {
	t.Parallel()
	e := newRolling(t, nil)
	e.say("s1", mediaChat[:4]...)
	require.Empty(t, e.due(), "nothing spilled yet")
	res, err := e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	require.Equal(t, "nothing", res.Status)

	e.say("s1", mediaChat[4:]...)
	require.Equal(t, []consolidation.RollingArgs{{Org: org, Of: summaries.KindSession, ID: "s1", UserID: "sam"}}, e.due())
	res, err = e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	require.Equal(t, "summarized", res.Status)
	v1, err := e.latest("s1")
	require.NoError(t, err)
	require.EqualValues(t, 1, v1.Version)
	require.EqualValues(t, 1, v1.FromSeq)
	require.EqualValues(t, 7, v1.ToSeq, "12 turns, the newest 5 still in the buffer")
	require.Equal(t, 7, v1.Items)
	require.Equal(t, "extractive", v1.Summarizer)
	require.Contains(t, v1.Text, "4K at 25 fps")
	require.Contains(t, v1.Text, "Lumen Studio")
	require.NotContains(t, v1.Text, "ok thanks")
	require.NotContains(t, v1.Text, "Hi there")
	require.LessOrEqual(t, v1.Tokens, 120)
	require.Equal(t, consolidation.CountTokens(v1.Text), v1.Tokens)
	require.Empty(t, e.due(), "summarised up to the buffer")

	e.say("s1", "Please also add burned-in captions in Portuguese.", "Will do.", "And send a 1080p proxy for review.", "OK.", "bye", "Bye!")
	res, err = e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	require.Equal(t, 1, res.Versions)
	v2, err := e.latest("s1")
	require.NoError(t, err)
	require.EqualValues(t, 2, v2.Version)
	require.EqualValues(t, 1, v2.FromSeq)
	require.EqualValues(t, 8, v2.AddedFrom)
	require.EqualValues(t, 13, v2.ToSeq)
	require.Contains(t, v2.Text, "4K", "the rolling summary keeps what the previous version held")
	require.Contains(t, v2.Text, "#1A7F8E")
	t.Logf("session summary v2 (%d tokens):\n%s", v2.Tokens, v2.Text)
	require.LessOrEqual(t, v2.Tokens, 120)

	// History: both versions, newest first.
	require.NoError(t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		vs, err := summaries.Versions(e.ctx, tx, org, summaries.KindSession, "s1", 0, 10)
		require.NoError(t, err)
		require.Len(t, vs, 2)
		require.Equal(t, v1.Text, vs[1].Text)
		return nil
	}))
}

// TestRollingRestrictedSubject: nothing of a restricted subject is summarised (Art. 18).
func TestRollingRestrictedSubject(t *testing.T) {
	t.Parallel()
	e := newRolling(t, nil)
	e.restricted.Store(true)
	e.say("s1", mediaChat...)
	res, err := e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	require.Equal(t, "restricted", res.Status)
	_, err = e.latest("s1")
	require.Error(t, err)
	res, err = e.r.SummarizeSession(e.ctx, org, "no-such-session")
	require.NoError(t, err)
	require.Equal(t, "gone", res.Status)
}

// TestRollingLLM: the org's LLM writes the summary (structured output, prompt version
// recorded); a malformed answer is sent back and retried; after three malformed answers
// the extractive summary is written with the reason in fallback (the decision documented
// in docs/summaries.md: the turns are kept verbatim in the durable log, so a fallback
// loses nothing and the session's context stays in budget).
func TestRollingLLM(t *testing.T) {
	t.Parallel()
	var bad atomic.Int32
	llm := llmtest.New(t, func(p llmtest.Prompt) string {
		if bad.Load() > 0 {
			return []string{`{"summary": ""}`, `not json`, `{"summary": "x", "extra": 1}`}[int(p.Attempt-1)%3]
		}
		if p.Attempt == 1 {
			return `{"decisions": []}` // the wrong schema: retried
		}
		var seqs []string
		for _, s := range p.Doc.Seqs() {
			seqs = append(seqs, fmt.Sprint(s))
		}
		return `{"summary": "Sam edits wedding films; exports in 4K (turns ` + strings.Join(seqs, ",") + `)."}`
	})
	e := newRolling(t, llm)
	e.say("s1", mediaChat...)
	res, err := e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	require.Equal(t, "summarized", res.Status)
	v1, err := e.latest("s1")
	require.NoError(t, err)
	require.Equal(t, "llm:fake", v1.Summarizer)
	require.Equal(t, consolidation.RollingPromptVersion, v1.PromptVersion)
	require.Equal(t, "Sam edits wedding films; exports in 4K (turns 1,2,3,4,5,6,7).", v1.Text)
	require.Empty(t, v1.Fallback)
	calls := llm.Calls()
	require.Len(t, calls, 2, "one malformed answer, one retry")
	require.Equal(t, "json_schema", calls[0].ResponseFormat["type"])
	require.Contains(t, calls[1].Messages[len(calls[1].Messages)-1].Content, "rejected")
	for _, m := range calls[1].Messages { // issue 57: a description of the answer goes back, not the answer
		require.NotEqual(t, `{"decisions": []}`, m.Content, "the rejected answer is not sent back")
	}

	bad.Store(1)
	e.say("s1", "Please also add burned-in captions in Portuguese.", "Will do.", "Send a 1080p proxy for review.",
		"Sure.", "Thanks!", "You're welcome.", "Bye.", "Bye!")
	_, err = e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	v2, err := e.latest("s1")
	require.NoError(t, err)
	require.EqualValues(t, 2, v2.Version)
	require.Equal(t, "extractive", v2.Summarizer)
	require.Contains(t, v2.Fallback, "malformed answer after 3 attempts")
	require.Len(t, llm.Calls(), 5)
	require.Contains(t, v2.Text, "4K", "the extractive fold starts from the LLM's previous version")
	require.Contains(t, v2.Text, "captions in Portuguese")

	// The model down: the extractive summary too, with the reason.
	bad.Store(0)
	llm.FailWith(500)
	e.say("s1", "Use the warm teal LUT on every reel.", "Sure.", "Deliver on a Friday.")
	_, err = e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	v3, err := e.latest("s1")
	require.NoError(t, err)
	require.Equal(t, "extractive", v3.Summarizer)
	require.Contains(t, v3.Fallback, "llm call failed")

	// Every call counted against the org's hourly LLM budget (shared with extraction);
	// once it is used up, no call is made and the summary is extractive.
	llm.FailWith(0)
	var used int
	require.NoError(t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		if err := tx.QueryRow(e.ctx, `SELECT sum(calls) FROM extraction_usage WHERE org_id = $1`, org).Scan(&used); err != nil {
			return err
		}
		_, err := tx.Exec(e.ctx, `UPDATE extraction_usage SET calls = 1000000 WHERE org_id = $1`, org)
		return err
	}))
	require.Equal(t, len(llm.Calls()), used)
	before := len(llm.Calls())
	e.say("s1", "Archive the raw footage on the NAS.", "OK.", "Name files by date.")
	_, err = e.r.SummarizeSession(e.ctx, org, "s1")
	require.NoError(t, err)
	v4, err := e.latest("s1")
	require.NoError(t, err)
	require.EqualValues(t, 4, v4.Version)
	require.Contains(t, v4.Fallback, "hourly LLM limit")
	require.Len(t, llm.Calls(), before, "no call past the limit")
}

// TestExtractIsNotATruncation: the extractive summariser picks informative sentences from
// anywhere in the text, within the budget, in their original order.
func TestExtractIsNotATruncation(t *testing.T) {
	t.Parallel()
	var ps []consolidation.Passage
	for i := 0; i < 40; i++ {
		ps = append(ps, consolidation.Passage{Seq: int64(i + 1), Label: "user", Text: "ok sounds good"})
	}
	ps = append(ps, consolidation.Passage{Seq: 41, Label: "user", Text: "The export codec is ProRes 422 HQ at 4K."})
	out := consolidation.Extract(ps, 30, consolidation.CountTokens)
	require.Contains(t, out, "ProRes 422 HQ", "the one informative sentence comes last and is still picked")
	require.LessOrEqual(t, consolidation.CountTokens(out), 30)
	require.Equal(t, out, consolidation.Extract(ps, 30, consolidation.CountTokens), "deterministic")
}

// TestRollingJobSummaryExtractive: a 2,000-event job without an LLM: the events older than
// the newest 50 are folded (200 per version) into an extractive summary within its budget,
// which keeps the settled values and marks reverted events as such.
func TestRollingJobSummaryExtractive(t *testing.T) {
	t.Parallel()
	e := newRolling(t, nil)
	e.r.KeepEvents, e.r.Tokens = 50, 300
	require.NoError(t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		if _, _, err := e.r.Jobs.PutJob(e.ctx, tx, org, "long-1", jobs.JobSpec{Goal: "Cut the Silva wedding", UserID: "sam"}, nil); err != nil {
			return err
		}
		for b := 0; b < 2; b++ {
			evs := make([]episodic.EventInput, 1000)
			for i := range evs {
				n := b*1000 + i + 1
				evs[i] = episodic.EventInput{Op: fmt.Sprintf("clip%d.trim", n%20), Params: []byte(fmt.Sprintf(`{"in":%d,"out":%d}`, n%60, n%60+5)), UserID: "sam"}
				if n == 7 {
					evs[i] = episodic.EventInput{Op: "color.grade", Params: []byte(`{"lut":"warm-teal","strength":0.8}`), UserID: "sam"}
				}
			}
			if _, err := e.r.Episodic.Append(e.ctx, tx, org, "long-1", evs); err != nil {
				return err
			}
		}
		return nil
	}))
	var due []consolidation.RollingArgs
	require.NoError(t, pg.InOrgTx(e.ctx, e.r.Pool, org, func(tx pgx.Tx) error {
		var err error
		due, err = e.r.Candidates(e.ctx, tx, org, summaries.KindJob, 10)
		return err
	}))
	require.Equal(t, []consolidation.RollingArgs{{Org: org, Of: summaries.KindJob, ID: "long-1", UserID: "sam"}}, due,
		"the queued job names the subject, so an erasure deletes it")
	res, err := e.r.SummarizeJob(e.ctx, org, "long-1")
	require.NoError(t, err)
	require.Equal(t, "summarized", res.Status)
	require.Equal(t, 10, res.Versions, "1,950 events, 200 per version")
	l := res.Latest
	require.EqualValues(t, 1, l.FromSeq)
	require.EqualValues(t, 1950, l.ToSeq)
	require.Equal(t, "extractive", l.Summarizer)
	require.LessOrEqual(t, l.Tokens, 300)
	t.Logf("job summary v%d (%d tokens):\n%s", l.Version, l.Tokens, l.Text)
	require.Contains(t, l.Text, "warm-teal", "the one distinctive event survives ten folds")
	require.Contains(t, l.Text, "#18", "and the newest fold is represented")
	res, err = e.r.SummarizeJob(e.ctx, org, "long-1")
	require.NoError(t, err)
	require.Equal(t, "nothing", res.Status, "the newest 50 stay out")
}

// BenchmarkExtract: one extractive fold of 200 turns into a 400-token summary.
//
//	go test -run '^$' -bench BenchmarkExtract -benchtime 20x ./internal/consolidation/
func BenchmarkExtract(b *testing.B) {
	var ps []consolidation.Passage
	for i := 0; i < 200; i++ {
		ps = append(ps, consolidation.Passage{Seq: int64(i + 1), Label: "user", Text: fmt.Sprintf(
			"Turn %d: %s Export reel %d in 4K with the warm teal grade. Thanks, that sounds good!", i, mediaChat[i%len(mediaChat)], i%17)})
	}
	for b.Loop() {
		if consolidation.Extract(ps, 400, consolidation.CountTokens) == "" {
			b.Fatal("empty")
		}
	}
}
