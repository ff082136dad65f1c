package benchreport

import (
	"fmt"
	"math"
	"slices"
)

// Kind says which way a metric is better.
type Kind int

const (
	// Time: lower is better (ns/op, latency).
	Time Kind = iota
	// Rate: higher is better (ops/s, qps).
	Rate
)

// Side is one figure of a row: a metric of a benchmark.
type Side struct {
	Bench  string
	Metric string
	Kind   Kind
	// Label describes what was measured (for the floor: which raw-store operation).
	Label string
}

// Check is a target. A row with several runs (-count runs, or rounds a benchmark
// interleaves inside one run) meets it only if the worse end of each figure's range does
// (issue 42): the lowest speed, the highest latency. Meets also answers at the median, so
// the table can say when only the median meets.
type Check struct {
	Desc string
	// Meets reports whether the row meets the target with each figure taken at `at`.
	Meets func(r *Row, at At) bool
	// Missed, when set, names what of the target a row missed (for the command's summary).
	Missed func(r *Row) []string
}

// OK reports whether the row meets the target: at the worse end of every figure's range.
func (c *Check) OK(r *Row) bool { return c.Meets(r, Worst) }

// At says which figure of a range a check takes.
type At int

const (
	// Worst is the worse end of the range: the lowest of a figure where higher is better
	// (Rate, and every speed ratio), the highest where lower is better (Time). It decides
	// whether a row is met.
	Worst At = iota
	// Mid is the median.
	Mid
)

// Of is the figure of xs at a, xs being of kind k (NaN when empty, which meets nothing).
func (a At) Of(xs []float64, k Kind) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	if a == Mid {
		return Median(xs)
	}
	if k == Time {
		return slices.Max(xs)
	}
	return slices.Min(xs)
}

// speedOf is a speed ratio (higher is better) at a.
func (a At) speedOf(xs []float64) float64 { return a.Of(xs, Rate) }

// also is the row's i-th Also figure at a (NaN when the run did not report it).
func (a At) also(r *Row, i int) float64 {
	if i >= len(r.Also) || i >= len(r.Rule.Also) {
		return math.NaN()
	}
	return a.Of(r.Also[i], r.Rule.Also[i].Kind)
}

// Latency is a latency of Strata's compared with the floor's latency of the same run
// (issue 42: a peer row is judged on p50 and p99 as well as on throughput).
type Latency struct {
	Label  string // "p50", "p99"
	Strata Side
	Floor  Side
}

// Rule is one row of the table.
type Rule struct {
	Area    string
	Measure string
	Strata  Side
	Floor   Side // Bench "" = no floor
	// Also are extra figures shown with Strata's (recall@10, p99).
	Also []Side
	// Latencies are compared with the floor's in the same run; the table shows each ratio
	// beside the throughput speed.
	Latencies []Latency
	Target    *Check
}

// Row is a rule evaluated on parsed output.
type Row struct {
	Rule   Rule
	Source string      // which input the figures come from
	Strata []float64   // per run
	Floor  []float64   // per run (same length as Strata when both ran)
	Speed  []float64   // per run: Strata's throughput ÷ the floor's (1.0 = as fast as the raw store)
	Also   [][]float64 // per Also side, per run
	// Per Latencies entry, per run: Strata's and the floor's figure, and the floor's ÷
	// Strata's (≥ 1: Strata's latency is no worse).
	LatencyStrata, LatencyFloor, LatencySpeed [][]float64
}

// Present reports whether the row's benchmark ran.
func (r *Row) Present() bool { return len(r.Strata) > 0 }

// Median of xs (NaN when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MinSpeed holds the speed (Strata throughput ÷ floor throughput) to at least x.
func MinSpeed(x float64) *Check {
	return &Check{Desc: fmt.Sprintf("≥ %.1f× floor", x), Meets: func(r *Row, at At) bool { return at.speedOf(r.Speed) >= x }}
}

// MaxStrata holds Strata's figure (a latency in the metric's unit) below x.
func MaxStrata(desc string, x float64) *Check {
	return &Check{Desc: desc, Meets: func(r *Row, at At) bool { return at.Of(r.Strata, r.Rule.Strata.Kind) < x }}
}

