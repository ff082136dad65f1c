package retrievaleval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-mem/strata/client"
)

// Options shape a run.
type Options struct {
	TopK    int   // results asked of search (default 10)
	Budgets []int // /v1/context token budgets (default 1000, 2000, 4000)
	// Keep leaves the memories written in place (their user ids are unique to the run).
	Keep bool
	// Progress is told after each question (done of total); Log gets a line per conversation.
	Progress func(done, total int)
	Log      func(format string, args ...any)
}

// Metrics are one category's figures (or "overall": every category but abstention).
type Metrics struct {
	Category   string  `json:"category"`
	Questions  int     `json:"questions"`
	RecallAt5  float64 `json:"recall_at_5"`
	RecallAt10 float64 `json:"recall_at_10"`
	HitAt10    float64 `json:"hit_at_10"`
	HitAt10Lo  float64 `json:"hit_at_10_ci95_low"`
	HitAt10Hi  float64 `json:"hit_at_10_ci95_high"`
	NDCG10     float64 `json:"ndcg_at_10"`
	MRR        float64 `json:"mrr"`
}

// AbstentionReport says what came back for questions whose answer was never said: with no
// relevance floor, search answers something; the share of empty answers and the top scores
// show how far from a floor the scores are.
type AbstentionReport struct {
	Questions     int     `json:"questions"`
	EmptyFraction float64 `json:"empty_fraction"`
	TopScoreMean  float64 `json:"top_score_mean"`
	TopScoreMax   float64 `json:"top_score_max"`
	// AnsweredTopScoreMean is the mean top score of the other questions, for comparison.
	AnsweredTopScoreMean float64 `json:"answered_top_score_mean"`
}

// ContextReport is /v1/context at one token budget.
type ContextReport struct {
	Budget     int     `json:"max_tokens"`
	Questions  int     `json:"questions"`
	Coverage   float64 `json:"evidence_coverage"` // share of questions whose evidence turns all appear
	TokensMean float64 `json:"tokens_mean"`
	P50ms      float64 `json:"latency_p50_ms"`
	P99ms      float64 `json:"latency_p99_ms"`
}

