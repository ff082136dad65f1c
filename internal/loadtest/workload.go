package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/strata-mem/strata/internal/progress"
)

const (
	jobsPerAgent = 4
	// Steps the load test starts go to each agent's work jobs, stepsPerWorkJob at a time,
	// round robin: agents' jobs have a bounded number of steps (tens, like the 20-step jobs
	// of docs/jobs.md), not one job that grows by thousands of steps over a long soak —
	// which would measure resuming a 3,000-step job rather than an agent's turn.
	workJobsPerAgent = 32
	stepsPerWorkJob  = 25
	// EpHandoff's jobs are apart from the work jobs: a job with a pending handoff refuses
	// other agents' step starts.
	handoffJobsPerAgent = 8
)

// agent is one simulated agent: its key, scope, session and jobs.
type agent struct {
	key, id, user, session string
	jobs                   []string // read (resume, context) and appended to
	work                   []string // where its steps run
	handoffJobs            []string // EpHandoff's, made only when the mix has it
	started                *atomic.Int64
}

// claim is a started step waiting for its complete.
type claim struct {
	job, step string
	token     int64
}

// workload is the data set up for the test and the state the mix needs.
type workload struct {
	url    string
	agents []agent
	mix    []weighted
	total  int
	claims chan claim
	// EpHandoff's cycle: a job in ready has no pending handoff and gets one created; a
	// created handoff waits in pending for its acknowledgement, which puts the job back.
	handoffs       atomic.Int64
	ready, pending chan handoff
	inFlight       sync.Map // job → handoff: the cycle's request on it in flight
}

// handoff is a job of the EpHandoff cycle: its owner, who hands it off next (the job
// passes between its agent and a reviewer, since only the owner hands a job off), and its
// pending handoff once created.
type handoff struct{ key, job, owner, other, id string }

type weighted struct {
	name string
	cum  int
}

var words = strings.Fields(`colour grade reframe caption export render cut trim audio loudness subtitle brand palette
	font lower-third intro outro transition title b-roll interview timeline proxy codec bitrate vertical square
	client prefers warm tones avoid jump cuts keep logo visible music ducking voiceover approved draft final`)

func sentence(r *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = words[r.IntN(len(words))]
	}
	return strings.Join(w, " ")
}