// MinAlso holds Also[i] (a figure where higher is better, such as recall) to at least x,
// and, when speed > 0, the speed too.
func MinAlso(desc string, i int, x, speed float64) *Check {
	return &Check{Desc: desc, Meets: func(r *Row, at At) bool {
		if !(at.also(r, i) >= x) {
			return false
		}
		return speed <= 0 || at.speedOf(r.Speed) >= speed
	}}
}

const (
	httpT = "BenchmarkHTTPTargets/"
	wsT   = "BenchmarkWorkingState/"
	kvT   = "BenchmarkKVCachedGet/"
	epT   = "BenchmarkEventAppend/"
	rsT   = "BenchmarkResume/"
	smT   = "BenchmarkSemantic100k/"
	lgT   = "BenchmarkLoadMix/"
	ctxT  = "BenchmarkContext100k/"
	evT   = "BenchmarkEventDelivery"
	emT   = "BenchmarkEmissionCost"
	// ingT is issue 42 item 4's batch ingest against a bare batched INSERT (s/42ingest):
	// rounds as sub-benchmarks round=n, each with strata-rows/s and floor-rows/s.
	ingT = "BenchmarkMemoryBatch"
	imT  = "BenchmarkImport100k"
)

// Rules is the table of docs/benchmarks.md, in order.
var Rules = []Rule{
	{Area: "HTTP", Measure: "working-state GET via HTTP, 1 client",
		Strata: Side{httpT + "state-get/c=1", "strata-ops/s", Rate, "GET /v1/sessions/{s}/state, agent key"},
		Floor:  Side{httpT + "state-get/c=1", "floor-ops/s", Rate, "chi handler + 1 go-redis GET (HTTP floor)"},
		Also:   []Side{{httpT + "state-get/c=1", "strata-p99-ms", Time, "p99"}},
		Target: MinSpeed(0.6)},
	{Area: "HTTP", Measure: "working-state GET via HTTP, 16 clients",
		Strata: Side{httpT + "state-get/c=16", "strata-ops/s", Rate, "GET /v1/sessions/{s}/state, agent key"},
		Floor:  Side{httpT + "state-get/c=16", "floor-ops/s", Rate, "chi handler + 1 go-redis GET (HTTP floor)"},
		Also:   []Side{{httpT + "state-get/c=16", "strata-p99-ms", Time, "p99"}},
		Target: MinSpeed(0.6)},
	{Area: "Working", Measure: "state GET (HTTP) vs bare Redis GET, 16 clients",
		Strata: Side{wsT + "GET/c=16", "ns/op", Time, "GET state, agent key"},
		Floor:  Side{wsT + "GET/c=16", "floor-ns/op", Time, "go-redis GET"}},
	{Area: "Working", Measure: "state PUT (HTTP, write-through) vs bare Redis SET, 16 clients",
		Strata: Side{wsT + "PUT/c=16", "ns/op", Time, "PUT state"},
		Floor:  Side{wsT + "PUT/c=16", "floor-ns/op", Time, "go-redis SET"}},
	{Area: "Working", Measure: "state PUT (HTTP) vs bare Postgres upsert commit, 16 clients",
		Strata: Side{wsT + "PUT/c=16/vs-pg-commit", "ns/op", Time, "PUT state"},
		Floor:  Side{wsT + "PUT/c=16/vs-pg-commit", "floor-ns/op", Time, "pgx one-row upsert + commit"}},
	{Area: "Key-value", Measure: "cached resolved GET (HTTP, 4 levels) vs bare Redis GET, 16 clients",
		Strata: Side{kvT + "agentkey/parallel16", "http-ns/op", Time, "GET /v1/kv/{ns}/{key}"},
		Floor:  Side{kvT + "agentkey/parallel16", "redis-ns/op", Time, "go-redis GET"}},
	{Area: "Key-value", Measure: "uncached resolved read (store, 4 levels) vs bare PK SELECT",
		Strata: Side{"BenchmarkKVUncachedGet", "store-ns/op", Time, "keyvalue.Store.Get, cache off"},
		Floor:  Side{"BenchmarkKVUncachedGet", "pg-ns/op", Time, "pgx SELECT by primary key"}},
	{Area: "Episodic", Measure: "event append via HTTP, 1 client",
		Strata: Side{httpT + "event-append/c=1", "strata-ops/s", Rate, "POST /v1/jobs/{job}/events"},
		Floor:  Side{httpT + "event-append/c=1", "floor-ops/s", Rate, "pgx single-row INSERT (autocommit)"},
		Also:   []Side{{httpT + "event-append/c=1", "strata-p99-ms", Time, "p99"}}},
	{Area: "Episodic", Measure: "event append via HTTP, 32 clients",
		Strata: Side{httpT + "event-append/c=32", "strata-ops/s", Rate, "POST /v1/jobs/{job}/events"},
		Floor:  Side{httpT + "event-append/c=32", "floor-ops/s", Rate, "pgx single-row INSERT (autocommit)"},
		Also:   []Side{{httpT + "event-append/c=32", "strata-p99-ms", Time, "p99"}},
		Target: MinSpeed(0.5)},
	{Area: "Episodic", Measure: "event append via HTTP vs the HTTP write floor, 32 clients (diagnostic)",
		Strata: Side{httpT + "event-append-vs-http-insert/c=32", "strata-ops/s", Rate, "POST /v1/jobs/{job}/events"},
		Floor:  Side{httpT + "event-append-vs-http-insert/c=32", "floor-ops/s", Rate, "chi handler + 1 pgx INSERT (HTTP write floor)"}},
	{Area: "Episodic", Measure: "event append (store, one transaction each, no group commit), 32 writers (diagnostic)",
		Strata: Side{epT + "c=32", "store_ops/s", Rate, "pg.InOrgTx + episodic.Store.Append"},
		Floor:  Side{epT + "c=32", "floor_ops/s", Rate, "pgx single-row INSERT (autocommit)"},
		Also:   []Side{{epT + "c=32", "store_p99_ms", Time, "p99"}}},
	{Area: "Episodic", Measure: "event append (store, own transaction), 1 writer",
		Strata: Side{epT + "c=1", "store_ops/s", Rate, "pg.InOrgTx + episodic.Store.Append"},
		Floor:  Side{epT + "c=1", "floor_ops/s", Rate, "pgx single-row INSERT (autocommit)"}},
	// Events (issue 41, item 5): event to delivery open loop, and what a subscription costs
	// the write path on the load-test mix.
	{Area: "Events", Measure: "event to delivery, open loop, 500 writes/s offered for 60 s, one event each: p99",
		Strata: Side{evT, "deliver-p99-ms", Time, "write's planned send → webhook receiver"},
		Also: []Side{{evT, "deliver-p50-ms", Time, "p50"}, {evT, "offered-events/s", Rate, "offered"},
			{evT, "achieved-events/s", Rate, "achieved"}, {evT, "delivered-%", Rate, "delivered"}},
		Target: &Check{Desc: "p99 < 1 s at 500/s offered", Meets: func(r *Row, at At) bool {
			return at.Of(r.Strata, Time) < 1000 && at.also(r, 1) >= 500
		}}},
	{Area: "Events", Measure: "load-test mix + 5 % handoffs at a fixed rate, with vs without a webhook subscription: server CPU per request",
		Strata: Side{emT, "with-cpu-µs/req", Time, "server process CPU per request, subscription to *"},
		Floor:  Side{emT, "without-cpu-µs/req", Time, "same, no subscription; rounds alternate"},
		Also: []Side{{emT, "with-p99-ms", Time, "p99"}, {emT, "without-p99-ms", Time, "p99 without"},
			{emT, "p99-with/without", Time, "p99 with ÷ without"}, {emT, "offered-req/s", Rate, "offered"},
			{emT, "write-extra-with-µs", Time, "cheapest emitting write's extra time over STRATA_EVENTS=false, with a subscription (diagnostic)"},
			{emT, "write-extra-without-µs", Time, "without"},
			{emT, "cpu+pg-with/without", Time, "server + its Postgres backends' CPU with ÷ without"}},
		Target: &Check{Desc: "CPU/request (server, and with its Postgres backends) and p99 within 5 %", Meets: func(r *Row, at At) bool {
			return 1/at.speedOf(r.Speed) <= 1.05 && at.also(r, 2) <= 1.05 && at.also(r, 6) <= 1.05
		}}},
	{Area: "Jobs", Measure: "resume via HTTP, 10k jobs × 50 steps: p99",
		Strata: Side{rsT + "http-resume", "p99-µs", Time, "GET /v1/jobs/{job}/resume"},
		Floor:  Side{rsT + "floor-select-job-row", "p99-µs", Time, "pgx SELECT of the job row"},
		Also:   []Side{{rsT + "http-resume", "p50-µs", Time, "p50"}},
		Target: MaxStrata("p99 < 10 ms", 10_000)},
	contextRule("1 client", "c=1", "POST /v1/context (resume, state, preferences, search, similar jobs, packing)",
		MaxStrata("p99 < 25 ms", 25)),
	contextRule("4 clients", "c=4", "POST /v1/context", nil),
	{Area: "Semantic", Measure: "whole-org vector search, 100k × 384, ef_search 100",
		Strata: Side{smT + "ours/ef=100", "qps", Rate, "semantic.Store.VectorSearch (HNSW, iterative scan, filters)"},
		Floor:  Side{smT + "ours/ef=100", "bare_qps_interleaved", Rate, "bare pgvector HNSW query, same ef_search, interleaved"},
		Also:   []Side{{smT + "ours/ef=100", "recall@10", Rate, "recall@10"}},
		Target: MinAlso("recall@10 ≥ 0.95 and ≥ 0.7× floor", 0, 0.95, 0.7)},
	{Area: "Semantic", Measure: "whole-org vector search, 100k × 384, ef_search 40",
		Strata: Side{smT + "ours/ef=40", "qps", Rate, "semantic.Store.VectorSearch"},
		Floor:  Side{smT + "ours/ef=40", "bare_qps_interleaved", Rate, "bare pgvector HNSW query, same ef_search, interleaved"},
		Also:   []Side{{smT + "ours/ef=40", "recall@10", Rate, "recall@10"}}},
	{Area: "Semantic", Measure: "scoped search, 1,000 users (zipf), auto strategy",
		Strata: Side{smT + "scoped/zipf/ours_auto", "qps", Rate, "exact ≤ 5,000 rows, else HNSW + iterative scan"},
		Floor:  Side{smT + "scoped/zipf/naive_filtered_hnsw", "qps", Rate, "naive filtered HNSW (wrong for small scopes)"},
		Also:   []Side{{smT + "scoped/zipf/ours_auto", "recall@10", Rate, "recall@10"}},
		Target: MinAlso("recall@10 ≥ 0.95", 0, 0.95, 0)},
	{Area: "Semantic", Measure: "scoped search, 1,000 users (zipf), heavy scopes with an HNSW index of their own",
		Strata: Side{smT + "scoped/zipf/ours_scope_indexes", "qps", Rate, "auto strategy after one scope-index pass (scopes > 1,000 rows)"},
		Floor:  Side{smT + "scoped/zipf/naive_filtered_hnsw", "qps", Rate, "naive filtered HNSW (wrong for small scopes)"},
		Also: []Side{{smT + "scoped/zipf/ours_scope_indexes", "recall@10", Rate, "recall@10"},
			{smT + "scoped/zipf/ours_scope_indexes", "p95_ms", Time, "p95"}},
		Target: &Check{Desc: "recall@10 ≥ 0.98 at p95 < 5 ms and ≥ 0.7× floor", Meets: func(r *Row, at At) bool {
			return at.also(r, 0) >= 0.98 && at.also(r, 1) < 5 && at.speedOf(r.Speed) >= 0.7
		}}},
	{Area: "Semantic", Measure: "memory insert with HNSW index, 1 writer",
		Strata: Side{smT + "insert/ours/c=1", "rows/s", Rate, "semantic.Store.Create (dedup + insert)"},
		Floor:  Side{smT + "insert/bare/c=1", "rows/s", Rate, "bare indexed INSERT"}},
	// Issue 42 item 4: the batch ingest against one bare batched INSERT of the same rows into
	// the same HNSW-indexed partition, interleaved in rounds; and the 100k import, timed end to
	// end in the heavy mode (STRATA_BENCH_HEAVY=1).
	{Area: "Semantic", Measure: "memory batch ingest vs a bare batched INSERT of the same rows, same HNSW-indexed partition",
		Strata: Side{ingT, "strata-rows/s", Rate, "POST /v1/memories/batch (embedding, dedup, audit)"},
		Floor:  Side{ingT, "floor-rows/s", Rate, "bare multi-row INSERT into the same HNSW-indexed partition"},
		Target: MinSpeed(0.8)},
	{Area: "Semantic", Measure: "`strata memories import` of 100k memories (1,000 users), end to end",
		Strata: Side{imT, "import-rows/s", Rate, "batches of 1,000 under their Idempotency-Keys into an empty org"},
		Also:   []Side{{imT, "import-s", Time, "took"}}},
	// The peers users would run instead, driven by their own Node clients (issue 26), judged
	// on throughput, p50 and p99 (issue 42).
	peerRule("LangGraph", "checkpointer put+get pairs, 1 thread", "BenchmarkLangGraphSaver", "c1-", "pg", "pairs/s",
		"StrataSaver", "PostgresSaver, same Postgres server", PeerTarget(1.0, 1.0)),
	peerRule("LangGraph", "checkpointer put+get pairs, 8 threads", "BenchmarkLangGraphSaver", "c8-", "pg", "pairs/s",
		"StrataSaver", "PostgresSaver, same Postgres server", PeerTarget(0.9, 1.2)),
	peerRule("Semantic", "memory add, one at a time, vs mem0", "BenchmarkMem0Peer", "add-", "mem0", "ops/s",
		"POST /v1/memories", "mem0ai/oss Memory.add (pgvector, infer: false)", PeerTarget(1.0, 1.0)),
	peerRule("Semantic", "memory search, one at a time, vs mem0", "BenchmarkMem0Peer", "search-", "mem0", "ops/s",
		"POST /v1/memories/search", "mem0ai/oss Memory.search (pgvector)", PeerTarget(1.0, 1.0)),
}

