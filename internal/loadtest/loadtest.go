// Package loadtest drives a Strata server with a mixed agent workload (vegeta as a library):
// every simulated agent turn is some mix of resume, context, working-state get and patch,
// event append, step start and complete, memory search and key-value get (and, when the mix
// asks for them, handoffs, each of which emits one event). It runs at a
// fixed rate (open loop) or with a fixed number of clients sending back to back (closed
// loop, --rate 0), for a duration, and reports throughput and p50/p95/p99 per endpoint and
// errors by status. It sets up its own org, agent keys and data with an admin key, so it
// can run against any server: `strata loadtest` and the docker-compose loadtest profile.
package loadtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/strata-mem/strata/internal/progress"
)

// Endpoint names, as reported.
const (
	EpResume       = "resume"
	EpContext      = "context"
	EpStateGet     = "state.get"
	EpStatePatch   = "state.patch"
	EpEventAppend  = "event.append"
	EpStepStart    = "step.start"
	EpStepComplete = "step.complete"
	EpMemorySearch = "memory.search"
	EpKVGet        = "kv.get"
	// EpHandoff creates a handoff on one of the agents' work jobs (it emits handoff.pending), or
	// acknowledges one created earlier (handoff.acknowledged): every request emits one event.
	// It is not in DefaultMix: the emission benchmark adds it, so the mix emits events.
	EpHandoff = "handoff.create"
	// EpHandoffAck is reported apart: half of EpHandoff's picks acknowledge the handoff
	// an earlier one created (handoff.acknowledged), so every EpHandoff request emits one event.
	EpHandoffAck = "handoff.ack"
)

// OptionalEndpoints may be given a weight in Config.Mix although DefaultMix leaves them out.
var OptionalEndpoints = []string{EpHandoff}

// DefaultMix is the share of each endpoint in an agent turn (weights, not percentages).
var DefaultMix = map[string]int{
	EpResume: 10, EpContext: 10, EpStateGet: 20, EpStatePatch: 10, EpEventAppend: 15,
	EpStepStart: 8, EpStepComplete: 7, EpMemorySearch: 10, EpKVGet: 10,
}

// Config is one load test.
type Config struct {
	URL      string // the server, e.g. http://localhost:8080
	AdminKey string // creates the org's agent keys
	Org      string // default: loadtest-<random>, so runs never share data

	// Rate is requests per second (open loop); 0 = closed loop: Concurrency clients send
	// back to back, which measures the maximum.
	Rate        int
	Concurrency int // closed-loop clients, and the most in flight at a fixed rate (default 32)
	Duration    time.Duration

	// RateFraction > 0 first measures the maximum (closed loop for ProbeDuration) and then
	// runs at RateFraction × that maximum for Duration (e.g. 0.7 for "70 % of max").
	RateFraction  float64
	ProbeDuration time.Duration
	// Settle is the pause between the probe and the main phase (default 30s with
	// RateFraction): the probe saturates the server, which leaves it work to catch up on
	// (the audit chain, batched access counts, autovacuum of what the probe wrote). The
	// main phase measures the steady state at its rate, not the probe's backlog.
	Settle time.Duration

	Agents   int // agent keys, jobs, sessions (default 8)
	Memories int // memories written at setup (default 200)
	Mix      map[string]int
	Timeout  time.Duration // per request (default 10s)

	// Progress, when not nil, receives a progress bar.
	Progress io.Writer
	// Client is the HTTP client for setup (default: one with Timeout).
	Client *http.Client
}

// EndpointReport is what one endpoint did.
type EndpointReport struct {
	Requests   uint64         `json:"requests"`
	Throughput float64        `json:"throughput" doc:"Successful requests per second."`
	P50Ms      float64        `json:"p50_ms"`
	P95Ms      float64        `json:"p95_ms"`
	P99Ms      float64        `json:"p99_ms"`
	MaxMs      float64        `json:"max_ms"`
	Errors     uint64         `json:"errors"`
	ByStatus   map[string]int `json:"by_status"`
	ErrorTexts []string       `json:"error_texts,omitempty"`
}