// Report is a run's outcome.
type Report struct {
	Layout         string           `json:"layout,omitempty"`
	Dataset        string           `json:"dataset,omitempty"`
	Server         string           `json:"server"`
	RunID          string           `json:"run_id"`
	Conversations  int              `json:"conversations"`
	Turns          int              `json:"turns"`
	Memories       int              `json:"memories"` // rows written: identical turns of a conversation share one
	Questions      int              `json:"questions"`
	Strata         []Metrics        `json:"strata"`
	BM25           []Metrics        `json:"bm25"`
	Abstention     AbstentionReport `json:"abstention"`
	Context        []ContextReport  `json:"context"`
	SearchP50ms    float64          `json:"search_latency_p50_ms"`
	SearchP99ms    float64          `json:"search_latency_p99_ms"`
	IngestSeconds  float64          `json:"ingest_seconds"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	Cleanup        string           `json:"cleanup"`
}

// Find returns the metrics of category cat ("overall" included).
func Find(ms []Metrics, cat string) (Metrics, bool) {
	for _, m := range ms {
		if m.Category == cat {
			return m, true
		}
	}
	return Metrics{}, false
}

type acc struct {
	n                      int
	r5, r10, hit, ndcg, rr float64
	hits                   int
}

func (a *acc) add(s Scores) {
	a.n++
	a.r5 += s.RecallAt5
	a.r10 += s.RecallAt10
	a.hit += s.HitAt10
	a.ndcg += s.NDCG10
	a.rr += s.RR
	if s.HitAt10 > 0 {
		a.hits++
	}
}

func (a *acc) metrics(cat string) Metrics {
	m := Metrics{Category: cat, Questions: a.n}
	if a.n == 0 {
		return m
	}
	n := float64(a.n)
	m.RecallAt5, m.RecallAt10, m.HitAt10, m.NDCG10, m.MRR = a.r5/n, a.r10/n, a.hit/n, a.ndcg/n, a.rr/n
	m.HitAt10Lo, m.HitAt10Hi = Wilson(a.hits, a.n)
	return m
}

// Run writes ds's turns to the server c talks to, asks every question, scores the answers and
// removes what it wrote (unless o.Keep). Each conversation's memories are scoped to a user id
// unique to the run ("eval-<run>-<conversation>"), so a run sees no other data and runs do not
// disturb each other. Errors name the conversation or question and the call that failed.
func Run(ctx context.Context, c *client.Client, ds Dataset, o Options) (rep Report, err error) {
	if o.TopK == 0 {
		o.TopK = 10
	}
	if o.Budgets == nil {
		o.Budgets = []int{1000, 2000, 4000}
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	start := time.Now()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	run := hex.EncodeToString(rb[:])
	rep = Report{Server: c.BaseURL(), RunID: run, Conversations: len(ds.Conversations), Questions: len(ds.Questions)}
	byConv := map[string][]Question{}
	for _, q := range ds.Questions {
		byConv[q.Conversation] = append(byConv[q.Conversation], q)
	}
	strata, bm := map[string]*acc{}, map[string]*acc{}
	var overallS, overallB acc
	var searchMs []float64
	ctxMs := make([][]float64, len(o.Budgets))
	ctxCovered := make([]int, len(o.Budgets))
	ctxTokens := make([]float64, len(o.Budgets))
	ctxN := 0
	var abst AbstentionReport
	var abstEmpty int
	var answeredTop float64
	var answeredN int
	var written []string
	done := 0
	var ingest time.Duration

	defer func() {
		// Cleanup runs also when the run failed midway.
		if o.Keep || len(written) == 0 {
			return
		}
		rep.Cleanup = cleanup(context.WithoutCancel(ctx), c, written)
	}()

	for ci, conv := range ds.Conversations {
		user := fmt.Sprintf("eval-%s-%s", run, conv.ID)
		// Write the turns, in batches; map each memory back to the turns it stands for.
		var ms []client.NewMemory
		var tids []string
		text := map[string]string{} // turn id -> memory text
		for _, s := range conv.Sessions {
			for _, t := range s.Turns {
				md := map[string]any{"turn_id": t.ID, "session_id": s.ID, "conversation": conv.ID}
				if !s.Date.IsZero() {
					md["date"] = s.Date.UTC().Format(time.RFC3339)
				}
				mt := MemoryText(t)
				if strings.TrimSpace(mt) == "" {
					continue
				}
				ms = append(ms, client.NewMemory{Text: mt, Scope: client.Scope{UserID: user}, Metadata: md})
				tids = append(tids, t.ID)
				text[t.ID] = mt
			}
		}
		rep.Turns += len(tids)
		turnsOf := map[string][]string{} // memory id -> turn ids
		memOf := map[string]string{}     // turn id -> memory id
		t0 := time.Now()
		for off := 0; off < len(ms); off += 500 {
			end := min(off+500, len(ms))
			ans, err := c.RememberBatch(ctx, ms[off:end], "")
			if err != nil {
				return rep, fmt.Errorf("conversation %s: writing turns %d-%d (POST /v1/memories/batch): %w", conv.ID, off+1, end, err)
			}
			for _, it := range ans.Items {
				tid := tids[off+it.Index]
				var id string
				switch {
				case it.Memory != nil:
					id = it.Memory.ID
				case it.DuplicateOf != nil:
					id = memOf[tids[off+*it.DuplicateOf]]
				}
				if id == "" {
					detail := it.Status
					if it.Error != nil {
						detail = it.Error.Detail
					}
					return rep, fmt.Errorf("conversation %s: turn %s was not written: %s", conv.ID, tid, detail)
				}
				if it.Status == "created" {
					written = append(written, id)
					rep.Memories++
				}
				memOf[tid] = id
				turnsOf[id] = append(turnsOf[id], tid)
			}
		}
		ingest += time.Since(t0)
		bmi := NewBM25(tids, func() []string {
			out := make([]string, len(tids))
			for i, id := range tids {
				out[i] = text[id]
			}
			return out
		}())

		for _, q := range byConv[conv.ID] {
			t1 := time.Now()
			ans, err := c.Recall(ctx, client.SearchQuery{Query: q.Question, Scope: client.Scope{UserID: user}, TopK: o.TopK})
			if err != nil {
				return rep, fmt.Errorf("question %s: POST /v1/memories/search: %w", q.ID, err)
			}
			searchMs = append(searchMs, float64(time.Since(t1).Microseconds())/1000)
			var ranked Ranked
			top := 0.0
			for i, it := range ans.Items {
				ranked = append(ranked, turnsOf[it.Memory.ID])
				if i == 0 {
					if v, ok := it.Score["score"].(float64); ok {
						top = v
					}
				}
			}
			var bmRanked Ranked
			for _, id := range bmi.Search(q.Question, o.TopK) {
				bmRanked = append(bmRanked, []string{id})
			}
			if q.Category == Abstention {
				abst.Questions++
				if len(ans.Items) == 0 {
					abstEmpty++
				}
				abst.TopScoreMean += top
				abst.TopScoreMax = max(abst.TopScoreMax, top)
			} else {
				answeredTop += top
				answeredN++
				s, b := Score(ranked, q.Evidence), Score(bmRanked, q.Evidence)
				if strata[q.Category] == nil {
					strata[q.Category], bm[q.Category] = &acc{}, &acc{}
				}
				strata[q.Category].add(s)
				bm[q.Category].add(b)
				overallS.add(s)
				overallB.add(b)
				// The context answer at each budget: is every evidence turn in it?
				ctxN++
				for bi, budget := range o.Budgets {
					t2 := time.Now()
					tc, err := c.Context(ctx, client.ContextRequest{Scope: client.Scope{UserID: user}, Query: q.Question, MaxTokens: budget})
					if err != nil {
						return rep, fmt.Errorf("question %s: POST /v1/context (max_tokens %d): %w", q.ID, budget, err)
					}
					ctxMs[bi] = append(ctxMs[bi], float64(time.Since(t2).Microseconds())/1000)
					ctxTokens[bi] += float64(tc.Tokens)
					if covers(tc, q.Evidence, memOf, text) {
						ctxCovered[bi]++
					}
				}
			}
			done++
			if o.Progress != nil {
				o.Progress(done, len(ds.Questions))
			}
		}
		o.Log("conversation %d/%d (%s): %d turns, %d questions", ci+1, len(ds.Conversations), conv.ID, len(tids), len(byConv[conv.ID]))
	}

	cats := slices.Clone(Categories[:len(Categories)-1])
	for cat := range strata {
		if !slices.Contains(cats, cat) {
			cats = append(cats, cat)
		}
	}
	slices.Sort(cats[len(Categories)-1:])
	for _, cat := range cats {
		if strata[cat] == nil {
			continue
		}
		rep.Strata = append(rep.Strata, strata[cat].metrics(cat))
		rep.BM25 = append(rep.BM25, bm[cat].metrics(cat))
	}
	rep.Strata = append(rep.Strata, overallS.metrics("overall"))
	rep.BM25 = append(rep.BM25, overallB.metrics("overall"))
	if abst.Questions > 0 {
		abst.EmptyFraction = float64(abstEmpty) / float64(abst.Questions)
		abst.TopScoreMean /= float64(abst.Questions)
	}
	if answeredN > 0 {
		abst.AnsweredTopScoreMean = answeredTop / float64(answeredN)
	}
	rep.Abstention = abst
	for bi, budget := range o.Budgets {
		cr := ContextReport{Budget: budget, Questions: ctxN}
		if ctxN > 0 {
			cr.Coverage = float64(ctxCovered[bi]) / float64(ctxN)
			cr.TokensMean = ctxTokens[bi] / float64(ctxN)
		}
		cr.P50ms, cr.P99ms = Quantile(ctxMs[bi], 0.5), Quantile(ctxMs[bi], 0.99)
		rep.Context = append(rep.Context, cr)
	}
	rep.SearchP50ms, rep.SearchP99ms = Quantile(searchMs, 0.5), Quantile(searchMs, 0.99)
	rep.IngestSeconds = ingest.Seconds()
	rep.ElapsedSeconds = time.Since(start).Seconds()
	if o.Keep {
		rep.Cleanup = fmt.Sprintf("kept: %d memories under user ids eval-%s-*", rep.Memories, run)
	}
	return rep, nil
}

// covers reports whether every evidence turn is in the context: its memory among a section's
// included ids, or its text in the prompt.
func covers(tc client.TurnContext, evidence []string, memOf, text map[string]string) bool {
	included := map[string]bool{}
	for _, s := range tc.Sections {
		for _, id := range s.Included {
			included[id] = true
		}
	}
	for _, e := range evidence {
		if !included[memOf[e]] && !strings.Contains(tc.Prompt, text[e]) {
			return false
		}
	}
	return true
}

// cleanup deletes the memories the run wrote, four at a time, and says how it went.
func cleanup(ctx context.Context, c *client.Client, ids []string) string {
	var mu sync.Mutex
	failed := 0
	var first error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := c.Do(ctx, client.Call{Method: http.MethodDelete, Path: "/v1/memories/" + id}, nil); err != nil {
				mu.Lock()
				failed++
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		return fmt.Sprintf("deleted %d of %d memories; %d failed (first: %v)", len(ids)-failed, len(ids), failed, first)
	}
	return fmt.Sprintf("deleted %d memories", len(ids))
}
