package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/strata-mem/strata/internal/apptest"
)

// BenchmarkContextTracing measures POST /v1/context (the hot path of an agent's turn) on two
// servers of the same run, one untraced and one tracing at the default sampler
// (parentbased_always_on: every request recorded and exported over OTLP/HTTP), interleaving
// their calls so that a load change on a shared machine hits both alike. It reports each
// side's mean latency and the median (and range) of the per-round ratios on/off; issue 44
// asks at most 1.05.
func BenchmarkContextTracing(b *testing.B) {
	// A collector that discards: the exporter's cost is the server's, the decoding is not.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(sink.Close)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	// Each server's goroutines carry a pprof label (side=off|on), so that a CPU profile of
	// the run splits by side: go tool pprof -tagfocus side=on ...
	start := func(side string, opts ...apptest.Option) (s *apptest.Server) {
		pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) { s = apptest.Start(b, opts...) })
		return s
	}
	off := start("off", apptest.Env("STRATA_LOG_LEVEL", "warn"))
	on := start("on", apptest.Env("STRATA_LOG_LEVEL", "warn"), apptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL))

	type side struct {
		s    *apptest.Server
		key  string
		body []byte
		took time.Duration
	}
	sides := []*side{{s: off}, {s: on}}
	for _, sd := range sides {
		sd.key = sd.s.NewKey("bench", "agent")
		for i := range 20 {
			must(b, sd.s.Do("POST", "/v1/memories", sd.key, map[string]any{"text": fmt.Sprintf("preference %d about colour grading and captions", i), "user_id": "u1"}), 201, 200)
		}
		must(b, sd.s.Do("PUT", "/v1/sessions/s1/state", sd.key, map[string]any{"state": map[string]any{"brief": "spring promo"}, "user_id": "u1"}), 201)
		for i := range 10 {
			must(b, sd.s.Do("POST", "/v1/sessions/s1/messages", sd.key, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d", i)}), 201)
		}
		sd.body, _ = json.Marshal(map[string]any{"user_id": "u1", "session_id": "s1", "query": "captions colour"})
	}
	call := func(sd *side) {
		req, _ := http.NewRequest("POST", sd.s.URL+"/v1/context", bytes.NewReader(sd.body))
		req.Header.Set("Authorization", "Bearer "+sd.key)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := sd.s.Client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sd.took += time.Since(start)
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	for range 50 { // warm both (plans, pools, caches)
		call(sides[0])
		call(sides[1])
	}
	// Rounds of pairsPerRound calls to each side, alternating which side goes first, so that
	// a load change on a shared machine hits both alike; each round gives one ratio of the
	// sides' mean latencies, and the verdict is the median round (the range beside it).
	const pairsPerRound = 100
	var ratios []float64
	var offAll, onAll time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		sides[0].took, sides[1].took = 0, 0
		n := min(pairsPerRound, b.N-done)
		for i := range n {
			call(sides[(done+i)%2])
			call(sides[1-(done+i)%2])
		}
		done += n
		ratios = append(ratios, float64(sides[1].took)/float64(sides[0].took))
		offAll, onAll = offAll+sides[0].took, onAll+sides[1].took
	}
	b.StopTimer()
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		median = (ratios[len(ratios)/2-1] + median) / 2
	}
	b.ReportMetric(float64((offAll / time.Duration(b.N)).Microseconds()), "off-µs/call")
	b.ReportMetric(float64((onAll / time.Duration(b.N)).Microseconds()), "on-µs/call")
	b.ReportMetric(median, "on/off")
	b.ReportMetric(ratios[0], "on/off-min")
	b.ReportMetric(ratios[len(ratios)-1], "on/off-max")
	b.ReportMetric(float64(len(ratios)), "rounds")
}

func must(b testing.TB, r *apptest.Response, status ...int) {
	b.Helper()
	if !slices.Contains(status, r.Status) {
		b.Fatalf("status %d (want %v): %s", r.Status, status, r.Body)
	}
}
