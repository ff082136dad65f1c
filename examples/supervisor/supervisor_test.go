package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

var errKilled = errors.New("worker killed")

const (
	// envMain makes this test binary the supervisor command: TestMain runs run (or, for
	// `worker ...`, the demo worker with the test's hooks) instead of the tests.
	envMain = "SUPERVISOR_TEST_MAIN"
	// envPause names a step: a worker process that did its side effect (done and recorded in
	// the job's log) says so on stdout and waits there to be killed.
	envPause = "SUPERVISOR_TEST_PAUSE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		os.Exit(testMain())
	}
	os.Exit(m.Run())
}

func testMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	var err error
	if len(args) > 0 && args[0] == "worker" {
		hooks := workerHooks{afterEffect: func(step string) {
			if step == os.Getenv(envPause) {
				fmt.Printf("worker pid %d: paused after the side effect of %s\n", os.Getpid(), step)
				select {} // until SIGKILL
			}
		}}
		err = runWorker(ctx, args[1:], os.Getenv, os.Stdout, os.Stderr, hooks)
	} else {
		err = run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisor:", err)
		return 1
	}
	return 0
}

// runJob is a worker: it runs the job's steps through the durable-step protocol, doing each
// step's side effect only when it holds the step's lease. killAt simulates a worker that
// dies right after claiming that step (no heartbeat, no completion: its lease runs out).
func runJob(ctx context.Context, c *client.Client, job, owner string, steps []string, effect func(step string), killAt string) error {
	for _, st := range steps {
		cl, err := c.StartStep(ctx, job, st, owner, 1, nil)
		if err != nil {
			return err
		}
		if cl.Status == "completed" {
			continue // done by an earlier worker: not run again
		}
		if st == killAt {
			return errKilled
		}
		effect(st)
		if _, err := c.CompleteStep(ctx, job, st, cl.FencingToken, map[string]string{"by": owner}); err != nil {
			return err
		}
	}
	_, err := c.CompleteJob(ctx, job, "completed", nil)
	return err
}

// TestSupervisorRestartsAStalledWorker: a worker dies at step 2 of 4; its lease runs out, the
// watcher emits job.stalled, the supervisor restarts a worker, and the job completes with
// each step's side effect exactly once.
func TestSupervisorRestartsAStalledWorker(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_EVENTS_WATCH_INTERVAL", "100ms"))
	c := client.New(s.URL, s.NewKey("sup", "agent"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := []string{"cut", "colour", "caption", "export"}
	var mu sync.Mutex
	effects := map[string]int{}
	effect := func(step string) { mu.Lock(); effects[step]++; mu.Unlock() }

	_, _, err := c.PutJob(ctx, "film-1", client.JobSpec{Goal: "cut, colour, caption, export"}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, runJob(ctx, c, "film-1", "worker-1", steps, effect, "colour"), errKilled)

	restarts := make(chan string, 4)
	done := make(chan error, 4)
	var log strings.Builder
	var logMu sync.Mutex
	sup := &Supervisor{Client: c, Log: writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return log.Write(p) }),
		Restart: func(ctx context.Context, job string) {
			restarts <- job
			n := len(restarts)
			go func() { done <- runJob(ctx, c, job, fmt.Sprint("worker-", n+1), steps, effect, "") }()
		}}
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(ctx) }()

	select {
	case job := <-restarts:
		require.Equal(t, "film-1", job)
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor restarted nothing within 20s")
	}
	require.NoError(t, <-done)
	j, err := c.GetJob(ctx, "film-1")
	require.NoError(t, err)
	require.Equal(t, "completed", j.Status)
	mu.Lock()
	require.Equal(t, map[string]int{"cut": 1, "colour": 1, "caption": 1, "export": 1}, effects)
	mu.Unlock()
	logMu.Lock()
	require.Contains(t, log.String(), `lease_expired at step "colour", owner worker-1`)
	logMu.Unlock()
	select {
	case job := <-restarts:
		t.Fatalf("restarted %s twice", job)
	case <-time.After(500 * time.Millisecond): // a few watcher passes: one stall, one event
	}
	cancel()
	require.NoError(t, <-supDone)

	// A supervisor started later from the beginning of the stream gets the same event again,
	// about a job completed since: it restarts nothing.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	late := &lineLog{}
	sup2 := &Supervisor{Client: c, Log: late, Restart: func(_ context.Context, job string) { restarts <- job }}
	sup2Done := make(chan error, 1)
	go func() { sup2Done <- sup2.Run(ctx2) }()
	late.waitFor(t, regexp.MustCompile(`^event \d+: job film-1 stalled \(lease_expired .*\): the job is completed now: nothing to restart$`), 1, 15*time.Second)
	cancel2()
	require.NoError(t, <-sup2Done)
	require.Empty(t, restarts, "a replayed stall of a completed job restarted it")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)

