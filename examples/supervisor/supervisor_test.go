package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

var errKilled = errors.New("worker killed")

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
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)