// PeerTarget is the target of a row against a peer product (issue 42): Strata's throughput
// at least minSpeed× the peer's and each of its latencies (p50, p99) at most maxLatency× the
// peer's; the row is met only when all of them are, each at the worse end of its range over
// the rounds (the lowest throughput ratio, the highest latency ratio). A latency the run did
// not report counts as missed.
func PeerTarget(minSpeed, maxLatency float64) *Check {
	desc := fmt.Sprintf("≥ %.1f× peer, p50 and p99 ≤ peer's", minSpeed)
	if maxLatency != 1 {
		desc = fmt.Sprintf("≥ %.1f× peer, p50 and p99 ≤ %.1f× peer's", minSpeed, maxLatency)
	}
	// missedAt lists what is missed with the figures taken at `at`; median notes the median
	// where the row has several rounds (the worse end is what is judged).
	missedAt := func(r *Row, at At) []string {
		var out []string
		note := func(xs []float64, f func(float64) float64) string {
			if at != Worst || len(xs) < 2 {
				return ""
			}
			return fmt.Sprintf(" at worst (median %.2f×)", f(Median(xs)))
		}
		id := func(x float64) float64 { return x }
		if sp := at.speedOf(r.Speed); !(sp >= minSpeed) {
			out = append(out, fmt.Sprintf("throughput %.2f×%s < %.1f×", sp, note(r.Speed, id), minSpeed))
		}
		for i, l := range r.Rule.Latencies {
			if i >= len(r.LatencySpeed) || len(r.LatencySpeed[i]) == 0 {
				out = append(out, l.Label+" not measured")
				continue
			}
			// The ratio is the peer's latency ÷ Strata's; Strata's may be up to maxLatency×.
			inv := func(x float64) float64 { return 1 / x }
			if sp := at.speedOf(r.LatencySpeed[i]); !(sp >= 1/maxLatency-1e-9) {
				out = append(out, fmt.Sprintf("%s %.2f× the peer's%s > %.1f×", l.Label, 1/sp, note(r.LatencySpeed[i], inv), maxLatency))
			}
		}
		return out
	}
	return &Check{Desc: desc, Missed: func(r *Row) []string { return missedAt(r, Worst) },
		Meets: func(r *Row, at At) bool { return len(missedAt(r, at)) == 0 }}
}