// TestSupervisorRestartsAKilledWorkerProcess: the supervisor command (this test binary,
// re-executed) runs the demo worker as its child process. The test SIGKILLs that process mid
// step — after the side effect of "colour" was done and recorded in the job's log by
// client.Once inside client.RunStep, before the step completed — its lease (3 s) runs out, the
// watcher emits job.stalled, the supervisor starts a new worker process, and the job
// completes with every side effect received exactly once by an outside receiver.
func TestSupervisorRestartsAKilledWorkerProcess(t *testing.T) {
	t.Parallel()
	// The stall is the lease running out, found within a watcher pass (100 ms) of the expiry.
	// STRATA_STALLED_AFTER is far above the lease so that no no_progress stall comes first
	// (its worker would only wait for the dead one's lease).
	s := apptest.Start(t, apptest.Env("STRATA_EVENTS_WATCH_INTERVAL", "100ms"), apptest.Env("STRATA_STALLED_AFTER", "1m"))
	key := s.NewKey("sup-proc", "agent")
	c := client.New(s.URL, key)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	began := time.Now()

	// The outside receiver: it counts each side effect by its idempotency id.
	var mu sync.Mutex
	byKey, byStep := map[string]int{}, map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e Effect
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil || e.Key == "" || r.Header.Get("Idempotency-Key") != e.Key {
			http.Error(w, "bad effect", http.StatusBadRequest)
			return
		}
		mu.Lock()
		byKey[e.Key]++
		byStep[e.Step]++
		n := byKey[e.Key]
		mu.Unlock()
		fmt.Fprintf(w, "%q\n", fmt.Sprintf("%s done (call %d)", e.Step, n))
	}))
	t.Cleanup(recv.Close)

	const job = "film-2"
	_, _, err := c.PutJob(ctx, job, client.JobSpec{Goal: "cut, colour, caption, export"}, client.Version(0))
	require.NoError(t, err)

	sup := exec.Command(os.Args[0], "--job", job, "--", os.Args[0], "worker", "--lease", "3s", "--effect-url", recv.URL)
	sup.Env = append(os.Environ(), envMain+"=1", envPause+"=colour", "STRATA_URL="+s.URL, "STRATA_API_KEY="+key)
	out, stderr := &lineLog{}, &lineLog{}
	sup.Stdout, sup.Stderr = out, stderr
	sup.WaitDelay = 10 * time.Second
	require.NoError(t, sup.Start())
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Wait() }()
	t.Cleanup(func() {
		// On failure, leave no process behind: the supervisor and any worker still running
		// (a paused one waits for ever).
		_ = sup.Process.Kill()
		for _, m := range out.matches(regexp.MustCompile(`started worker pid (\d+)`)) {
			pid, _ := strconv.Atoi(m[1])
			if len(out.matches(regexp.MustCompile(fmt.Sprintf(`worker pid %d exited`, pid)))) == 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		t.Logf("supervisor stdout (with its workers'):\n%s\nstderr:\n%s", out.String(), stderr.String())
	})

	started := regexp.MustCompile(`^job film-2: started worker pid (\d+)$`)
	p1, err := strconv.Atoi(out.waitFor(t, started, 1, 20*time.Second)[0][1])
	require.NoError(t, err)
	out.waitFor(t, regexp.MustCompile(fmt.Sprintf(`^worker pid %d: paused after the side effect of colour$`, p1)), 1, 20*time.Second)

	// Mid-step: colour's side effect reached the receiver and is recorded in Strata's log, but
	// the step is still running under the first worker's claim.
	mu.Lock()
	require.Equal(t, map[string]int{"cut": 1, "colour": 1}, byStep)
	mu.Unlock()
	evs, err := c.ListEvents(ctx, job, client.EventFilter{Op: effectOp}, 10)
	require.NoError(t, err)
	require.Len(t, evs.Items, 2)
	require.JSONEq(t, `{"step": "colour"}`, string(evs.Items[1].Params))
	st, err := c.GetStep(ctx, job, "colour")
	require.NoError(t, err)
	require.Equal(t, "running", st.Status)
	require.Equal(t, workerOwner(p1), st.Owner)

	require.NoError(t, syscall.Kill(p1, syscall.SIGKILL))
	killedAt := time.Now()
	out.waitFor(t, regexp.MustCompile(fmt.Sprintf(`^job film-2: worker pid %d exited: signal: killed$`, p1)), 1, 10*time.Second)

	// The supervisor receives job.stalled for the job and starts a new worker process.
	stall := out.waitFor(t, regexp.MustCompile(`^event \d+: job film-2 stalled \(lease_expired at step "colour", owner (\S+), token 1, for .*\): restarting its worker$`), 1, 20*time.Second)
	require.Equal(t, workerOwner(p1), stall[0][1])
	m := out.waitFor(t, started, 2, 10*time.Second)
	p2, err := strconv.Atoi(m[1][1])
	require.NoError(t, err)
	require.NotEqual(t, p1, p2, "a new worker process")
	out.waitFor(t, regexp.MustCompile(fmt.Sprintf(`^job film-2: worker pid %d exited: ok$`, p2)), 1, 20*time.Second)
	t.Logf("killed after %v; the new worker completed the job %v after the kill", killedAt.Sub(began).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))

	j, err := c.GetJob(ctx, job)
	require.NoError(t, err)
	require.Equal(t, "completed", j.Status)

	// Every side effect exactly once, as the receiver counted them: one call per idempotency
	// id, one per step. Strata's log holds one event per side effect.
	mu.Lock()
	require.Equal(t, map[string]int{"cut": 1, "colour": 1, "caption": 1, "export": 1}, byStep)
	require.Len(t, byKey, 4)
	for k, n := range byKey {
		require.Equal(t, 1, n, "calls with idempotency id %s", k)
	}
	mu.Unlock()
	evs, err = c.ListEvents(ctx, job, client.EventFilter{Op: effectOp}, 10)
	require.NoError(t, err)
	require.Len(t, evs.Items, 4)

	// colour: claimed by the killed worker, which lost the lease, then taken over and completed
	// by the new one; cut, completed by the first worker, was not claimed again.
	at, err := c.ListAttempts(ctx, job, "colour", "", 10)
	require.NoError(t, err)
	require.Len(t, at.Items, 2)
	require.Equal(t, []string{workerOwner(p1), "new", "lease_lost"}, []string{at.Items[0].Owner, at.Items[0].Claim, at.Items[0].Outcome})
	require.Equal(t, []string{workerOwner(p2), "takeover", "completed"}, []string{at.Items[1].Owner, at.Items[1].Claim, at.Items[1].Outcome})
	at, err = c.ListAttempts(ctx, job, "cut", "", 10)
	require.NoError(t, err)
	require.Len(t, at.Items, 1)
	require.Equal(t, workerOwner(p1), at.Items[0].Owner)

	// One stall, one restart: a few more watcher passes bring no second event.
	time.Sleep(500 * time.Millisecond)
	require.Len(t, out.matches(regexp.MustCompile(`stalled \(`)), 1, "job.stalled events received")
	require.Len(t, out.matches(started), 2, "worker processes started")

	require.NoError(t, sup.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-supDone:
		require.NoError(t, err, "the supervisor exits cleanly on SIGTERM")
	case <-time.After(15 * time.Second):
		t.Fatal("the supervisor did not exit within 15s of SIGTERM")
	}
}

