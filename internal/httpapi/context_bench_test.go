package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	pgvector "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/turncontext"
)

var benchVocab = strings.Fields(`colour grade brand teal warm amber lut contrast highlight shadow reframe vertical square
	caption subtitle font sentence case tiktok reels shorts youtube export bitrate codec h264 hevc loudness music voiceover
	cut trim intro outro logo watermark safe area crop zoom pan transition jump cut b-roll interview product launch spring
	summer promo client prefers avoids deadline friday review approval legal disclaimer accessibility contrast ratio`)

func benchText(r *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = benchVocab[r.IntN(len(benchVocab))]
	}
	return strings.Join(w, " ")
}

// post sends one JSON request and returns the status and body.
func post(c *http.Client, method, url, key string, body any, hdr ...string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func pct(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return float64(s[i].Microseconds()) / 1000
}

// BenchmarkContext100k is the latency target: POST /v1/context over HTTP (key
// lookup, transaction, audit, job resume + last events, working state from Redis,
// preferences, hybrid memory search and similar-jobs search, token packing) with 100,000
// memories in the org (1,000 users × 100, HNSW index built), 200 job memories, 20 running
// jobs of 30 completed steps, sessions and preferences. The floor, measured in the same
// run, is what an agent would otherwise call for the same turn: GET .../resume and POST
// /v1/memories/search. It loads 100k rows and builds the HNSW index (about a minute), so it
// runs only when asked:
//
//	STRATA_BENCH_CONTEXT=1 go test ./internal/httpapi/ -run '^$' -bench Context100k -benchtime 2000x -timeout 20m -v
func BenchmarkContext100k(b *testing.B) {
	if os.Getenv("STRATA_BENCH_CONTEXT") == "" {
		b.Skip("set STRATA_BENCH_CONTEXT=1 to run the 100k context benchmark")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_ROWS")); err == nil && v > 0 {
		n = v // a quick smoke run of the benchmark itself
	}
	const users, jobsN, stepsN = 1000, 20, 30
	ctx := context.Background()
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.Env("STRATA_LOG_LEVEL", "error"))
	key := s.NewKey("acme", "agent")
	r := rand.New(rand.NewPCG(3, 4))
	emb := embed.NewLexical(384)

	// 100k memories + 200 job memories, COPYed with the HNSW index dropped and rebuilt.
	c := testenv.OwnerConn(b, s.DBURL)
	require.NoError(b, pgxvec.RegisterTypes(ctx, c))
	var def string
	require.NoError(b, c.QueryRow(ctx, `SELECT replace(indexdef, ' ON ONLY ', ' ON ') FROM pg_indexes WHERE indexname = 'memories_hnsw_384'`).Scan(&def))
	_, err := c.Exec(ctx, `DROP INDEX memories_hnsw_384`)
	require.NoError(b, err)
	now := time.Now().UTC()
	rows := make([][]any, 0, n+200)
	texts := make([]string, 0, n+200)
	for i := 0; i < n+200; i++ {
		texts = append(texts, fmt.Sprintf("%s (note %d)", benchText(r, 8+r.IntN(10)), i))
	}
	vecs, err := emb.Embed(ctx, texts)
	require.NoError(b, err)
	for i, text := range texts {
		id := uuid.Must(uuid.NewV7())
		kind, md := "fact", "{}"
		user := fmt.Sprintf("user%04d", i%users)
		if i >= n {
			kind = "job"
			md = fmt.Sprintf(`{"job_id":"old-%d","outcome":"published","parameters":{"lut":"teal-%d"}}`, i, i%7)
		}
		rows = append(rows, []any{"acme", id, id, user, kind, text, semantic.TextHash(text), "agent_inferred", md,
			pgvector.NewVector(vecs[i]), emb.Name(), emb.Model(), emb.Dims(), now, now})
	}
	_, err = c.CopyFrom(ctx, pgx.Identifier{"memories"}, []string{"org_id", "id", "root_id", "user_id", "kind", "text",
		"text_hash", "trust", "metadata", "embedding", "embedder", "model", "dims", "valid_from", "updated_at"}, pgx.CopyFromRows(rows))
	require.NoError(b, err)
	_, err = c.Exec(ctx, `SET maintenance_work_mem = '1GB'`)
	require.NoError(b, err)
	t0 := time.Now()
	_, err = c.Exec(ctx, def)
	require.NoError(b, err)
	b.Logf("loaded %d memories; HNSW build %s", n+200, time.Since(t0).Round(time.Second))
	_, err = c.Exec(ctx, `VACUUM ANALYZE memories`)
	require.NoError(b, err)

	// Jobs mid-way, sessions, preferences.
	hc := &http.Client{Timeout: 30 * time.Second}
	do := func(method, path string, body any, want int, hdr ...string) []byte {
		st, out, err := post(hc, method, s.URL+path, key, body, hdr...)
		require.NoError(b, err)
		require.Equal(b, want, st, "%s %s: %s", method, path, out)
		return out
	}
	for j := 0; j < jobsN; j++ {
		job := fmt.Sprintf("job-%d", j)
		do("PUT", "/v1/jobs/"+job, map[string]any{"goal": benchText(r, 12), "owner": "bot"}, 201)
		for st := 0; st < stepsN; st++ {
			step := fmt.Sprintf("step-%02d", st)
			var cl struct {
				Token int64 `json:"fencing_token"`
			}
			require.NoError(b, json.Unmarshal(do("POST", "/v1/jobs/"+job+"/steps/"+step+"/start", map[string]any{"owner": "bot"}, 200), &cl))
			do("POST", "/v1/jobs/"+job+"/events", map[string]any{"op": "render", "params": map[string]any{"step": step}, "result": map[string]any{"asset": step + ".mp4"}}, 201)
			do("POST", "/v1/jobs/"+job+"/steps/"+step+"/complete", map[string]any{"fencing_token": cl.Token, "result": map[string]any{"asset": step + ".mp4", "lut": "teal"}}, 200)
		}
		do("PUT", "/v1/jobs/"+job+"/checkpoint", map[string]any{"current_step": "step-29", "next_action": "export", "state": map[string]any{"lut": "teal"}}, 201, "If-Match", `"0"`)
	}
	for u := 0; u < 50; u++ {
		user := fmt.Sprintf("user%04d", u)
		do("PUT", "/v1/sessions/sess-"+user+"/state", map[string]any{"state": map[string]any{"draft": u, "brief": benchText(r, 20)}, "user_id": user}, 201)
		do("PUT", "/v1/kv/preferences/tone", map[string]any{"value": "playful", "user_id": user}, 201)
	}
	for k := 0; k < 10; k++ {
		do("PUT", fmt.Sprintf("/v1/kv/rules/rule-%d", k), map[string]any{"value": benchText(r, 10)}, 201)
	}

	type call struct{ user, job, query string }
	calls := make([]call, 4096)
	for i := range calls {
		calls[i] = call{fmt.Sprintf("user%04d", r.IntN(50)), fmt.Sprintf("job-%d", r.IntN(jobsN)), benchText(r, 6)}
	}
	var stageMu sync.Mutex
	stages := map[string][]float64{}
	contextCall := func(i int) error {
		cl := calls[i%len(calls)]
		st, out, err := post(hc, "POST", s.URL+"/v1/context", key, map[string]any{"user_id": cl.user, "session_id": "sess-" + cl.user,
			"job_id": cl.job, "query": cl.query, "max_tokens": 2000})
		if err == nil && st != 200 {
			err = fmt.Errorf("context: %d %s", st, out)
		}
		var t struct {
			Timings map[string]float64 `json:"timings_ms"`
		}
		if err == nil && json.Unmarshal(out, &t) == nil {
			stageMu.Lock()
			for k, v := range t.Timings {
				stages[k] = append(stages[k], v)
			}
			stageMu.Unlock()
		}
		return err
	}
	floorCall := func(i int) error {
		cl := calls[i%len(calls)]
		st, out, err := post(hc, "GET", s.URL+"/v1/jobs/"+cl.job+"/resume?events=5", key, nil)
		if err == nil && st != 200 {
			return fmt.Errorf("resume: %d %s", st, out)
		}
		st, out, err = post(hc, "POST", s.URL+"/v1/memories/search", key, map[string]any{"user_id": cl.user, "query": cl.query})
		if err == nil && st != 200 {
			err = fmt.Errorf("search: %d %s", st, out)
		}
		return err
	}
	var floorP50, floorP99 float64
	for _, conc := range []int{1, 4} {
		for _, tc := range []struct {
			name string
			fn   func(int) error
		}{{"floor-resume+search", floorCall}, {"context", contextCall}} {
			b.Run(fmt.Sprintf("%s/c=%d", tc.name, conc), func(b *testing.B) {
				for i := 0; i < 50; i++ { // warm the pools and caches
					require.NoError(b, tc.fn(i))
				}
				lat := make([]time.Duration, b.N)
				var next int64
				var mu sync.Mutex
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := 0; w < conc; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							mu.Lock()
							i := next
							next++
							mu.Unlock()
							if i >= int64(b.N) {
								return
							}
							t := time.Now()
							if err := tc.fn(int(i)); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t)
						}
					}()
				}
				wg.Wait()
				p50, p99 := pct(lat, 0.50), pct(lat, 0.99)
				b.ReportMetric(p50, "p50_ms")
				b.ReportMetric(pct(lat, 0.95), "p95_ms")
				b.ReportMetric(p99, "p99_ms")
				if tc.name == "context" {
					stageMu.Lock()
					for k, v := range stages {
						slices.Sort(v)
						b.ReportMetric(v[len(v)/2], k+"_p50_ms")
					}
					clear(stages)
					stageMu.Unlock()
				}
				if tc.name == "floor-resume+search" {
					floorP50, floorP99 = p50, p99
				} else if floorP50 > 0 {
					b.ReportMetric(p50/floorP50, "p50_x_floor")
					b.ReportMetric(p99/floorP99, "p99_x_floor")
				}
			})
		}
	}
}

