package crashtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

const (
	steps        = 20
	jobID        = "crash-job"
	leaseSeconds = 1
	minKills     = 10
)

// ---- the server process ----------------------------------------------------------------

type server struct {
	t       *testing.T
	bin     string
	env     []string
	url     string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	kills    int
	byReason map[string]int
	restarts []time.Duration
}

func buildServer(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	require.NoError(t, err)
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(t.TempDir(), "strata-server")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/server")
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startLocked starts the process and waits for /readyz. s.mu is held.
func (s *server) startLocked() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(s.t, err)
	defer logf.Close()
	began := time.Now()
	cmd := exec.Command(s.bin)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(s.t, cmd.Start())
	s.cmd = cmd
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) { // kept: polls a real child server process (kill -9 harness)
		resp, err := hc.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				s.restarts = append(s.restarts, time.Since(began))
				return
			}
		}
	}
	s.t.Fatalf("server did not become ready; log:\n%s", tail(s.logPath))
}

func (s *server) start() { s.mu.Lock(); defer s.mu.Unlock(); s.startLocked() }

// killAndRestart SIGKILLs the server (no graceful shutdown, no flush) and starts it again.
func (s *server) killAndRestart(reason string) { s.killRunRestart(reason, nil) }

// killRunRestart SIGKILLs the server, runs between (if any) while no server runs, and
// starts it again.
func (s *server) killRunRestart(reason string, between func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
		s.kills++
		s.byReason[reason]++
	}
	if between != nil {
		between()
	}
	s.startLocked()
}

// generation counts the kills so far: the agent notices a restart by it.
func (s *server) generation() int { s.mu.Lock(); defer s.mu.Unlock(); return s.kills }

func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// ---- the HTTP client --------------------------------------------------------------------

type response struct {
	status int
	body   []byte
}

func (r *response) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "%d %s", r.status, r.body)
}

// errInterrupted is a call that did not get an answer from a live server (connection
// refused or reset, or a 5xx while the server goes down): the agent resumes.
var errInterrupted = errors.New("interrupted")

type client struct {
	t    *testing.T
	base string
	key  string
	hc   *http.Client
}

func (c *client) do(method, path string, body any, hdr ...string) (*response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, errInterrupted
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode >= 500 {
		return nil, errInterrupted
	}
	return &response{status: resp.StatusCode, body: b}, nil
}

// retry repeats a call until a live server answers it (the server is being restarted).
// Only for calls that are safe to repeat: reads, and writes with an idempotency key.
func (c *client) retry(method, path string, body any, hdr ...string) *response {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(15 * time.Millisecond) { // kept: polls a real child server process (kill -9 harness)
		if r, err := c.do(method, path, body, hdr...); err == nil {
			return r
		}
	}
	c.t.Fatalf("%s %s: no answer for 60s", method, path)
	return nil
}

// ---- the agent --------------------------------------------------------------------------

type stepRecord struct {
	Step  string          `json:"step_id"`
	Res   json.RawMessage `json:"result"`
	Lease string          `json:"lease"`
}

type resumeView struct {
	Job struct {
		CheckpointVersion int64 `json:"checkpoint_version"`
	} `json:"job"`
	Checkpoint *struct {
		Version    int64  `json:"version"`
		NextAction string `json:"next_action"`
		State      struct {
			Completed int `json:"completed"`
		} `json:"state"`
	} `json:"checkpoint"`
	CompletedSteps []stepRecord `json:"completed_steps"`
	InFlight       []stepRecord `json:"in_flight"`
	LastEventSeq   int64        `json:"last_event_seq"`
}

type agent struct {
	t      *testing.T
	c      *client
	srv    *server
	ledger string
	rng    *rand.Rand

	killAt      map[string]bool // "point/step" → kill there once
	owner       string
	interrupts  int
	claims      map[int]int             // times a step was claimed (ran)
	acked       map[int]json.RawMessage // step → result whose completion was acknowledged
	ackedEvents map[int64]int           // seq → step of every acknowledged event
	ackedCPs    map[int64]string        // checkpoint version → next_action acknowledged
	cpVersion   int64                   // the latest checkpoint version this agent knows
	sideEffects map[int]int             // side effects this agent performed, per step
	resumes     int
	gen         int // server generation at the last resume
	takeovers   int
	skipped     map[int]int // steps whose side effect was skipped because applied said so
}

