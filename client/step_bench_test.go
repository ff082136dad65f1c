package client_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

// BenchmarkStepHelperVsRaw compares one step run through client.RunStep with the same step
// written as raw calls (StartStep + CompleteStep), against one live server in one run. The
// step's work is nothing, so the difference is the helper's own cost. "interleaved" runs
// the two alternately in one loop (so load changes on the machine hit both alike) and
// reports each one's time per step and their ratio.
//
//	go test ./client/ -run '^$' -bench StepHelperVsRaw -benchtime 1000x
func BenchmarkStepHelperVsRaw(b *testing.B) {
	s := apptest.Start(b, apptest.NoAutoConsolidation())
	rt := &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
	c := client.New(s.URL, s.NewKey("acme", "agent"), client.WithOwner("bench"),
		client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: rt}))
	ctx := context.Background()
	const job = "bench"
	if _, _, err := c.PutJob(ctx, job, client.JobSpec{Goal: "benchmark", Owner: "bench"}, nil); err != nil {
		b.Fatal(err)
	}
	n := 0
	next := func(kind string) string { n++; return fmt.Sprintf("%s-%d", kind, n) }
	raw := func(step string) {
		cl, err := c.StartStep(ctx, job, step, "bench", 60, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.CompleteStep(ctx, job, step, cl.FencingToken, "ok"); err != nil {
			b.Fatal(err)
		}
	}
	work := func(context.Context) (string, error) { return "ok", nil }
	helper := func(step string) {
		if _, err := client.RunStep(ctx, c, job, step, work); err != nil {
			b.Fatal(err)
		}
	}
	// Warm the connection pool and the server's statement caches.
	for range 50 {
		raw(next("warm"))
		helper(next("warm"))
	}
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			raw(next("raw"))
		}
	})
	b.Run("helper", func(b *testing.B) {
		for b.Loop() {
			helper(next("helper"))
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		var tr, th time.Duration
		var rr, rh int64
		for b.Loop() {
			t0, r0 := time.Now(), rt.n.Load()
			raw(next("raw"))
			t1, r1 := time.Now(), rt.n.Load()
			helper(next("helper"))
			th += time.Since(t1)
			rh += rt.n.Load() - r1
			tr += t1.Sub(t0)
			rr += r1 - r0
		}
		b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "raw-ns/step")
		b.ReportMetric(float64(th.Nanoseconds())/float64(b.N), "helper-ns/step")
		b.ReportMetric(float64(th)/float64(tr), "helper/raw")
		b.ReportMetric(float64(rr)/float64(b.N), "raw-requests/step")
		b.ReportMetric(float64(rh)/float64(b.N), "helper-requests/step")
	})
}

// countingTransport counts the HTTP requests (round trips) the client sends.
type countingTransport struct {
	n  atomic.Int64
	rt http.RoundTripper
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.rt.RoundTrip(r)
}