// setup creates the org's keys and the data every endpoint of the mix reads.
func setup(ctx context.Context, cfg *Config, rep *Report) (*workload, error) {
	w := &workload{url: cfg.URL, claims: make(chan claim, 8192)}
	w.ready = make(chan handoff, cfg.Agents*handoffJobsPerAgent)
	w.pending = make(chan handoff, cfg.Agents*handoffJobsPerAgent)
	c := cfg.Client
	w.agents = make([]agent, cfg.Agents)
	for i := range w.agents {
		b, _, err := call(ctx, c, "POST", cfg.URL+"/v1/admin/keys", cfg.AdminKey,
			map[string]any{"org_id": cfg.Org, "role": "agent", "name": fmt.Sprintf("loadtest agent %d", i)}, 201)
		if err != nil {
			return nil, fmt.Errorf("creating the load test's agent keys (is STRATA_API_KEY the bootstrap admin key?): %w", err)
		}
		var k struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(b, &k); err != nil || k.Key == "" {
			return nil, fmt.Errorf("creating a key: unexpected answer %s", truncate(b, 200))
		}
		a := agent{key: k.Key, id: fmt.Sprintf("agent-%d", i), user: fmt.Sprintf("user-%d", i), session: fmt.Sprintf("lt-session-%d", i)}
		for j := range jobsPerAgent {
			a.jobs = append(a.jobs, fmt.Sprintf("lt-job-%d-%d", i, j))
		}
		for j := range workJobsPerAgent {
			a.work = append(a.work, fmt.Sprintf("lt-work-%d-%d", i, j))
		}
		a.started = &atomic.Int64{}
		for j := range handoffJobsPerAgent {
			if cfg.Mix[EpHandoff] > 0 {
				a.handoffJobs = append(a.handoffJobs, fmt.Sprintf("lt-handoff-%d-%d", i, j))
				w.ready <- handoff{key: a.key, job: a.handoffJobs[j], owner: a.id, other: "reviewer-" + a.id}
			}
		}
		w.agents[i] = a
	}

	errs := make(chan error, len(w.agents)+cfg.Memories)
	var wg sync.WaitGroup
	for i := range w.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := setupAgent(ctx, c, cfg.URL, &w.agents[i]); err != nil {
				errs <- err
			}
		}()
	}
	// Memories, spread over the agents' users, written by 8 writers.
	next := atomic.Int64{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= cfg.Memories {
					return
				}
				r := rand.New(rand.NewPCG(uint64(n), 7))
				a := w.agents[n%len(w.agents)]
				body := map[string]any{"text": fmt.Sprintf("memory %d: %s", n, sentence(r, 12)), "kind": "fact",
					"user_id": a.user, "agent_id": a.id, "importance": 0.5}
				if _, _, err := call(ctx, c, "POST", cfg.URL+"/v1/memories", a.key, body, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("setting up the load test's data: %w", err)
	}

	// POST /v1/context: include it when this server has it.
	a := w.agents[0]
	tmpl := map[string]any{"job_id": a.jobs[0], "session_id": a.session, "user_id": a.user, "agent_id": a.id,
		"query": "what does the client prefer for the colour grade", "max_tokens": 2000, "kv_namespaces": []string{"prefs"}}
	mix := cfg.Mix
	if mix[EpContext] > 0 {
		b, status, err := call(ctx, c, "POST", cfg.URL+"/v1/context", a.key, tmpl, 0)
		switch {
		case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			rep.Notes = append(rep.Notes, "POST /v1/context answered 404 on this server: the context endpoint is skipped (its share goes to the other endpoints)")
			mix = without(mix, EpContext)
		case err != nil:
			rep.Notes = append(rep.Notes, fmt.Sprintf("POST /v1/context refused the load test's request (%d %s): skipped", status, truncate(b, 200)))
			mix = without(mix, EpContext)
		default:
			// the endpoint answers the real contract: keep it in the mix
		}
	}
	names := make([]string, 0, len(mix))
	for n := range mix {
		if mix[n] > 0 {
			names = append(names, n)
		}
	}
	sortStrings(names)
	for _, n := range names {
		w.total += mix[n]
		w.mix = append(w.mix, weighted{n, w.total})
	}
	if w.total == 0 {
		return nil, fmt.Errorf("loadtest: the mix is empty")
	}
	return w, nil
}

func without(m map[string]int, name string) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// setupAgent gives an agent its jobs (checkpoint, events, finished steps), its session
// state and its preferences.
func setupAgent(ctx context.Context, c *http.Client, base string, a *agent) error {
	for _, job := range a.jobs {
		steps := []string{}
		for s := range 5 {
			steps = append(steps, fmt.Sprintf("setup-%d", s))
		}
		// The checkpoint is written over whatever a previous run against the same org left
		// (If-Match: *, the explicit overwrite; without it the server answers 428 then).
		reqs := []struct {
			method, path string
			body         any
			hdr          []string
		}{
			{"PUT", "/v1/jobs/" + job, map[string]any{"goal": "edit the launch video for " + a.user, "user_id": a.user, "agent_id": a.id}, nil},
			{"PUT", "/v1/jobs/" + job + "/checkpoint", map[string]any{"goal": "edit the launch video", "current_step": "colour",
				"done": steps, "pending": []string{"export"}, "next_action": "grade the second scene",
				"state": map[string]any{"scene": 2, "lut": "kodak", "notes": strings.Repeat("n", 200)}}, []string{"If-Match", "*"}},
		}
		for _, r := range reqs {
			if _, _, err := call(ctx, c, r.method, base+r.path, a.key, r.body, 0, r.hdr...); err != nil {
				return err
			}
		}
		events := make([]map[string]any, 20)
		for e := range events {
			events[e] = map[string]any{"op": "video.crop", "params": map[string]any{"frame": e, "x": 10, "y": 20}, "agent_id": a.id}
		}
		if _, _, err := call(ctx, c, "POST", base+"/v1/jobs/"+job+"/events", a.key, events, 0); err != nil {
			return err
		}
		for _, s := range steps {
			b, _, err := call(ctx, c, "POST", base+"/v1/jobs/"+job+"/steps/"+s+"/start", a.key, map[string]any{"owner": a.id}, 0)
			if err != nil {
				return err
			}
			var cl struct {
				Token int64 `json:"fencing_token"`
			}
			_ = json.Unmarshal(b, &cl)
			if _, _, err := call(ctx, c, "POST", base+"/v1/jobs/"+job+"/steps/"+s+"/complete", a.key,
				map[string]any{"fencing_token": cl.Token, "result": map[string]any{"uri": "s3://bucket/" + job + "/" + s}}, 0); err != nil {
				return err
			}
		}
	}
	for _, job := range append(slices.Clone(a.work), a.handoffJobs...) {
		if _, _, err := call(ctx, c, "PUT", base+"/v1/jobs/"+job, a.key,
			map[string]any{"goal": "render scenes for " + a.user, "user_id": a.user, "agent_id": a.id}, 0); err != nil {
			return err
		}
	}
	if _, _, err := call(ctx, c, "PUT", base+"/v1/sessions/"+a.session+"/state", a.key,
		map[string]any{"state": map[string]any{"scene": 1, "step": "colour", "params": map[string]any{"lut": "kodak", "strength": 0.7}},
			"user_id": a.user, "agent_id": a.id}, 0); err != nil {
		return err
	}
	_, _, err := call(ctx, c, "PUT", base+"/v1/kv/prefs/style", a.key,
		map[string]any{"value": map[string]any{"palette": []string{"#112233", "#445566"}, "font": "Inter"}, "user_id": a.user}, 0)
	return err
}