func stepName(i int) string { return fmt.Sprintf("step-%02d", i) }

// maybeKill kills the server at this point when the plan says so.
func (a *agent) maybeKill(point string, i int) {
	k := point + "/" + strconv.Itoa(i)
	if a.killAt[k] {
		delete(a.killAt, k)
		a.srv.killAndRestart(point)
	}
}

// crashed reports whether the server was killed since the agent last resumed: the agent
// then drops what it holds in its context and starts over from resume (as an agent whose
// turn was cut off would).
func (a *agent) crashed() error {
	if a.srv.generation() != a.gen {
		return errInterrupted
	}
	return nil
}

// resume is step 1 of the protocol: read everything in one call and check it against what
// the server acknowledged before.
func (a *agent) resume() resumeView {
	t := a.t
	a.resumes++
	a.gen = a.srv.generation()
	r := a.c.retry("GET", "/v1/jobs/"+jobID+"/resume?events=5", nil)
	require.Equal(t, 200, r.status, string(r.body))
	var v resumeView
	r.decode(t, &v)
	done := map[string]json.RawMessage{}
	for _, s := range v.CompletedSteps {
		done[s.Step] = s.Res
	}
	for i, res := range a.acked {
		got, ok := done[stepName(i)]
		require.True(t, ok, "acknowledged completion of %s is missing after a restart", stepName(i))
		require.JSONEq(t, string(res), string(got))
	}
	require.GreaterOrEqual(t, v.Job.CheckpointVersion, a.cpVersion, "an acknowledged checkpoint is missing")
	for seq := range a.ackedEvents {
		require.GreaterOrEqual(t, v.LastEventSeq, seq, "an acknowledged event is missing")
	}
	a.cpVersion = v.Job.CheckpointVersion
	return v
}

// runStep runs step i: claim, ask applied, side effect, append the event, complete,
// checkpoint. errInterrupted means "start over from resume".
func (a *agent) runStep(i int, done []string) error {
	t := a.t
	name := stepName(i)
	a.maybeKill("before-start", i)
	if err := a.crashed(); err != nil {
		return err
	}
	r, err := a.c.do("POST", "/v1/jobs/"+jobID+"/steps/"+name+"/start", map[string]any{
		"owner": a.owner, "lease_seconds": leaseSeconds,
		"input": map[string]any{"tool": "render", "model": "none", "params": map[string]any{"step": i}}})
	if err != nil {
		return err
	}
	if r.status == 409 {
		// Held by an earlier incarnation of this agent: wait for its lease to run out.
		var p struct {
			Errors []struct {
				Value struct {
					Holder string    `json:"holder"`
					Until  time.Time `json:"until"`
				} `json:"value"`
			} `json:"errors"`
		}
		r.decode(t, &p)
		require.NotEmpty(t, p.Errors, string(r.body))
		require.NotEqual(t, a.owner, p.Errors[0].Value.Holder)
		time.Sleep(time.Until(p.Errors[0].Value.Until) + 20*time.Millisecond) // kept: real lease expiry in the server
		a.takeovers++
		return errInterrupted
	}
	require.Equal(t, 200, r.status, string(r.body))
	var claim struct {
		Status       string          `json:"status"`
		FencingToken int64           `json:"fencing_token"`
		Result       json.RawMessage `json:"result"`
	}
	r.decode(t, &claim)
	if claim.Status == "completed" {
		if _, ok := a.acked[i]; !ok {
			a.acked[i] = claim.Result // completed before a kill swallowed the answer
		}
		return nil
	}
	require.Equal(t, "claimed", claim.Status)
	_, wasDone := a.acked[i]
	require.False(t, wasDone, "%s ran again after its completion was acknowledged", name)
	a.claims[i]++
	a.maybeKill("after-start", i)
	if err := a.crashed(); err != nil {
		return err
	}

	// Guard the side effect: has exactly this op been applied?
	params := fmt.Sprintf(`{"step":%d}`, i)
	r, err = a.c.do("GET", "/v1/jobs/"+jobID+"/applied?op=render&params="+url.QueryEscape(params), nil)
	if err != nil {
		return err
	}
	require.Equal(t, 200, r.status, string(r.body))
	var ap struct {
		Applied bool `json:"applied"`
		Event   *struct {
			Seq    int64           `json:"seq"`
			Result json.RawMessage `json:"result"`
		} `json:"event"`
	}
	r.decode(t, &ap)
	a.maybeKill("after-applied", i)
	if err := a.crashed(); err != nil {
		return err
	}
	var result json.RawMessage
	if ap.Applied {
		a.skipped[i]++
		result = ap.Event.Result
	} else {
		// The side effect, outside Strata: one line in an append-only ledger.
		line := a.sideEffect(i)
		a.maybeKill("after-side-effect", i)
		result = json.RawMessage(fmt.Sprintf(`{"ledger_line":%d}`, line))
		// The event is the side effect's record: retried until acknowledged, with a
		// per-event idempotency key so a retry never appends it twice.
		r = a.c.retry("POST", "/v1/jobs/"+jobID+"/events", map[string]any{"op": "render", "params": json.RawMessage(params),
			"result": result, "agent_id": a.owner, "idempotency_key": "render-" + name})
		require.Contains(t, []int{200, 201}, r.status, string(r.body))
		var ev struct {
			Seq int64 `json:"seq"`
		}
		r.decode(t, &ev)
		a.ackedEvents[ev.Seq] = i
		a.maybeKill("after-append", i)
		if err := a.crashed(); err != nil {
			return err
		}
	}

	r, err = a.c.do("POST", "/v1/jobs/"+jobID+"/steps/"+name+"/complete", map[string]any{"fencing_token": claim.FencingToken, "result": result})
	if err != nil {
		return err
	}
	if r.status == 409 {
		return errInterrupted // fenced: the lease moved on; resume
	}
	require.Equal(t, 200, r.status, string(r.body))
	a.acked[i] = result
	a.maybeKill("after-complete", i)
	if err := a.crashed(); err != nil {
		return err
	}

	if err := a.checkpoint(append(done, name)); err != nil {
		return err
	}
	a.maybeKill("after-checkpoint", i)
	return a.crashed()
}

