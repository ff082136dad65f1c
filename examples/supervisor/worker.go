package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/strata-mem/strata/client"
)

// workerSteps are the demo worker's steps, in order.
var workerSteps = []string{"cut", "colour", "caption", "export"}

// effectOp is the op under which the worker records each side effect in the job's log.
const effectOp = "effect.post"

// Effect is the body of the demo worker's side effect: what the outside receiver is asked to
// do, once per Key (client.Once's key, also sent as the Idempotency-Key header).
type Effect struct {
	Job  string `json:"job"`
	Step string `json:"step"`
	Key  string `json:"key"`
}

// workerHooks are points a test can stop the worker at; the command sets none.
type workerHooks struct {
	// afterEffect runs once step's side effect is done and recorded in the job's log by this
	// process, before the step completes.
	afterEffect func(step string)
}

// workerOwner is the step owner of the worker process pid: its own, as docs/jobs.md asks of
// every live process (host and pid; characters the owner pattern refuses become '-').
func workerOwner(pid int) string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r < 128 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '-'
	}, cmp.Or(host, "host"))
	return fmt.Sprintf("worker-%s:%d", host, pid)
}

// runWorker is `supervisor worker [--lease D] [--effect-url URL] JOB`: it runs JOB's steps in
// order with client.RunStep, each doing its side effect — a POST of an Effect to the effect
// URL — through client.Once, and completes the job. Started again after a crash it resumes:
// completed steps are skipped, a step whose lease it lost is taken over once the lease has
// run out, and a side effect already in the log is not repeated.
func runWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, hooks workerHooks) error {
	fs := flag.NewFlagSet("supervisor worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lease := fs.Duration("lease", 60*time.Second, "step lease: how soon a killed worker's step can be taken over")
	effectURL := fs.String("effect-url", getenv("EFFECT_URL"), "where each step's side effect is POSTed (default $EFFECT_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *effectURL == "" {
		return usageError("usage: supervisor worker [--lease D] [--effect-url URL] JOB")
	}
	job := fs.Arg(0)
	owner := workerOwner(os.Getpid())
	c := client.New(cmp.Or(getenv("STRATA_URL"), "http://localhost:8080"), getenv("STRATA_API_KEY"), client.WithOwner(owner))
	j, err := c.GetJob(ctx, job)
	if err != nil {
		return err
	}
	if j.Status != "running" {
		fmt.Fprintf(stdout, "worker %s: job %s is %s: nothing to do\n", owner, job, j.Status)
		return nil
	}
	httpc := &http.Client{Timeout: 30 * time.Second}
	for _, step := range workerSteps {
		for {
			_, err := client.RunStep(ctx, c, job, step, func(ctx context.Context) (string, error) {
				did := false
				out, err := client.Once(ctx, c, job, effectOp, map[string]string{"step": step},
					func(ctx context.Context, key string) (string, error) {
						did = true
						return postEffect(ctx, httpc, *effectURL, Effect{Job: job, Step: step, Key: key})
					})
				if err == nil && did && hooks.afterEffect != nil {
					hooks.afterEffect(step)
				}
				return out, err
			}, client.StepLease(*lease))
			var held *client.LeaseHeldError
			if errors.As(err, &held) {
				// A worker that died still holds the step until its lease runs out: wait, then
				// take it over.
				fmt.Fprintf(stdout, "worker %s: step %s held by %s until %s: waiting\n", owner, step, held.Holder, held.Until.Format(time.RFC3339Nano))
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Until(held.Until) + 100*time.Millisecond):
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("job %s, step %s: %w", job, step, err)
			}
			break
		}
	}
	if _, err := c.CompleteJob(ctx, job, "completed", map[string]any{"steps": len(workerSteps)}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker %s: job %s completed\n", owner, job)
	return nil
}

// postEffect performs one side effect: the receiver answers 2xx once it has done it (or had
// already done it under e.Key); its answer becomes the step's result.
func postEffect(ctx context.Context, h *http.Client, url string, e Effect) (string, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", e.Key)
	resp, err := h.Do(req)
	if err != nil {
		return "", fmt.Errorf("side effect of %s: %w", e.Step, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("side effect of %s: %w", e.Step, err)
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("side effect of %s: receiver answered %s", e.Step, resp.Status)
	}
	return strings.TrimSpace(string(answer)), nil
}