// pick chooses an endpoint by weight.
func (w *workload) pick() string {
	n := rand.IntN(w.total)
	for _, m := range w.mix {
		if n < m.cum {
			return m.name
		}
	}
	return w.mix[len(w.mix)-1].name
}

// targeter builds the next request of the mix. vegeta calls it from many workers at once.
func (w *workload) targeter() vegeta.Targeter {
	return func(t *vegeta.Target) error {
		a := &w.agents[rand.IntN(len(w.agents))]
		job := a.jobs[rand.IntN(len(a.jobs))]
		t.Header = http.Header{"Authorization": {"Bearer " + a.key}}
		t.Body = nil
		ep := w.pick()
		if ep == EpStepComplete {
			select {
			case cl := <-w.claims:
				t.Method, t.URL = "POST", w.url+"/v1/jobs/"+cl.job+"/steps/"+cl.step+"/complete"
				t.Body = fmt.Appendf(nil, `{"fencing_token":%d,"result":{"uri":"s3://bucket/%s/%s.mp4","frames":1200}}`, cl.token, cl.job, cl.step)
				t.Header.Set("Content-Type", "application/json")
				return nil
			default:
				ep = EpStepStart // nothing started yet: start one instead
			}
		}
		switch ep {
		case EpResume:
			t.Method, t.URL = "GET", w.url+"/v1/jobs/"+job+"/resume"
		case EpContext:
			t.Method, t.URL = "POST", w.url+"/v1/context"
			t.Body = fmt.Appendf(nil, `{"job_id":%q,"session_id":%q,"user_id":%q,"agent_id":%q,"query":%q,"max_tokens":2000,"kv_namespaces":["prefs"]}`,
				job, a.session, a.user, a.id, sentence(rand.New(rand.NewPCG(rand.Uint64(), 1)), 6))
		case EpStateGet:
			t.Method, t.URL = "GET", w.url+"/v1/sessions/"+a.session+"/state"
		case EpStatePatch:
			t.Method, t.URL = "PATCH", w.url+"/v1/sessions/"+a.session+"/state"
			t.Body = fmt.Appendf(nil, `{"state":{"scene":%d,"last_turn":%d}}`, rand.IntN(12), time.Now().UnixNano())
		case EpEventAppend:
			t.Method, t.URL = "POST", w.url+"/v1/jobs/"+job+"/events"
			t.Body = fmt.Appendf(nil, `{"op":"video.crop","params":{"frame":%d,"x":10,"y":20,"w":1280,"h":720},"agent_id":%q}`, rand.IntN(100000), a.id)
		case EpStepStart:
			n := a.started.Add(1) - 1
			work := a.work[(n/stepsPerWorkJob)%int64(len(a.work))]
			t.Method, t.URL = "POST", fmt.Sprintf("%s/v1/jobs/%s/steps/lt-%d/start", w.url, work, n)
			t.Body = fmt.Appendf(nil, `{"owner":%q,"lease_seconds":300,"input":{"tool":"render","params":{"scene":%d}}}`, a.id, n%12)
		case EpMemorySearch:
			t.Method, t.URL = "POST", w.url+"/v1/memories/search"
			t.Body = fmt.Appendf(nil, `{"query":%q,"user_id":%q,"agent_id":%q,"top_k":10}`,
				sentence(rand.New(rand.NewPCG(rand.Uint64(), 2)), 5), a.user, a.id)
		case EpKVGet:
			t.Method, t.URL = "GET", w.url+"/v1/kv/prefs/style?user_id="+a.user+"&agent_id="+a.id+"&session_id="+a.session
		case EpHandoff: // acknowledge a pending handoff, or create one on a job without
			select {
			case h := <-w.pending:
				w.inFlight.Store(h.job, h)
				t.Header.Set("Authorization", "Bearer "+h.key)
				t.Method, t.URL = "POST", w.url+"/v1/jobs/"+h.job+"/handoffs/"+h.id+"/ack"
				t.Body = fmt.Appendf(nil, `{"agent_id":%q}`, h.other)
			default:
				select {
				case h := <-w.ready:
					h.id = fmt.Sprint("lt-h-", w.handoffs.Add(1))
					w.inFlight.Store(h.job, h)
					t.Header.Set("Authorization", "Bearer "+h.key)
					t.Method, t.URL = "POST", w.url+"/v1/jobs/"+h.job+"/handoffs"
					t.Body = fmt.Appendf(nil, `{"id":%q,"from":%q,"to":%q}`, h.id, h.owner, h.other)
				default: // every job's handoff is in flight: append an event instead
					t.Method, t.URL = "POST", w.url+"/v1/jobs/"+job+"/events"
					t.Body = fmt.Appendf(nil, `{"op":"video.crop","params":{"frame":%d},"agent_id":%q}`, rand.IntN(100000), a.id)
				}
			}
		}
		if t.Body != nil {
			t.Header.Set("Content-Type", "application/json")
		}
		return nil
	}
}