// checkpoint writes the next checkpoint version after the steps in done, with If-Match on
// the version the agent built on. The idempotency key makes a retry after a lost answer
// replay the first answer.
func (a *agent) checkpoint(done []string) error {
	t := a.t
	last := done[len(done)-1]
	next := "done"
	if len(done) < steps {
		next = "run " + stepName(len(done)+1)
	}
	r := a.c.retry("PUT", "/v1/jobs/"+jobID+"/checkpoint", map[string]any{"current_step": last, "done": done,
		"next_action": next, "state": map[string]any{"completed": len(done)}, "agent_id": a.owner},
		"If-Match", fmt.Sprintf(`"%d"`, a.cpVersion), "Idempotency-Key", fmt.Sprintf("ckpt-%s-on-%d", last, a.cpVersion))
	if r.status == 409 {
		return errInterrupted
	}
	require.Equal(t, 201, r.status, string(r.body))
	var cp struct {
		Version int64 `json:"version"`
	}
	r.decode(t, &cp)
	a.ackedCPs[cp.Version] = next
	a.cpVersion = cp.Version
	return nil
}

func (a *agent) sideEffect(i int) int {
	f, err := os.OpenFile(a.ledger, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(a.t, err)
	defer f.Close()
	n := 0
	for _, c := range a.sideEffects {
		n += c
	}
	_, err = fmt.Fprintf(f, "%s by %s\n", stepName(i), a.owner)
	require.NoError(a.t, err)
	require.NoError(a.t, f.Sync())
	a.sideEffects[i]++
	return n + 1
}

func (a *agent) run() {
	for {
		v := a.resume()
		completed := map[string]bool{}
		var done []string
		for _, s := range v.CompletedSteps {
			completed[s.Step] = true
		}
		next := 0
		for i := 1; i <= steps; i++ {
			if completed[stepName(i)] {
				done = append(done, stepName(i))
				continue
			}
			next = i
			break
		}
		// Steps completed after the latest checkpoint (a crash between complete and
		// checkpoint): checkpoint them first.
		if len(done) > 0 && (v.Checkpoint == nil || v.Checkpoint.State.Completed < len(done)) {
			if err := a.checkpoint(done); err != nil {
				a.interrupts++
				continue
			}
		}
		if next == 0 {
			return
		}
		if err := a.runStep(next, done); err != nil {
			a.interrupts++
			// Every other interruption comes back as a new agent incarnation (a new owner id),
			// which must wait for the old lease and take the step over with a new token.
			a.owner = fmt.Sprintf("agent-%d", a.interrupts/2)
		}
	}
}

// ---- the test -----------------------------------------------------------------------------

func TestCrashResumeExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills a server binary")
	}
	t.Parallel()
	began := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STRATA_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Logf("STRATA_CRASH_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	bin := buildServer(t)
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	dir := t.TempDir()
	port := freePort(t)
	admin := "sk_admin_" + testenv.RandomID(16)
	srv := &server{t: t, bin: bin, url: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: filepath.Join(dir, "server.log"),
		byReason: map[string]int{},
		env: append(os.Environ(), "STRATA_DATABASE_URL="+dsn, "STRATA_REDIS_URL="+testenv.RedisURL(),
			"STRATA_REDIS_PREFIX="+prefix, fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port),
			"STRATA_ADMIN_KEY="+admin, "STRATA_LOG_LEVEL=warn", "STRATA_SHUTDOWN_TIMEOUT=2s", "STRATA_SHUTDOWN_DELAY=0")}
	srv.start()
	t.Cleanup(srv.stop)
	defer func() {
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(srv.logPath))
		}
	}()

	hc := &http.Client{Timeout: 5 * time.Second}
	adminC := &client{t: t, base: srv.url, key: admin, hc: hc}
	r := adminC.retry("POST", "/v1/admin/keys", map[string]any{"org_id": "crash-org", "role": "agent"})
	require.Equal(t, 201, r.status, string(r.body))
	var key struct {
		Key string `json:"key"`
	}
	r.decode(t, &key)
	c := &client{t: t, base: srv.url, key: key.Key, hc: hc}
	r = c.retry("PUT", "/v1/jobs/"+jobID, map[string]any{"goal": "render 20 scenes"}, "Idempotency-Key", "create-job")
	require.Equal(t, 201, r.status, string(r.body))

	// Kill plan: 12 random points between requests, with at least 3 between a step's start
	// and its completion, 2 after an event append (the applied guard must then skip the
	// side effect) and 1 between a side effect and its append; plus kills at random moments
	// from another goroutine, which land in the middle of requests.
	points := []string{"before-start", "after-start", "after-applied", "after-side-effect", "after-append", "after-complete", "after-checkpoint"}
	killAt := map[string]bool{}
	want := func(point string, n int) {
		for have := 0; have < n; {
			k := point + "/" + strconv.Itoa(1+rng.IntN(steps))
			if !killAt[k] {
				killAt[k] = true
				have++
			}
		}
	}
	want("after-start", 3)
	want("after-append", 2)
	want("after-side-effect", 1)
	for len(killAt) < 12 {
		killAt[points[rng.IntN(len(points))]+"/"+strconv.Itoa(1+rng.IntN(steps))] = true
	}
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Add(1)
	go func() {
		defer killer.Done()
		arng := rand.New(rand.NewPCG(seed, 0xa5c))
		for n := 0; n < 6; n++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(150+arng.IntN(900)) * time.Millisecond):
				srv.killAndRestart("async")
			}
		}
	}()

	a := &agent{t: t, c: c, srv: srv, ledger: filepath.Join(dir, "ledger.txt"), rng: rng, killAt: killAt, owner: "agent-0",
		claims: map[int]int{}, acked: map[int]json.RawMessage{}, ackedEvents: map[int64]int{}, ackedCPs: map[int64]string{},
		sideEffects: map[int]int{}, skipped: map[int]int{}}
	a.run()
	close(stop)
	killer.Wait()

	// Finish the job: the completion and its outbox row are one transaction.
	r = c.retry("POST", "/v1/jobs/"+jobID+"/complete", map[string]any{"outcome": map[string]any{"scenes": steps}}, "Idempotency-Key", "complete-job")
	require.Equal(t, 200, r.status, string(r.body))
	// One more kill after everything was acknowledged, then verify on a fresh process.
	srv.killAndRestart("final")

	// 1. Each side effect happened exactly once (the ledger is the world).
	f, err := os.Open(a.ledger)
	require.NoError(t, err)
	perStep := map[string]int{}
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		perStep[strings.Fields(sc.Text())[0]]++
	}
	f.Close()
	require.Equal(t, steps, lines, "ledger:\n%v", perStep)
	for i := 1; i <= steps; i++ {
		require.Equal(t, 1, perStep[stepName(i)], "side effect of %s", stepName(i))
	}

	// 2. Every step completed, none ran after its completion (checked as we went), and a
	// step killed in flight ran again.
	r = c.retry("GET", "/v1/jobs/"+jobID+"/steps?limit=100", nil)
	var stepList struct {
		Items []struct {
			StepID   string `json:"step_id"`
			Status   string `json:"status"`
			Attempts int    `json:"attempts"`
		} `json:"items"`
	}
	r.decode(t, &stepList)
	require.Len(t, stepList.Items, steps)
	reran := 0
	for _, s := range stepList.Items {
		require.Equal(t, "completed", s.Status, s.StepID)
	}
	for _, n := range a.claims {
		if n > 1 {
			reran++
		}
	}
	require.Positive(t, reran, "no step killed in flight ran again (claims %v)", a.claims)

	// 3. Every acknowledged event is present; seqs are 1..20 with no gap and one per step.
	r = c.retry("GET", "/v1/jobs/"+jobID+"/events?limit=1000", nil)
	var evs struct {
		Items []struct {
			Seq    int64           `json:"seq"`
			Op     string          `json:"op"`
			Params map[string]int  `json:"params"`
			Result json.RawMessage `json:"result"`
		} `json:"items"`
	}
	r.decode(t, &evs)
	require.Len(t, evs.Items, steps)
	seen := map[int]bool{}
	for i, e := range evs.Items {
		require.EqualValues(t, i+1, e.Seq, "seqs are gap-free")
		require.Equal(t, "render", e.Op)
		require.False(t, seen[e.Params["step"]], "one event per step")
		seen[e.Params["step"]] = true
	}
	for seq, step := range a.ackedEvents {
		require.Equal(t, step, evs.Items[seq-1].Params["step"], "acknowledged event %d", seq)
	}

	// 4. Every acknowledged checkpoint is present, versions 1..n gap-free.
	for v, next := range a.ackedCPs {
		r = c.retry("GET", fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", jobID, v), nil)
		require.Equal(t, 200, r.status, string(r.body))
		var cp struct {
			NextAction string `json:"next_action"`
		}
		r.decode(t, &cp)
		require.Equal(t, next, cp.NextAction, "checkpoint %d", v)
	}
	r = c.retry("GET", "/v1/jobs/"+jobID+"/checkpoints?limit=1000", nil)
	var cps struct {
		Items []struct {
			Version int64 `json:"version"`
		} `json:"items"`
	}
	r.decode(t, &cps)
	for i, cp := range cps.Items {
		require.EqualValues(t, i+1, cp.Version)
	}
	require.GreaterOrEqual(t, len(cps.Items), len(a.ackedCPs))

	// 5. The job is completed and its consolidation enqueued once.
	r = c.retry("GET", "/v1/jobs/"+jobID+"/resume", nil)
	var fin struct {
		Job struct {
			Status string `json:"status"`
		} `json:"job"`
		NextAction string `json:"next_action"`
	}
	r.decode(t, &fin)
	require.Equal(t, "completed", fin.Job.Status)
	require.Equal(t, "done", fin.NextAction)

	srv.mu.Lock()
	kills, reasons, restarts := srv.kills, srv.byReason, srv.restarts
	srv.mu.Unlock()
	require.GreaterOrEqual(t, kills, minKills)
	var worst time.Duration
	for _, d := range restarts {
		worst = max(worst, d)
	}
	t.Logf("kills=%d %v; interruptions=%d resumes=%d takeovers=%d steps re-run=%d applied-skips=%d; restarts=%d (slowest %s); total %s",
		kills, reasons, a.interrupts, a.resumes, a.takeovers, reran, len(a.skipped), len(restarts), worst.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond))
}
