package extraction_test

import (
	"fmt"
	"github.com/strata-mem/strata/internal/apptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/llmtest"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/working"
)

// TestBenchExtraction (STRATA_BENCH_EXTRACTION=1) prints the figures of docs/benchmarks.md:
// appends per second with and without the extraction mark, and turns extracted per second
// end to end (instant fake model, 4 workers).
func TestBenchExtraction(t *testing.T) {
	if testing.Short() || !benchOn() {
		t.Skip("set STRATA_BENCH_EXTRACTION=1")
	}
	e := newEnv(t, func(p llmtest.Prompt) string {
		return llmtest.Answer(llmtest.D{Op: "ADD", Kind: "fact", Text: fmt.Sprintf("Fact from turn %d of %d", p.Doc.Seqs()[0], len(p.Doc.Turns)),
			Turns: p.Doc.Seqs()[:1]})
	})
	appendRate := func(mark bool, sessions, perSession int) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sess := fmt.Sprintf("bench-%v-%d", mark, s)
				for i := range perSession {
					var a *working.Appended
					require.NoError(t, pg.InOrgTx(e.ctx, e.pool, org, func(tx pgx.Tx) error {
						var err error
						a, err = e.w.Append(e.ctx, tx, org, sess, working.NewTurn{Role: "user",
							Content: fmt.Sprintf("turn %d: export the teaser in 4K with the warm LUT", i), UserID: "bench-" + sess, KeyID: "k"})
						if err != nil || !mark {
							return err
						}
						_, err = tx.Exec(e.ctx, extraction.MarkPendingSQL, org, sess, a.UserID, a.AgentID, a.Turn.Seq, false, "")
						return err
					}))
					require.NoError(t, a.Confirm(e.ctx))
				}
			}()
		}
		wg.Wait()
		return float64(sessions*perSession) / time.Since(start).Seconds()
	}
	httpRate := httpAppendRate(t)
	off1 := appendRate(false, 8, 150)
	on1 := appendRate(true, 8, 150)
	off2 := appendRate(false, 8, 150)
	on2 := appendRate(true, 8, 150)
	t.Logf("HTTP POST /v1/sessions/{s}/messages turns/s, 8 clients: %s", httpRate)
	t.Logf("store-level append turns/s (mark as a separate statement), 8 appenders: off %.0f / %.0f, on %.0f / %.0f (on/off %.2f)", off1, off2, on1, on2, (on1+on2)/(off1+off2))

	// End to end: the marked sessions (8 × 150 turns) extracted by 4 workers.
	var turns atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan string, 16)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				res, err := e.x.RunSession(e.ctx, org, s)
				require.NoError(t, err)
				turns.Add(int64(res.Turns))
			}
		}()
	}
	for s := range 8 {
		work <- fmt.Sprintf("bench-true-%d", s)
	}
	close(work)
	wg.Wait()
	el := time.Since(start)
	t.Logf("extracted %d turns in %v: %.0f turns/s end to end (%d model calls)", turns.Load(), el.Round(time.Millisecond),
		float64(turns.Load())/el.Seconds(), len(e.llm.Calls()))
	require.EqualValues(t, 2*8*150, turns.Load())
}

func benchOn() bool { return os.Getenv("STRATA_BENCH_EXTRACTION") == "1" }

// httpAppendRate appends through the real server: org "on" has extraction enabled, org
// "off" not (the mark's statement then inserts nothing), interleaved rounds.
func httpAppendRate(t *testing.T) string {
	llm := llmtest.New(t, func(llmtest.Prompt) string { return llmtest.Answer() })
	s := apptest.Start(t, apptest.Env("STRATA_LLM_MODEL", "fake-model"), apptest.Env("OPENAI_BASE_URL", llm.BaseURL()),
		apptest.Env("STRATA_EXTRACTION_POLL", "1h"))
	keys := map[string]string{"on": s.NewKey("on", "agent"), "off": s.NewKey("off", "agent")}
	r := s.Do("PUT", "/v1/admin/policies", s.NewKey("on", "admin"), map[string]any{"extraction": map[string]any{"enabled": true, "debounce": "1h"}})
	require.Contains(t, []int{200, 201}, r.Status, "%s", r.Body)
	rate := func(org string, round int) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for c := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					r := s.Do("POST", fmt.Sprintf("/v1/sessions/%s-%d-%d/messages", org, round, c), keys[org],
						map[string]any{"role": "user", "content": fmt.Sprintf("turn %d: export in 4K", i), "user_id": "u"})
					require.Equal(t, 201, r.Status, "%s", r.Body)
				}
			}()
		}
		wg.Wait()
		return 480 / time.Since(start).Seconds()
	}
	var on, off float64
	out := ""
	for round := range 3 {
		f, n := rate("off", round), rate("on", round)
		off, on = off+f, on+n
		out += fmt.Sprintf("off %.0f on %.0f; ", f, n)
	}
	return out + fmt.Sprintf("on/off %.2f", on/off)
}