// peerRule is a row against a peer product on the same machine, judged by target on
// throughput, p50 and p99. The benchmark reports <prefix>strata-<unit> and
// <prefix><peer>-<unit> for the throughput unit and for p50-ms and p99-ms.
func peerRule(area, measure, bench, prefix, peer, unit, strataLabel, peerLabel string, target *Check) Rule {
	lat := func(p string) Latency {
		return Latency{Label: p,
			Strata: Side{bench, prefix + "strata-" + p + "-ms", Time, p},
			Floor:  Side{bench, prefix + peer + "-" + p + "-ms", Time, p}}
	}
	return Rule{Area: area, Measure: measure,
		Strata:    Side{bench, prefix + "strata-" + unit, Rate, strataLabel},
		Floor:     Side{bench, prefix + peer + "-" + unit, Rate, peerLabel},
		Latencies: []Latency{lat("p50"), lat("p99")},
		Target:    target}
}

// Evaluate computes every rule over the inputs. Each row takes its figures from the first
// input (in the order given) that ran its benchmark, so a fresh run wins over an older
// recorded one.
func Evaluate(rules []Rule, inputs []Input) []Row {
	rows := make([]Row, 0, len(rules))
	for _, rule := range rules {
		row := Row{Rule: rule}
		for _, in := range inputs {
			strata := values(in.Out, rule.Strata)
			if len(strata) == 0 {
				continue
			}
			row.Source, row.Strata = in.Label, strata
			if rule.Floor.Bench != "" {
				row.Floor = values(in.Out, rule.Floor)
				n := min(len(row.Strata), len(row.Floor))
				for i := range n {
					row.Speed = append(row.Speed, speed(rule.Strata.Kind, row.Strata[i], row.Floor[i]))
				}
			}
			for _, a := range rule.Also {
				row.Also = append(row.Also, values(in.Out, a))
			}
			for _, l := range rule.Latencies {
				st, fl := values(in.Out, l.Strata), values(in.Out, l.Floor)
				var sp []float64
				for i := range min(len(st), len(fl)) {
					sp = append(sp, speed(Time, st[i], fl[i]))
				}
				row.LatencyStrata, row.LatencyFloor = append(row.LatencyStrata, st), append(row.LatencyFloor, fl)
				row.LatencySpeed = append(row.LatencySpeed, sp)
			}
			break
		}
		rows = append(rows, row)
	}
	return rows
}

func values(o *Output, s Side) []float64 {
	var vs []float64
	for _, r := range o.Runs(s.Bench) {
		if v, ok := r.Metrics[s.Metric]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// speed is Strata's throughput as a fraction of the floor's.
func speed(k Kind, strata, floor float64) float64 {
	if strata == 0 || floor == 0 {
		return math.NaN()
	}
	if k == Time {
		return floor / strata
	}
	return strata / floor
}

// contextRule is the p99 row of BenchmarkContext100k at one concurrency, against the
// resume + search an agent would call instead.
func contextRule(clients, c, desc string, target *Check) Rule {
	return Rule{Area: "Context", Measure: "POST /v1/context at 100k memories, " + clients + ": p99",
		Strata: Side{ctxT + "context/" + c, "p99_ms", Time, desc},
		Floor:  Side{ctxT + "floor-resume+search/" + c, "p99_ms", Time, "GET resume + POST memories/search over HTTP"},
		Also:   []Side{{ctxT + "context/" + c, "p50_ms", Time, "p50"}},
		Target: target}
}
