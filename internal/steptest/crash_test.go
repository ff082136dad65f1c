package steptest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
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

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

const (
	steps    = 10
	jobID    = "crash-steps"
	owner    = "crash-worker"
	effectOp = "ledger.write"

	envWorker = "STEPTEST_WORKER"
	envURL    = "STEPTEST_URL"
	envKey    = "STEPTEST_KEY"
	envLedger = "STEPTEST_LEDGER"
	envTrace  = "STEPTEST_TRACE"
	envRun    = "STEPTEST_RUN"
	envPause  = "STEPTEST_PAUSE" // "<phase>:<step>": the worker says so and waits to be killed
)

// Phases the worker can pause at: both lie between a side effect and its step's completion.
const (
	afterEffect = "after-effect" // the ledger line is written, the event not yet appended
	afterLogged = "after-logged" // the event is appended, the step not yet completed
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func stepID(i int) string { return fmt.Sprintf("s%02d", i) }

// appendSynced appends one line to path and fsyncs it before returning.
func appendSynced(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// worker is one worker process: it runs the job's steps with client.RunStep, each doing its
// side effect through client.Once, and reports what it does (trace file, fsync'd, and stdout).
func worker() error {
	ctx := context.Background()
	ledger, tracePath, run, pause := os.Getenv(envLedger), os.Getenv(envTrace), os.Getenv(envRun), os.Getenv(envPause)
	c := client.New(os.Getenv(envURL), os.Getenv(envKey), client.WithOwner(owner),
		client.WithRetries(6, 10*time.Millisecond, 200*time.Millisecond))
	trace := func(what string, i int) error {
		line := fmt.Sprintf("%s %s %s", run, what, stepID(i))
		if err := appendSynced(tracePath, line); err != nil {
			return err
		}
		_, err := fmt.Fprintln(os.Stdout, line)
		return err
	}
	waitHere := func(phase string, i int) error {
		if pause != phase+":"+stepID(i) {
			return nil
		}
		if err := trace("pause-"+phase, i); err != nil {
			return err
		}
		select {} // until SIGKILL
	}
	j, err := c.GetJob(ctx, jobID)
	if err != nil {
		return err
	}
	if j.Status == "completed" {
		return trace("done", -1)
	}
	if err := trace("ready", -1); err != nil {
		return err
	}
	for i := range steps {
		ran := false
		_, err := client.RunStep(ctx, c, jobID, stepID(i), func(ctx context.Context) (string, error) {
			ran = true
			if err := trace("fn-start", i); err != nil {
				return "", err
			}
			applied := true
			out, err := client.Once(ctx, c, jobID, effectOp, map[string]any{"step": stepID(i)}, func(ctx context.Context, key string) (string, error) {
				applied = false
				if err := trace("effect-begin", i); err != nil {
					return "", err
				}
				// The side effect, idempotent on Once's key: a ledger line per key.
				data, err := os.ReadFile(ledger)
				if err != nil && !os.IsNotExist(err) {
					return "", err
				}
				for _, l := range strings.Split(string(data), "\n") {
					if k, _, _ := strings.Cut(l, " "); k == key {
						return "ledger:" + stepID(i), trace("effect-dedup", i)
					}
				}
				if err := appendSynced(ledger, key+" "+stepID(i)+" run"+run); err != nil {
					return "", err
				}
				if err := trace("effect", i); err != nil {
					return "", err
				}
				return "ledger:" + stepID(i), waitHere(afterEffect, i)
			})
			if err != nil {
				return "", err
			}
			if applied {
				if err := trace("already-applied", i); err != nil {
					return "", err
				}
			}
			if err := trace("logged", i); err != nil {
				return "", err
			}
			return out, waitHere(afterLogged, i)
		}, client.StepLease(5*time.Second))
		if err != nil {
			return err
		}
		what := "completed"
		if !ran {
			what = "skipped"
		}
		if err := trace(what, i); err != nil {
			return err
		}
	}
	if _, err := c.CompleteJob(ctx, jobID, "completed", map[string]any{"steps": steps}); err != nil {
		return err
	}
	return trace("done", -1)
}

type traceLine struct {
	run  int
	what string
	step string
}

func readTrace(t *testing.T, path string) []traceLine {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []traceLine
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue // a line cut by the kill (fsync'd lines are whole)
		}
		r, err := strconv.Atoi(f[0])
		require.NoError(t, err, l)
		out = append(out, traceLine{run: r, what: f[1], step: f[2]})
	}
	return out
}

