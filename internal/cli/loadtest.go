package cli

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/internal/loadtest"
)

func (a *app) loadtestCmd() *cobra.Command {
	var cfg loadtest.Config
	var mix string
	var maxP99 time.Duration
	var maxErrors int
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Drive a server with a mixed agent workload and report throughput, latency and errors",
		Long: `loadtest sets up its own org (agent keys, jobs with checkpoints, events and steps, session
state, preferences, memories) with an admin key (STRATA_API_KEY or --api-key), then sends a
mix of agent calls — resume, context (when the server has POST /v1/context), state get and
patch, event append, step start and complete, memory search, key-value get — at a fixed
rate (--rate N) or from --concurrency clients back to back (--rate 0, which measures the
maximum), for --duration. It reports throughput and p50/p95/p99 per endpoint and errors by
status; -o json for CI. --rate-fraction 0.7 first measures the maximum (--probe) and then
runs at 70 % of it. --max-p99 and --max-errors make it exit 1 when missed.`,
		Example: `  strata loadtest --rate 0 --concurrency 32 --duration 60s -o json
  strata loadtest --rate-fraction 0.7 --probe 60s --duration 10m --max-p99 50ms --max-errors 0`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.URL, cfg.AdminKey = a.url, a.apiKey()
			if cfg.AdminKey == "" {
				return fmt.Errorf("no API key: the load test needs an admin key (STRATA_API_KEY or --api-key) to create its org, keys and data")
			}
			if mix != "" {
				m, err := parseMix(mix)
				if err != nil {
					return err
				}
				cfg.Mix = m
			}
			if !noProgress {
				cfg.Progress = a.errOut
			}
			rep, err := loadtest.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := a.printLoadtest(rep); err != nil {
				return err
			}
			main := rep.Main()
			var missed []string
			if maxP99 > 0 && main.P99Ms > float64(maxP99.Microseconds())/1000 {
				missed = append(missed, fmt.Sprintf("p99 %.1f ms > %s", main.P99Ms, maxP99))
			}
			if maxErrors >= 0 && main.Errors > uint64(maxErrors) {
				missed = append(missed, fmt.Sprintf("%d errors > %d", main.Errors, maxErrors))
			}
			if len(missed) > 0 {
				return fmt.Errorf("load test thresholds missed: %s", strings.Join(missed, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Rate, "rate", 0, "requests per second; 0 = closed loop (--concurrency clients back to back)")
	f.IntVar(&cfg.Concurrency, "concurrency", 32, "closed-loop clients, and the most requests in flight at a fixed rate")
	f.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to send")
	f.Float64Var(&cfg.RateFraction, "rate-fraction", 0, "measure the maximum first (--probe), then run at this fraction of it (e.g. 0.7)")
	f.DurationVar(&cfg.ProbeDuration, "probe", 30*time.Second, "how long to measure the maximum with --rate-fraction")
	f.DurationVar(&cfg.Settle, "settle", 30*time.Second, "pause between the probe and the main phase with --rate-fraction, while the server catches up on background work")
	f.IntVar(&cfg.Agents, "agents", 8, "simulated agents (one key, session and 4 jobs each)")
	f.IntVar(&cfg.Memories, "memories", 200, "memories written at setup for search")
	f.StringVar(&cfg.Org, "org", "", "org for the test's data (default: a new loadtest-<random> org)")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "per-request timeout")
	f.StringVar(&mix, "mix", "", "endpoint weights, e.g. resume=10,state.get=20 (default: the built-in agent mix)")
	f.DurationVar(&maxP99, "max-p99", 0, "exit 1 when the overall p99 is above this (0 = no check)")
	f.IntVar(&maxErrors, "max-errors", -1, "exit 1 when more requests than this failed (-1 = no check)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar on stderr")
	return cmd
}

func parseMix(s string) (map[string]int, error) {
	m := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("--mix: %q is not endpoint=weight", part)
		}
		if _, known := loadtest.DefaultMix[name]; !known && !slices.Contains(loadtest.OptionalEndpoints, name) {
			names := slices.Clone(loadtest.OptionalEndpoints)
			for k := range loadtest.DefaultMix {
				names = append(names, k)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("--mix: unknown endpoint %q (one of %s)", name, strings.Join(names, ", "))
		}
		m[name] = n
	}
	return m, nil
}

func (a *app) printLoadtest(rep *loadtest.Report) error {
	if a.output == "json" {
		return a.print(rep, nil, nil)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(a.out, "note:", n)
	}
	for _, p := range rep.Phases {
		fmt.Fprintf(a.out, "\n%s: rate %s, %d clients, %s — %d requests, %.0f req/s, p50 %.2f ms, p95 %.2f ms, p99 %.2f ms, %d errors %s\n",
			p.Name, rateText(p.Rate), p.Concurrency, p.Duration, p.Requests, p.Throughput, p.P50Ms, p.P95Ms, p.P99Ms, p.Errors, statusText(p.ByStatus))
		names := make([]string, 0, len(p.Endpoints))
		for n := range p.Endpoints {
			names = append(names, n)
		}
		sort.Strings(names)
		rows := make([][]string, 0, len(names))
		for _, n := range names {
			e := p.Endpoints[n]
			rows = append(rows, []string{n, strconv.FormatUint(e.Requests, 10), fmt.Sprintf("%.0f/s", e.Throughput),
				fmt.Sprintf("%.2f", e.P50Ms), fmt.Sprintf("%.2f", e.P95Ms), fmt.Sprintf("%.2f", e.P99Ms), fmt.Sprintf("%.2f", e.MaxMs),
				strconv.FormatUint(e.Errors, 10), statusText(e.ByStatus)})
		}
		if err := a.print(nil, []string{"ENDPOINT", "REQUESTS", "THROUGHPUT", "P50 MS", "P95 MS", "P99 MS", "MAX MS", "ERRORS", "STATUS"}, rows); err != nil {
			return err
		}
	}
	return nil
}

func rateText(r int) string {
	if r == 0 {
		return "max (closed loop)"
	}
	return fmt.Sprintf("%d/s", r)
}

func statusText(by map[string]int) string {
	codes := make([]string, 0, len(by))
	for c := range by {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	parts := make([]string, 0, len(codes))
	for _, c := range codes {
		label := c
		if c == "0" {
			label = "transport error"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", label, by[c]))
	}
	return strings.Join(parts, " ")
}