// observe feeds results back into the workload: a claimed step can now be completed, a
// created handoff acknowledged, an acknowledged one's job given the next.
func (w *workload) observe(ep string, r *vegeta.Result) {
	if ep == EpHandoff || ep == EpHandoffAck {
		w.observeHandoff(ep, r)
		return
	}
	if ep != EpStepStart || r.Code < 200 || r.Code > 299 {
		return
	}
	var cl struct {
		Status string `json:"status"`
		Token  int64  `json:"fencing_token"`
	}
	if json.Unmarshal(r.Body, &cl) != nil || cl.Status != "claimed" {
		return
	}
	// URL: <base>/v1/jobs/{job}/steps/{step}/start
	parts := strings.Split(strings.TrimPrefix(r.URL, w.url+"/v1/jobs/"), "/")
	if len(parts) < 3 {
		return
	}
	select {
	case w.claims <- claim{job: parts[0], step: parts[2], token: cl.Token}:
	default:
	}
}

// observeHandoff moves a job through the EpHandoff cycle: created → pending, acknowledged
// → ready with the receiver as its owner. A failed request puts the job back where it was
// (the next pick repeats the step), so the cycle never loses a job.
func (w *workload) observeHandoff(ep string, r *vegeta.Result) {
	// URL: <base>/v1/jobs/{job}/handoffs[/{id}/ack]
	job, _, _ := strings.Cut(strings.TrimPrefix(r.URL, w.url+"/v1/jobs/"), "/")
	v, ok := w.inFlight.LoadAndDelete(job)
	if !ok {
		return
	}
	h := v.(handoff)
	done := r.Code >= 200 && r.Code <= 299
	switch {
	case ep == EpHandoff && done:
		w.pending <- h
	case ep == EpHandoff:
		h.id = ""
		w.ready <- h
	case done: // acknowledged: the receiver owns the job and hands it back next
		h.owner, h.other, h.id = h.other, h.owner, ""
		w.ready <- h
	default:
		w.pending <- h
	}
}

// newBar is a progress bar over d's seconds (redrawn on a terminal, plain lines elsewhere),
// or nil without a writer.
func newBar(out io.Writer, name string, d time.Duration) *progress.Bar {
	if out == nil {
		return nil
	}
	return progress.New(out, int64(d/time.Second), name, progress.Options{Unit: "s", PredictTime: true,
		ElapsedOnFinish: true, Throttle: 200 * time.Millisecond})
}
