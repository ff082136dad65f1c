package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// benchReceiver answers 204 and records each event's delivery delay (arrival − created_at).
type benchReceiver struct {
	mu     sync.Mutex
	delays latencies
	ids    map[string]bool
	since  time.Time // only events created after it are timed
}

func (rc *benchReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var ev struct {
		ID        string
		CreatedAt time.Time `json:"created_at"`
	}
	_ = json.Unmarshal(b, &ev)
	rc.mu.Lock()
	if !rc.ids[ev.ID] && !ev.CreatedAt.Before(rc.since) {
		rc.ids[ev.ID] = true
		rc.delays = append(rc.delays, time.Since(ev.CreatedAt))
	}
	rc.mu.Unlock()
	w.WriteHeader(204)
}

func (rc *benchReceiver) count() int { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.delays) }

// BenchmarkEventEmission measures what events cost the write path: the same write (a
// handoff on a fresh job, which emits handoff.pending; the job's creation is not timed) on a server with events off (STRATA_EVENTS=false,
// the floor) and on one with events on and an active webhook subscription delivering to a
// real receiver, in the same run, alternating; it reports the ratio of their mean latency.
// Then event-to-delivery: 500 events/s (STRATA_BENCH_EVENT_RATE) for 4 s on the subscribed server, p50/p99 from
// commit to the receiver.
//
//	go test -run '^$' -bench BenchmarkEventEmission -benchtime 2000x ./internal/httpapi/
func BenchmarkEventEmission(b *testing.B) {
	off := apptest.Start(b, apptest.Env("STRATA_EVENTS", "false"))
	on := apptest.Start(b, apptest.Env("STRATA_WEBHOOK_ALLOW_PRIVATE", "true"))
	rc := &benchReceiver{ids: map[string]bool{}}
	hs := httptest.NewServer(rc)
	defer hs.Close()
	keyOff, keyOn := off.NewKey("bench", "agent"), on.NewKey("bench", "agent")
	r := on.Do("POST", "/v1/admin/webhooks", on.NewKey("bench", "admin"), map[string]any{"url": hs.URL, "event_types": []string{"*"}})
	require.Equal(b, 201, r.Status, string(r.Body))
	_ = r
	require.Equal(b, 201, r.Status, string(r.Body))
	var n atomic.Int64
	write := func(s *apptest.Server, key string) time.Duration {
		id := fmt.Sprint("h", n.Add(1))
		if r := s.Do("PUT", "/v1/jobs/"+id, key, map[string]any{"goal": "g"}); r.Status != 201 { // untimed
			b.Fatalf("job: %d %s", r.Status, r.Body)
		}
		t0 := time.Now()
		r := s.Do("POST", "/v1/jobs/"+id+"/handoffs", key, map[string]any{"id": id, "from": "a1", "to": "a2"})
		d := time.Since(t0)
		if r.Status != 201 {
			b.Fatalf("handoff: %d %s", r.Status, r.Body)
		}
		return d
	}
	for range 50 { // warm both
		write(off, keyOff)
		write(on, keyOn)
	}
	adminOn := on.NewKey("bench", "admin")
	subID := r.Map(b)["id"].(string)
	setActive := func(active bool, version int) {
		r := on.Do("PATCH", "/v1/admin/webhooks/"+subID, adminOn, map[string]any{"active": active}, "If-Match", fmt.Sprintf(`"%d"`, version))
		require.Equal(b, 200, r.Status, string(r.Body))
	}
	// Two phases, each alternating writes on both servers: the subscription inactive (the
	// cost of emitting alone), then active (emitting plus delivering on the same cores).
	phase := func(name string, iters int) {
		var lOff, lOn latencies
		var sumOff, sumOn time.Duration
		for i := range iters {
			if i%2 == 0 {
				d := write(off, keyOff)
				lOff, sumOff = append(lOff, d), sumOff+d
			} else {
				d := write(on, keyOn)
				lOn, sumOn = append(lOn, d), sumOn+d
			}
		}
		meanOff, meanOn := sumOff/time.Duration(len(lOff)), sumOn/time.Duration(len(lOn))
		b.ReportMetric(float64(meanOff.Microseconds()), name+"-mean-off-µs")
		b.ReportMetric(float64(meanOn.Microseconds()), name+"-mean-on-µs")
		b.ReportMetric(float64(lOn.pct(0.5))/float64(lOff.pct(0.5)), name+"-p50-on/off")
		b.ReportMetric(float64(meanOn)/float64(meanOff), name+"-on/off")
		// The ratio of the means of the middle 80 %: on a shared machine a few requests
		// preempted for tens of milliseconds move the means more than events do.
		b.ReportMetric(lOn.trimmedMean()/lOff.trimmedMean(), name+"-trim-on/off")
	}
	b.ResetTimer()
	setActive(false, 1)
	phase("emit", max(b.N/2, 2))
	setActive(true, 2)
	phase("deliver", max(b.N/2, 2))
	b.StopTimer()

	// Event to delivery at 500 events/s (each a job creation, untimed, and its handoff),
	// for 4 s, from 16 writers on a ticker.
	for last, quiet, until := rc.count(), 0, time.Now().Add(30*time.Second); quiet < 10 && time.Now().Before(until); {
		time.Sleep(50 * time.Millisecond) // let the phases' deliveries drain: 0.5 s without one
		if c := rc.count(); c == last {
			quiet++
		} else {
			last, quiet = c, 0
		}
	}
	rc.mu.Lock()
	rc.delays, rc.since = nil, time.Now()
	rc.mu.Unlock()
	rate, secs := 500, 4
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_EVENT_RATE")); err == nil && v > 0 {
		rate = v
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	work := make(chan struct{}, rate)
	var wg sync.WaitGroup
	var slow atomic.Int64
	for range 16 {
		wg.Go(func() {
			for range work {
				if write(on, keyOn) > 100*time.Millisecond {
					slow.Add(1)
				}
			}
		})
	}
	began := time.Now()
	sent := 0
	for time.Since(began) < time.Duration(secs)*time.Second {
		<-tick.C
		select {
		case work <- struct{}{}:
			sent++
		default: // writers saturated: the offered rate is not reached
		}
	}
	tick.Stop()
	close(work)
	wg.Wait()
	achieved := float64(sent) / time.Since(began).Seconds()
	deadline := time.Now().Add(30 * time.Second)
	for rc.count() < sent && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	rc.mu.Lock()
	d := slicesClone(rc.delays)
	rc.mu.Unlock()
	require.Equal(b, sent, len(d), "every event delivered")
	b.ReportMetric(achieved, "events/s")
	b.ReportMetric(float64(d.pct(0.5).Milliseconds()), "deliver-p50-ms")
	b.ReportMetric(float64(d.pct(0.99).Milliseconds()), "deliver-p99-ms")
}

func slicesClone(l latencies) latencies { return append(latencies(nil), l...) }

// trimmedMean is the mean of l's middle 80 % (the fastest and slowest 10 % left out).
func (l latencies) trimmedMean() float64 {
	s := slicesClone(l)
	slices.Sort(s)
	s = s[len(s)/10 : len(s)-len(s)/10]
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return float64(sum) / float64(max(len(s), 1))
}