// TestWorkerKilledMidStepsExactlyOnce runs the worker process and SIGKILLs it: once after a
// side effect before its event is appended, once after the event before the step completes,
// then at random moments, restarting it until the job completes.
func TestWorkerKilledMidStepsExactlyOnce(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(50 * time.Second)
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("acme", "agent")
	c := client.New(s.URL, key)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	_, _, err := c.PutJob(ctx, jobID, client.JobSpec{Goal: "ten side effects, each exactly once", Owner: owner}, client.Version(0))
	require.NoError(t, err)

	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("STEPTEST_SEED"); v != "" {
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("STEPTEST_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	ledger, tracePath := filepath.Join(dir, "ledger"), filepath.Join(dir, "trace")

	// The kill plan: two exact points, then random moments, then no kill.
	pauses := []string{afterEffect + ":" + stepID(2), afterLogged + ":" + stepID(4)}
	randomKills := 4
	kills, runs := 0, 0
	for run := 1; ; run++ {
		require.True(t, time.Now().Before(deadline), "the job did not complete within the test's bound (%d runs)", runs)
		require.LessOrEqual(t, run, 20, "too many runs")
		pause := ""
		if run <= len(pauses) {
			pause = pauses[run-1]
		}
		killAfter := time.Duration(0)
		if pause == "" && run <= len(pauses)+randomKills {
			killAfter = time.Duration(rng.IntN(150)) * time.Millisecond
		}
		runs++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=1", envURL+"="+s.URL, envKey+"="+key, envLedger+"="+ledger,
			envTrace+"="+tracePath, envRun+"="+strconv.Itoa(run), envPause+"="+pause)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		var mu sync.Mutex
		killed, finished := false, false
		kill := func(why string) {
			mu.Lock()
			defer mu.Unlock()
			if !killed && !finished {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				kills++
				t.Logf("run %d: SIGKILL %s", run, why)
			}
		}
		timer := time.AfterFunc(20*time.Second, func() { kill("(run timed out)") })
		done := false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 {
				continue
			}
			switch {
			case f[1] == "ready" && killAfter > 0:
				d := killAfter
				time.AfterFunc(d, func() { kill(fmt.Sprintf("at random, %v after it was ready", d)) })
			case strings.HasPrefix(f[1], "pause-"):
				kill("at " + strings.TrimPrefix(f[1], "pause-") + " of " + f[2])
			case f[1] == "done":
				done = true
				mu.Lock()
				finished = true // a random kill due after this point is not a kill
				mu.Unlock()
			}
		}
		werr := cmd.Wait()
		timer.Stop()
		mu.Lock()
		finished = true
		wasKilled := killed
		mu.Unlock()
		if !wasKilled {
			require.NoError(t, werr, "worker run %d: %s", run, stderr.String())
		}
		if done {
			break
		}
		require.True(t, wasKilled, "run %d ended without finishing the job: %s", run, stderr.String())
	}
	t.Logf("%d runs, %d kills", runs, kills)
	require.GreaterOrEqual(t, kills, 2)

	// The ledger: every side effect exactly once.
	data, err := os.ReadFile(ledger)
	require.NoError(t, err)
	byStep := map[string]int{}
	keys := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 3, "ledger line %q", l)
		require.False(t, keys[f[0]], "key %s twice in the ledger", f[0])
		keys[f[0]] = true
		byStep[f[1]]++
	}
	for i := range steps {
		require.Equal(t, 1, byStep[stepID(i)], "side effect of %s in the ledger", stepID(i))
	}
	require.Len(t, byStep, steps)

	// The trace: no completed step ran again; a side effect was repeated (and absorbed by its
	// key) only when a run was cut off between the effect's start and its logged event.
	tr := readTrace(t, tracePath)
	completedAt := map[string]int{} // step → index of its first "completed" or "skipped" line
	begun := map[string]bool{}      // step → an effect began and was not yet logged
	dedups := map[string]int{}
	alreadyApplied := map[string]bool{}
	for i, l := range tr {
		switch l.what {
		case "completed", "skipped": // skipped: completed in a run killed before it could say so
			if _, ok := completedAt[l.step]; !ok {
				completedAt[l.step] = i
			}
		case "fn-start":
			_, done := completedAt[l.step]
			require.False(t, done, "step %s ran again in run %d after it completed", l.step, l.run)
		case "effect-begin":
			begun[l.step] = true
		case "logged":
			begun[l.step] = false
		case "effect-dedup":
			dedups[l.step]++
			require.True(t, begun[l.step], "step %s: the side effect was repeated in run %d although its event was logged", l.step, l.run)
		case "already-applied":
			alreadyApplied[l.step] = true
		}
	}
	require.Len(t, completedAt, steps)
	require.Positive(t, dedups[stepID(2)], "run 1 was killed after the side effect of s02 and before its event: the restart repeated it, the ledger key absorbed it")
	require.True(t, alreadyApplied[stepID(4)], "run 2 was killed after s04's event and before its completion: the restart found the event and skipped the side effect")
	t.Logf("side effects absorbed by the ledger key: %v; steps whose event was found on restart: %v", dedups, alreadyApplied)

	// Strata: the job completed, one event per side effect, every step completed under its
	// first claim (the restarted worker is the same owner and got its claim back).
	j, err := c.GetJob(ctx, jobID)
	require.NoError(t, err)
	require.Equal(t, "completed", j.Status)
	evs, err := c.ListEvents(ctx, jobID, client.EventFilter{Op: effectOp}, 100)
	require.NoError(t, err)
	require.Len(t, evs.Items, steps, "one event per side effect")
	st, err := c.ListSteps(ctx, jobID, "", 100)
	require.NoError(t, err)
	require.Len(t, st.Items, steps)
	for _, s := range st.Items {
		require.Equal(t, "completed", s.Status, s.StepID)
		require.EqualValues(t, 1, s.FencingToken, s.StepID)
		require.JSONEq(t, `"ledger:`+s.StepID+`"`, string(s.Result), s.StepID)
	}
}