// Phase is one attack: its settings and results.
type Phase struct {
	Name        string                     `json:"name"`
	Rate        int                        `json:"rate" doc:"Requested rate; 0 = closed loop."`
	Concurrency int                        `json:"concurrency"`
	Duration    string                     `json:"duration"`
	Requests    uint64                     `json:"requests"`
	Throughput  float64                    `json:"throughput"`
	P50Ms       float64                    `json:"p50_ms"`
	P95Ms       float64                    `json:"p95_ms"`
	P99Ms       float64                    `json:"p99_ms"`
	MaxMs       float64                    `json:"max_ms"`
	Errors      uint64                     `json:"errors"`
	ByStatus    map[string]int             `json:"by_status"`
	Endpoints   map[string]*EndpointReport `json:"endpoints"`
	// Timeline is the phase in windows of TimelineWindow (by request start): a tail that
	// grows over the run, or stalls, show here and not in the phase's percentiles.
	Timeline []Window `json:"timeline,omitempty"`
}

// TimelineWindow is the width of a Phase.Timeline window.
const TimelineWindow = 10 * time.Second

// Window is one TimelineWindow of a phase.
type Window struct {
	StartS   int     `json:"start_s" doc:"Seconds from the phase's start."`
	Requests uint64  `json:"requests"`
	Errors   uint64  `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// Report is the whole load test.
type Report struct {
	URL     string    `json:"url"`
	Org     string    `json:"org"`
	Started time.Time `json:"started"`
	Setup   string    `json:"setup_duration"`
	// MaxThroughput is the closed-loop probe's throughput when RateFraction was set.
	MaxThroughput float64  `json:"max_throughput,omitempty"`
	Phases        []Phase  `json:"phases"`
	Notes         []string `json:"notes,omitempty"`
}

// Main is the phase that counts (the last one).
func (r *Report) Main() *Phase { return &r.Phases[len(r.Phases)-1] }

func (c *Config) defaults() error {
	if c.URL == "" {
		return errors.New("loadtest: no server URL")
	}
	c.URL = strings.TrimRight(c.URL, "/")
	if c.AdminKey == "" {
		return errors.New("loadtest: an admin key is needed to create the test's org, keys and data (STRATA_API_KEY with role admin)")
	}
	if c.Org == "" {
		c.Org = "loadtest-" + randomHex(4)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 32
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Rate < 0 {
		return errors.New("loadtest: rate must be ≥ 0 (0 = closed loop)")
	}
	if c.RateFraction < 0 || c.RateFraction > 1 {
		return errors.New("loadtest: rate fraction must be in (0, 1]")
	}
	if c.Settle < 0 {
		return errors.New("loadtest: --settle must not be negative")
	}
	if c.RateFraction > 0 && c.ProbeDuration <= 0 {
		c.ProbeDuration = 30 * time.Second
	}
	if c.Agents <= 0 {
		c.Agents = 8
	}
	if c.Memories <= 0 {
		c.Memories = 200
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Mix == nil {
		c.Mix = DefaultMix
	}
	for name, w := range c.Mix {
		if _, ok := DefaultMix[name]; !ok && !slices.Contains(OptionalEndpoints, name) {
			return fmt.Errorf("loadtest: unknown endpoint %q in the mix", name)
		}
		if w < 0 {
			return fmt.Errorf("loadtest: negative weight for %s", name)
		}
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout}
	}
	return nil
}

// Run sets up the data and runs the load test.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{URL: cfg.URL, Org: cfg.Org, Started: time.Now().UTC()}
	t0 := time.Now()
	w, err := setup(ctx, &cfg, rep)
	if err != nil {
		return nil, err
	}
	rep.Setup = time.Since(t0).Round(time.Millisecond).String()

	if cfg.RateFraction > 0 {
		probe, err := attack(ctx, &cfg, w, "probe (closed loop)", 0, cfg.ProbeDuration)
		if err != nil {
			return nil, err
		}
		rep.Phases = append(rep.Phases, *probe)
		rep.MaxThroughput = probe.Throughput
		cfg.Rate = max(1, int(probe.Throughput*cfg.RateFraction))
		rep.Notes = append(rep.Notes, fmt.Sprintf("measured maximum %.0f req/s (closed loop, %d clients, %s); main phase at %.0f %% = %d req/s after %s to settle",
			probe.Throughput, cfg.Concurrency, cfg.ProbeDuration, cfg.RateFraction*100, cfg.Rate, cfg.Settle))
		if cfg.Settle > 0 {
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "settling for %s after the probe (the server catches up on background work)\n", cfg.Settle)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(cfg.Settle):
			}
		}
	}
	name := "closed loop"
	if cfg.Rate > 0 {
		name = "fixed rate"
	}
	main, err := attack(ctx, &cfg, w, name, cfg.Rate, cfg.Duration)
	if err != nil {
		return nil, err
	}
	rep.Phases = append(rep.Phases, *main)
	return rep, nil
}

// Workload is a load test's org, keys and data, set up once by Prepare, for callers that
// run several phases against the same data (the emission benchmark's alternating rounds).
type Workload struct {
	cfg Config
	w   *workload
	rep *Report
}

// Prepare sets up the org, keys and data of cfg (as Run does) without attacking.
func Prepare(ctx context.Context, cfg Config) (*Workload, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{URL: cfg.URL, Org: cfg.Org, Started: time.Now().UTC()}
	w, err := setup(ctx, &cfg, rep)
	if err != nil {
		return nil, err
	}
	return &Workload{cfg: cfg, w: w, rep: rep}, nil
}

// Notes are what setup noticed (an endpoint skipped).
func (wl *Workload) Notes() []string { return wl.rep.Notes }

// Attack runs one phase of the mix at rate requests/s (0 = closed loop) for d.
func (wl *Workload) Attack(ctx context.Context, name string, rate int, d time.Duration) (*Phase, error) {
	return attack(ctx, &wl.cfg, wl.w, name, rate, d)
}

// attack runs one phase.
func attack(ctx context.Context, cfg *Config, w *workload, name string, rate int, d time.Duration) (*Phase, error) {
	workers := uint64(cfg.Concurrency)
	atk := vegeta.NewAttacker(vegeta.Workers(workers), vegeta.MaxWorkers(workers), vegeta.Timeout(cfg.Timeout),
		vegeta.KeepAlive(true), vegeta.Connections(cfg.Concurrency), vegeta.MaxConnections(cfg.Concurrency),
		vegeta.Redirects(vegeta.NoFollow))
	pacer := vegeta.Rate{Freq: rate, Per: time.Second}
	bar := newBar(cfg.Progress, name, d)
	phase := &Phase{Name: name, Rate: rate, Concurrency: cfg.Concurrency, Duration: d.String(),
		Endpoints: map[string]*EndpointReport{}}
	var total vegeta.Metrics
	per := map[string]*vegeta.Metrics{}
	var windows []*vegeta.Metrics
	var begin time.Time
	var done, failed atomic.Uint64
	stopBar := make(chan struct{})
	var barWG sync.WaitGroup
	if bar != nil {
		barWG.Add(1)
		go func() {
			defer barWG.Done()
			start := time.Now()
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopBar:
					return
				case <-t.C:
					el := time.Since(start)
					bar.Describe(fmt.Sprintf("%-19s %6.0f req/s, %d errors", name, float64(done.Load())/el.Seconds(), failed.Load()))
					bar.Set(int64(min(el, d) / time.Second))
				}
			}
		}()
	}
	results := atk.Attack(w.targeter(), pacer, d, name)
	for {
		var res *vegeta.Result
		var ok bool
		select {
		case <-ctx.Done():
			atk.Stop()
			for range results { //nolint:revive // drain
			}
			close(stopBar)
			barWG.Wait()
			return nil, ctx.Err()
		case res, ok = <-results:
		}
		if !ok {
			break
		}
		ep := classify(res.Method, res.URL)
		w.observe(ep, res)
		m := per[ep]
		if m == nil {
			m = &vegeta.Metrics{}
			per[ep] = m
		}
		m.Add(res)
		total.Add(res)
		if begin.IsZero() {
			begin = res.Timestamp
		}
		if i := int(res.Timestamp.Sub(begin) / TimelineWindow); i >= 0 {
			for len(windows) <= i {
				windows = append(windows, &vegeta.Metrics{})
			}
			windows[i].Add(res)
		}
		done.Add(1)
		if failure(res) {
			failed.Add(1)
		}
	}
	close(stopBar)
	barWG.Wait()
	if bar != nil {
		bar.Describe(fmt.Sprintf("%-19s %6.0f req/s, %d errors", name, float64(done.Load())/d.Seconds(), failed.Load()))
		bar.Set(int64(d / time.Second))
		bar.Finish()
		if progress.IsTerminal(cfg.Progress) {
			fmt.Fprintln(cfg.Progress) // end the bar's line
		}
	}
	total.Close()
	fill(&phase.Requests, &phase.Throughput, &phase.P50Ms, &phase.P95Ms, &phase.P99Ms, &phase.MaxMs, &phase.Errors, &phase.ByStatus, &total)
	eps := make([]string, 0, len(per))
	for ep := range per {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		m := per[ep]
		m.Close()
		r := &EndpointReport{}
		fill(&r.Requests, &r.Throughput, &r.P50Ms, &r.P95Ms, &r.P99Ms, &r.MaxMs, &r.Errors, &r.ByStatus, m)
		if len(m.Errors) > 0 {
			r.ErrorTexts = m.Errors[:min(5, len(m.Errors))]
		}
		phase.Endpoints[ep] = r
	}
	for i, m := range windows {
		m.Close()
		var thr, p95 float64
		var by map[string]int
		wd := Window{StartS: i * int(TimelineWindow/time.Second)}
		fill(&wd.Requests, &thr, &wd.P50Ms, &p95, &wd.P99Ms, &wd.MaxMs, &wd.Errors, &by, m)
		phase.Timeline = append(phase.Timeline, wd)
	}
	return phase, nil
}

func fill(req *uint64, thr, p50, p95, p99, mx *float64, errs *uint64, by *map[string]int, m *vegeta.Metrics) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	*req, *p50, *p95, *p99, *mx = m.Requests, ms(m.Latencies.P50), ms(m.Latencies.P95), ms(m.Latencies.P99), ms(m.Latencies.Max)
	// Throughput: successful responses per second of the attack's own duration (vegeta's
	// own figure divides by duration + the tail wait).
	ok := uint64(0)
	*by = map[string]int{}
	for code, n := range m.StatusCodes {
		(*by)[code] = n
		if c, _ := strconv.Atoi(code); c >= 200 && c < 400 {
			ok += uint64(n)
		}
	}
	*errs = m.Requests - ok
	if el := m.Duration + m.Wait; el > 0 {
		*thr = float64(ok) / el.Seconds()
	}
}

// failure: transport errors and every status ≥ 400 are errors (the workload only makes
// requests that must succeed).
func failure(r *vegeta.Result) bool { return r.Code == 0 || r.Code >= 400 }

var routes = []struct {
	method string
	re     *regexp.Regexp
	name   string
}{
	{"GET", regexp.MustCompile(`/v1/jobs/[^/]+/resume$`), EpResume},
	{"POST", regexp.MustCompile(`/v1/context$`), EpContext},
	{"GET", regexp.MustCompile(`/v1/sessions/[^/]+/state$`), EpStateGet},
	{"PATCH", regexp.MustCompile(`/v1/sessions/[^/]+/state$`), EpStatePatch},
	{"POST", regexp.MustCompile(`/v1/jobs/[^/]+/events$`), EpEventAppend},
	{"POST", regexp.MustCompile(`/v1/jobs/[^/]+/steps/[^/]+/start$`), EpStepStart},
	{"POST", regexp.MustCompile(`/v1/jobs/[^/]+/steps/[^/]+/complete$`), EpStepComplete},
	{"POST", regexp.MustCompile(`/v1/memories/search$`), EpMemorySearch},
	{"GET", regexp.MustCompile(`/v1/kv/[^/]+/[^/]+$`), EpKVGet},
	{"POST", regexp.MustCompile(`/v1/jobs/[^/]+/handoffs$`), EpHandoff},
	{"POST", regexp.MustCompile(`/v1/jobs/[^/]+/handoffs/[^/]+/ack$`), EpHandoffAck},
}

// classify names the endpoint of a request.
func classify(method, url string) string {
	path, _, _ := strings.Cut(url, "?")
	for _, r := range routes {
		if r.method == method && r.re.MatchString(path) {
			return r.name
		}
	}
	return method + " other"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// call is one setup request; it fails unless the status is want (or any 2xx if want 0).
// call sends one request (hdr: extra header name/value pairs) and wants status want (0: any 2xx).
func call(ctx context.Context, c *http.Client, method, url, key string, body any, want int, hdr ...string) ([]byte, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if (want != 0 && resp.StatusCode != want) || (want == 0 && (resp.StatusCode < 200 || resp.StatusCode > 299)) {
		return b, resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, truncate(b, 300))
	}
	return b, resp.StatusCode, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
