package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// arrivals records when each handoff's event reached the receiver, by handoff id.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	dups int
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	raw, _ := io.ReadAll(r.Body)
	var ev struct {
		Data struct {
			HandoffID string `json:"handoff_id"`
		}
	}
	_ = json.Unmarshal(raw, &ev)
	a.mu.Lock()
	if _, seen := a.at[ev.Data.HandoffID]; seen {
		a.dups++
	} else {
		a.at[ev.Data.HandoffID] = now
	}
	a.mu.Unlock()
	w.WriteHeader(204)
}

func (a *arrivals) count(prefix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for id := range a.at {
		if strings.HasPrefix(id, prefix) {
			n++
		}
	}
	return n
}

// tally counts strings.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(k string) { t.mu.Lock(); t.n[k]++; t.mu.Unlock() }

func (t *tally) snapshot() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.n)
}

// BenchmarkEventDelivery measures event-to-delivery latency open loop: writes are sent on a
// fixed schedule (500/s for 60 s by default), each at its planned time whether or not the
// earlier ones have been answered, and each write is one request that emits exactly one
// event (POST /v1/jobs/{job}/handoffs, handoff.pending, each on a job of its own made
// beforehand, since a job holds one pending handoff at a time). A
// webhook subscription delivers to a local receiver, which timestamps each arrival; an
// event's latency is its arrival minus its write's planned send time (so a server or
// generator that falls behind shows in the figure instead of slowing the offered load). An
// event that never arrives counts as infinitely late. It reports the offered rate, the rate
// the generator sent at, the rate of acknowledged writes, the delivered count and p50 / p95
// / p99; the target is p99 < 1 s.
//
//	go test -run '^$' -bench BenchmarkEventDelivery -benchtime 1x -timeout 10m ./internal/httpapi/
//
// STRATA_BENCH_DELIVERY_RATE (events/s, default 500) and STRATA_BENCH_DELIVERY_SECONDS
// (default 60) change the offered load.
func BenchmarkEventDelivery(b *testing.B) {
	rate, secs := 500, 60
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_DELIVERY_RATE")); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_DELIVERY_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	s := apptest.Start(b, apptest.Env("STRATA_WEBHOOK_ALLOW_PRIVATE", "true"), apptest.Env("STRATA_DB_MAX_CONNS", "32"))
	rc := &arrivals{at: map[string]time.Time{}}
	hs := httptest.NewServer(rc)
	defer hs.Close()
	agent := s.NewKey("bench", "agent")
	r := s.Do("POST", "/v1/admin/webhooks", s.NewKey("bench", "admin"), map[string]any{"url": hs.URL, "event_types": []string{"handoff.pending"}})
	require.Equal(b, 201, r.Status, string(r.Body))
	n := rate * secs
	// One fresh job per write (a job holds one pending handoff at a time), made in bulk
	// beforehand as fixtures: w0… for the warm-up, m0… for the measured run.
	owner := testenv.OwnerConn(b, s.DBURL)
	for _, f := range []struct {
		prefix string
		n      int
	}{{"w", rate}, {"m", n}} {
		_, err := owner.Exec(context.Background(), `INSERT INTO jobs (org_id, job_id, goal, status, owner, metadata, checkpoint_version,
				progress_at, created_at, updated_at)
			SELECT 'bench', $1 || g, 'deliver', 'running', '', '{}', 0, now(), now(), now() FROM generate_series(0, $2 - 1) g`, f.prefix, f.n)
		require.NoError(b, err)
	}
	// The generator's client: as many connections as the schedule needs, no queueing in
	// the client (an open loop must not wait for a free connection either).
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}
	var errs, okCount atomic.Int64
	failures := &tally{n: map[string]int{}} // failed writes by status ("transport": no answer)
	var lastAnswer atomic.Int64             // unix nanos of the latest answer
	send := func(id string) {
		body := fmt.Sprintf(`{"id":%q,"from":"a1","to":"a2"}`, id)
		req, _ := http.NewRequest("POST", s.URL+"/v1/jobs/"+id+"/handoffs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agent)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			errs.Add(1)
			failures.add("transport")
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			errs.Add(1)
			failures.add(strconv.Itoa(resp.StatusCode))
			return
		}
		okCount.Add(1)
		for now, last := time.Now().UnixNano(), lastAnswer.Load(); now > last && !lastAnswer.CompareAndSwap(last, now); last = lastAnswer.Load() {
		}
	}
	// run offers n writes at rate, open loop; it returns each write's planned send time,
	// how late the generator itself was at its worst, and when it began and sent the last.
	run := func(prefix string, n int) (planned map[string]time.Time, worst time.Duration, began, last time.Time) {
		planned = make(map[string]time.Time, n)
		var wg sync.WaitGroup
		interval := time.Second / time.Duration(rate)
		began = time.Now().Add(50 * time.Millisecond)
		for i := range n {
			at := began.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 {
				time.Sleep(d) // kept: the open loop's schedule, each write at its planned time
			} else if -d > worst {
				worst = -d
			}
			id := fmt.Sprint(prefix, i)
			planned[id] = at
			wg.Go(func() { send(id) })
		}
		last = time.Now()
		wg.Wait()
		return planned, worst, began, last
	}
	wait := func(prefix string, n int, within time.Duration) {
		for deadline := time.Now().Add(within); rc.count(prefix) < n && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // kept: waits (bounded) for deliveries to the outside receiver
		}
	}
	// Warm-up: one second at the rate, delivered, then the measured run.
	run("w", rate)
	wait("w", int(okCount.Load()), 30*time.Second)
	errs.Store(0)
	okCount.Store(0)

	b.ResetTimer()
	planned, lag, began, lastSent := run("m", n)
	answered := time.Unix(0, lastAnswer.Load())
	wait("m", int(okCount.Load()), 30*time.Second)
	b.StopTimer()

	rc.mu.Lock()
	var lat latencies
	undelivered := 0
	var lastArrival time.Time
	for id, at := range planned {
		if got, ok := rc.at[id]; ok {
			lat = append(lat, got.Sub(at))
			if got.After(lastArrival) {
				lastArrival = got
			}
		} else {
			undelivered++
			lat = append(lat, time.Hour) // never arrived: infinitely late for the percentiles
		}
	}
	dups := rc.dups
	rc.mu.Unlock()
	b.ReportMetric(float64(rate), "offered-events/s")
	// Sent: the generator's own rate (n writes over its n-1 intervals), which falls short of
	// the offered one only if the generator itself could not keep the schedule.
	b.ReportMetric(float64(n-1)/max(lastSent.Sub(began).Seconds(), 1e-9), "sent-events/s")
	b.ReportMetric(float64(okCount.Load())/answered.Sub(began).Seconds(), "achieved-events/s")
	b.ReportMetric(100*float64(n-undelivered)/float64(n), "delivered-%")
	// The rate events reached the receiver, from the first write's planned time to the last
	// arrival: below the achieved rate, deliveries fell behind the writes.
	b.ReportMetric(float64(n-undelivered)/max(lastArrival.Sub(began).Seconds(), 1e-9), "delivered-events/s")
	b.ReportMetric(float64(errs.Load()), "write-errors")
	b.ReportMetric(float64(lag.Milliseconds()), "generator-lag-max-ms")
	b.ReportMetric(float64(lat.pct(0.50).Milliseconds()), "deliver-p50-ms")
	b.ReportMetric(float64(lat.pct(0.95).Milliseconds()), "deliver-p95-ms")
	b.ReportMetric(float64(lat.pct(0.99).Milliseconds()), "deliver-p99-ms")
	b.Logf("offered %d events/s for %d s: %d writes, %d acknowledged, %d errors %v, %d delivered (%d duplicate deliveries), generator at worst %s late",
		rate, secs, n, okCount.Load(), errs.Load(), failures.snapshot(), n-undelivered, dups, lag)
}