// lineLog collects a process's output, safe for concurrent writes, and finds lines in it.
type lineLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// matches returns the submatches of every whole line matching re, in order.
func (l *lineLog) matches(re *regexp.Regexp) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// waitFor waits until n lines match re and returns their submatches.
func (l *lineLog) waitFor(t *testing.T, re *regexp.Regexp, n int, within time.Duration) [][]string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if m := l.matches(re); len(m) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines matching %s within %v", n, re, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcessesKeepOneWorkerPerJob: starting a job's worker again while the one started
// earlier still runs (a stall of a hung worker) kills the earlier one first; another job's
// worker is left alone, and ending ctx stops the rest with SIGTERM.
func TestProcessesKeepOneWorkerPerJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &lineLog{}
	// A worker that hangs: sh runs `sleep 60` with the job id as $1.
	p := &Processes{Command: []string{"sh", "-c", "exec sleep 60", "sh"}, Log: log, StopGrace: 2 * time.Second}
	require.NoError(t, p.Start(ctx, "a"))
	require.NoError(t, p.Start(ctx, "b"))
	first := log.waitFor(t, regexp.MustCompile(`^job a: started worker pid (\d+)$`), 1, time.Second)[0][1]
	require.NoError(t, p.Start(ctx, "a"))
	log.waitFor(t, regexp.MustCompile(`^job a: worker pid `+first+` still runs: killing it$`), 1, time.Second)
	log.waitFor(t, regexp.MustCompile(`^job a: worker pid `+first+` exited: signal: killed$`), 1, 5*time.Second)
	started := log.waitFor(t, regexp.MustCompile(`^job a: started worker pid (\d+)$`), 2, time.Second)
	require.NotEqual(t, first, started[1][1])
	require.Empty(t, log.matches(regexp.MustCompile(`^job b: .*(killing|exited)`)), "job b's worker untouched")

	cancel()
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("workers still running 10s after ctx ended:\n%s", log.String())
	}
	require.Len(t, log.matches(regexp.MustCompile(`exited: signal: terminated$`)), 2, log.String())
}