// BenchmarkContextCost200Turns is the cost argument: a 200-turn job run against the real
// server, one step per turn (claim, check, log the side effect, complete, checkpoint). At
// each turn it counts (o200k_base) what the model is sent:
//
//   - history: the system prompt plus the whole transcript so far (every tool call and
//     tool result of every earlier turn) plus this turn's;
//
//   - context: the system prompt plus POST /v1/context's prompt (max_tokens 2000) plus
//     this turn's calls.
//
//     go test ./internal/httpapi/ -run '^$' -bench ContextCost200Turns -benchtime 1x -v
func BenchmarkContextCost200Turns(b *testing.B) {
	const turns = 200
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.Env("STRATA_LOG_LEVEL", "error"))
	key := s.NewKey("acme", "agent")
	hc := &http.Client{Timeout: 30 * time.Second}
	counter, err := turncontext.NewCounter("gpt-4o")
	require.NoError(b, err)
	system := "You are a video editing agent. Use the tools. Never redo a completed step."
	sys := counter.Count(system)
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < b.N; i++ {
		job := fmt.Sprintf("cost-%d", i)
		var transcript int // tokens of all earlier turns' calls and results
		type row struct{ turn, history, context, leftOut int }
		var rows []row
		var sumHist, sumCtx int
		call := func(method, path string, body any, hdr ...string) string {
			st, out, err := post(hc, method, s.URL+path, key, body, hdr...)
			require.NoError(b, err)
			require.Less(b, st, 300, "%s %s: %s", method, path, out)
			req, _ := json.Marshal(body)
			return fmt.Sprintf("call %s %s %s\nresult %s\n", method, path, req, out)
		}
		call("PUT", "/v1/jobs/"+job, map[string]any{"goal": "Produce 200 deliverables for the spring campaign", "owner": "bot", "user_id": "u1"})
		call("PUT", "/v1/kv/preferences/captions", map[string]any{"value": "sentence case, max 42 chars per line", "user_id": "u1"})
		for m := 0; m < 30; m++ {
			call("POST", "/v1/memories", map[string]any{"text": benchText(r, 12), "user_id": "u1"})
		}
		cpv := 0
		for t := 1; t <= turns; t++ {
			step := fmt.Sprintf("deliverable-%03d", t)
			st, out, err := post(hc, "POST", s.URL+"/v1/context", key, map[string]any{"job_id": job, "user_id": "u1",
				"query": "next: " + step + " " + benchText(r, 4), "max_tokens": 2000})
			require.NoError(b, err)
			require.Equal(b, 200, st, string(out))
			var cx struct {
				Tokens   int `json:"tokens"`
				Sections []struct {
					LeftOutCount int `json:"left_out_count"`
				} `json:"sections"`
			}
			require.NoError(b, json.Unmarshal(out, &cx))
			var this strings.Builder
			this.WriteString("user: continue with " + step + "\n")
			var cl struct {
				Token int64 `json:"fencing_token"`
			}
			claim := call("POST", "/v1/jobs/"+job+"/steps/"+step+"/start", map[string]any{"owner": "bot", "input": map[string]any{"tool": "render", "params": map[string]any{"n": t}}})
			this.WriteString(claim)
			_, raw, _ := post(hc, "GET", s.URL+"/v1/jobs/"+job+"/steps/"+step, key, nil)
			_ = json.Unmarshal(raw, &cl)
			params := map[string]any{"deliverable": t, "format": "9:16", "lut": "warm-teal"}
			this.WriteString(call("POST", "/v1/jobs/"+job+"/events", map[string]any{"op": "render", "params": params,
				"result": map[string]any{"asset": "s3://renders/" + step + ".mp4"}, "idempotency_key": step}))
			this.WriteString(call("POST", "/v1/jobs/"+job+"/steps/"+step+"/complete", map[string]any{"fencing_token": cl.Token,
				"result": map[string]any{"asset": "s3://renders/" + step + ".mp4"}}))
			this.WriteString(call("PUT", "/v1/jobs/"+job+"/checkpoint", map[string]any{"current_step": step,
				"next_action": fmt.Sprintf("deliverable-%03d", t+1)}, "If-Match", fmt.Sprintf(`"%d"`, cpv)))
			cpv++
			turnTokens := counter.Count(this.String())
			hist := sys + transcript + turnTokens
			ctxTok := sys + cx.Tokens + turnTokens
			left := 0
			for _, sec := range cx.Sections {
				left += sec.LeftOutCount
			}
			rows = append(rows, row{t, hist, ctxTok, left})
			sumHist += hist
			sumCtx += ctxTok
			transcript += turnTokens
		}
		if i == 0 {
			b.Logf("| turn | full history (tokens sent) | with /v1/context | ratio | items left out of the context |")
			b.Logf("|---|---|---|---|---|")
			for _, rw := range rows {
				if rw.turn == 1 || rw.turn == 10 || rw.turn == 50 || rw.turn == 100 || rw.turn == 150 || rw.turn == 200 {
					b.Logf("| %d | %d | %d | %.1f× | %d |", rw.turn, rw.history, rw.context, float64(rw.history)/float64(rw.context), rw.leftOut)
				}
			}
			b.Logf("| **all 200 turns** | **%d** | **%d** | **%.1f×** | |", sumHist, sumCtx, float64(sumHist)/float64(sumCtx))
		}
		b.ReportMetric(float64(sumHist)/turns, "history_tokens/turn")
		b.ReportMetric(float64(sumCtx)/turns, "context_tokens/turn")
		b.ReportMetric(float64(sumHist)/float64(sumCtx), "history_x_context")
	}
}
