// Command supervisor is an example of acting on Strata's events (docs/events.md): it follows
// the org's job.stalled events on GET /v1/events/stream and restarts the worker of each
// stalled job. The restarted worker resumes the job where it stopped — steps already
// completed answer their stored result instead of running again (the durable-step protocol,
// docs/jobs.md) — so every side effect happens once however often workers die.
//
//	STRATA_URL=http://localhost:8080 STRATA_API_KEY=sk_... supervisor -- ./my-worker
//
// runs `./my-worker <job>` for every job that stalls. The stream resumes after the last event
// seen when the connection drops, and a new supervisor picks up where it is told
// (--after), since the stream is read from the server's outbox.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

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

// Run follows job.stalled until ctx ends.
func (s *Supervisor) Run(ctx context.Context) error {
	err := s.Client.StreamEvents(ctx, client.StreamOptions{Types: []string{"job.stalled"}, After: s.After},
		func(e client.StreamEvent) error {
			var st Stall
			if err := json.Unmarshal(e.Data, &st); err != nil {
				return fmt.Errorf("event %d: %w", e.Seq, err)
			}
			if s.Log != nil {
				fmt.Fprintf(s.Log, "event %d: job %s stalled (%s at step %q, owner %s, token %d, for %s): restarting its worker\n",
					e.Seq, st.JobID, st.Reason, st.StepID, st.Owner, st.FencingToken, st.StalledFor)
			}
			s.Restart(ctx, st.JobID)
			return nil
		})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func main() {
	after := flag.Int64("after", 0, "resume after this event seq")
	flag.Parse()
	cmdline := flag.Args()
	if len(cmdline) == 0 {
		fmt.Fprintln(os.Stderr, "usage: supervisor [--after SEQ] -- WORKER-COMMAND [ARGS...]  (the job id is appended)")
		os.Exit(2)
	}
	url := os.Getenv("STRATA_URL")
	if url == "" {
		url = "http://localhost:8080"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	s := &Supervisor{Client: client.New(url, os.Getenv("STRATA_API_KEY")), After: *after, Log: os.Stdout,
		Restart: func(ctx context.Context, job string) {
			wg.Go(func() {
				cmd := exec.CommandContext(ctx, cmdline[0], append(cmdline[1:], job)...)
				cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
				if err := cmd.Run(); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "worker for job %s: %v\n", job, err)
				}
			})
		}}
	err := s.Run(ctx)
	wg.Wait()
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisor:", err)
		os.Exit(1)
	}
}
