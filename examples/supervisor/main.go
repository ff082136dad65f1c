// Command supervisor is an example of acting on Strata's events (docs/events.md): it follows
// the org's job.stalled events on GET /v1/events/stream and restarts the worker process of each
// stalled job. The restarted worker resumes the job where it stopped — steps already
// completed answer their stored result instead of running again, and a side effect already
// recorded in the job's log is not done again (client.RunStep and client.Once, docs/jobs.md) —
// so every side effect happens once however often workers die.
//
//	STRATA_URL=http://localhost:8080 STRATA_API_KEY=sk_... supervisor [--after SEQ] [--job JOB]... -- ./my-worker [ARGS...]
//
// runs `./my-worker ARGS... <job>` as a child process for every job that stalls, and at once
// for each --job. It keeps one worker process per job: when a job whose worker it started
// stalls while that process still runs (hung: no heartbeat, no progress), it kills it before
// starting the next. The stream resumes after the last event seen when the connection drops,
// and a new supervisor picks up where it is told (--after), since the stream is read from the
// server's outbox; a replayed stall of a job that has finished since starts nothing.
//
//	supervisor worker [--lease D] [--effect-url URL] JOB
//
// is a demo worker to supervise (worker.go): it runs JOB's four steps with the one-line step
// helper, each step's side effect a POST to an outside receiver.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/strata-mem/strata/client"
)

// Supervisor restarts the worker of every job that stalls.
type Supervisor struct {
	Client *client.Client
	// Restart starts a worker for job (it must not block: the supervisor keeps reading).
	Restart func(ctx context.Context, job string)
	After   int64     // resume the stream after this event seq
	Log     io.Writer // one line per stall
}

// Stall is what a job.stalled event says: where and why.
type Stall struct {
	JobID        string `json:"job_id"`
	Reason       string `json:"reason"`
	StepID       string `json:"step_id"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencing_token"`
	StalledFor   string `json:"stalled_for"`
}

// Run follows job.stalled until ctx ends and restarts the worker of each stalled job that
// is still running.
func (s *Supervisor) Run(ctx context.Context) error {
	err := s.Client.StreamEvents(ctx, client.StreamOptions{Types: []string{"job.stalled"}, After: s.After},
		func(e client.StreamEvent) error {
			var st Stall
			if err := json.Unmarshal(e.Data, &st); err != nil {
				return fmt.Errorf("event %d: %w", e.Seq, err)
			}
			// An event from before this supervisor started (--after 0 replays the retained
			// ones) may be about a job that has finished since: nothing to restart. A job that
			// cannot be read is restarted anyway: its worker will say why.
			restart, what := true, "restarting its worker"
			if j, err := s.Client.GetJob(ctx, st.JobID); client.IsNotFound(err) {
				restart, what = false, "the job is gone: nothing to restart"
			} else if err == nil && j.Status != "running" {
				restart, what = false, "the job is "+j.Status+" now: nothing to restart"
			}
			if s.Log != nil {
				fmt.Fprintf(s.Log, "event %d: job %s stalled (%s at step %q, owner %s, token %d, for %s): %s\n",
					e.Seq, st.JobID, st.Reason, st.StepID, st.Owner, st.FencingToken, st.StalledFor, what)
			}
			if restart {
				s.Restart(ctx, st.JobID)
			}
			return nil
		})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Processes runs workers as child processes, at most one per job: Command with the job id
// appended.
type Processes struct {
	Command        []string
	Stdout, Stderr io.Writer // the workers' output
	Log            io.Writer // one line per start, kill and exit
	// StopGrace is how long a worker has to exit after SIGTERM when ctx ends (default 5s).
	StopGrace time.Duration

	mu      sync.Mutex
	running map[string]*exec.Cmd // by job
	wg      sync.WaitGroup
}

// Start starts a worker process for job. If the one it started earlier still runs, it is
// killed first: a job stalls only when its worker neither heartbeats nor makes progress, so
// that process is stuck, and a second worker would only wait for its lease. When ctx ends,
// every worker gets SIGTERM, then SIGKILL after StopGrace.
func (p *Processes) Start(ctx context.Context, job string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.running[job]; old != nil {
		p.logf("job %s: worker pid %d still runs: killing it", job, old.Process.Pid)
		_ = old.Process.Kill() // its Wait, in its goroutine, reports the exit
	}
	cmd := exec.CommandContext(ctx, p.Command[0], append(slices.Clone(p.Command[1:]), job)...)
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = cmp.Or(p.StopGrace, 5*time.Second)
	if err := cmd.Start(); err != nil {
		p.logf("job %s: starting its worker: %v", job, err)
		return err
	}
	if p.running == nil {
		p.running = map[string]*exec.Cmd{}
	}
	p.running[job] = cmd
	pid := cmd.Process.Pid
	p.logf("job %s: started worker pid %d", job, pid)
	p.wg.Go(func() {
		err := cmd.Wait()
		p.mu.Lock()
		if p.running[job] == cmd {
			delete(p.running, job)
		}
		p.mu.Unlock()
		if err != nil {
			p.logf("job %s: worker pid %d exited: %v", job, pid, err)
		} else {
			p.logf("job %s: worker pid %d exited: ok", job, pid)
		}
	})
	return nil
}

// Restart is Start for Supervisor.Restart (a failure to start is logged).
func (p *Processes) Restart(ctx context.Context, job string) { _ = p.Start(ctx, job) }

// Wait waits for every worker started to exit.
func (p *Processes) Wait() { p.wg.Wait() }

func (p *Processes) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format+"\n", args...)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisor:", err)
		if errors.As(err, new(usageError)) || errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run is the command: `worker ...` runs the demo worker, anything else supervises.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "worker" {
		return runWorker(ctx, args[1:], getenv, stdout, stderr, workerHooks{})
	}
	fs := flag.NewFlagSet("supervisor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	after := fs.Int64("after", 0, "resume after this event seq")
	var jobs []string
	fs.Func("job", "start a worker for this job at once (repeatable)", func(j string) error {
		jobs = append(jobs, j)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmdline := fs.Args()
	if len(cmdline) == 0 {
		return usageError("usage: supervisor [--after SEQ] [--job JOB]... -- WORKER-COMMAND [ARGS...]  (the job id is appended)")
	}
	c := client.New(cmp.Or(getenv("STRATA_URL"), "http://localhost:8080"), getenv("STRATA_API_KEY"))
	procs := &Processes{Command: cmdline, Stdout: stdout, Stderr: stderr, Log: stdout}
	for _, j := range jobs {
		if err := procs.Start(ctx, j); err != nil {
			procs.Wait()
			return err
		}
	}
	s := &Supervisor{Client: c, After: *after, Log: stdout, Restart: procs.Restart}
	err := s.Run(ctx)
	procs.Wait()
	return err
}
