package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkHTTPTargets measures the HTTP targets against their floors in the same
// run, interleaved in chunks so that load from elsewhere on the machine hits both alike:
//
//   - state-get/c=N: GET /v1/sessions/{s}/state through the real server (agent key,
//     auth, rate limiter, huma, the working store's Redis script) against the HTTP floor, a
//     minimal chi handler that does one go-redis GET of the same document and writes it
//     (same client, same loopback, same Redis). Target: ≥ 0.6 × the floor's throughput.
//   - event-append/c=N: POST /v1/jobs/{job}/events (one event, one job per client) through
//     the real server (the request transaction, the append, the audit row, COMMIT) against
//     a bare pgx single-row autocommit INSERT of the same row shape into a table with the
//     same columns and indexes (no counter row, no RLS). Target at c=32: ≥ 0.5 × the floor.
//     Both the HTTP client and the server run in this process, on the same cores as
//     Postgres: the floor has neither.
//   - context: POST /v1/context latency at one client (target p99 < 25 ms), skipped when
//     the endpoint is not on this build.
//
// Metrics: strata-ops/s, floor-ops/s, speed (strata ÷ floor throughput), and the
// strata side's p50/p99 in ms.
//
//	go test -run '^$' -bench BenchmarkHTTPTargets -benchtime 4000x ./internal/httpapi/
func BenchmarkHTTPTargets(b *testing.B) {
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.Env("STRATA_DB_MAX_CONNS", "40"))
	agent := s.NewKey("bench", "agent")
	ctx := context.Background()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	rdb := redis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}

	// The HTTP floor: chi, one Redis GET, the bytes written as JSON.
	floorRouter := chi.NewRouter()
	floorRouter.Get("/v1/sessions/{session}/state", func(w http.ResponseWriter, r *http.Request) {
		v, err := rdb.Get(r.Context(), s.Prefix+"floor:"+chi.URLParam(r, "session")).Bytes()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(v)
	})
	// A second HTTP floor, for writes: chi, the body read, one bare pgx INSERT of the event
	// row (the pool is set below, before any request).
	var owner *pgxpool.Pool
	var httpFloorSeq atomic.Int64
	floorRouter.Post("/v1/jobs/{job}/events", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, err := owner.Exec(r.Context(), `INSERT INTO events_floor (org_id, job_id, seq, op, params, fingerprint, agent_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, "bench", chi.URLParam(r, "job"), httpFloorSeq.Add(1),
			"video.crop", `{"x":10,"y":20,"w":1280,"h":720,"label":"crop"}`, bytes.Repeat([]byte{byte(len(body))}, 32), "agent")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"seq":1}`))
	})
	floorSrv := httptest.NewServer(floorRouter)
	b.Cleanup(floorSrv.Close)

	do := func(method, url, key string, body []byte) error {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, rd)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
		}
		return nil
	}

	doc := []byte(`{"state":{"job":"render-42","step":"colour","done":["cut","reframe"],"params":{"lut":"kodak","strength":0.7},"notes":"keep the second take"}}`)
	const maxC = 32
	for w := range maxC {
		if err := do("PUT", fmt.Sprintf("%s/v1/sessions/t-%d/state", s.URL, w), agent, doc); err != nil {
			b.Fatal(err)
		}
		// The floor serves what the API answers for the same session.
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sessions/t-%d/state", s.URL, w), nil)
		req.Header.Set("Authorization", "Bearer "+agent)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := rdb.Set(ctx, fmt.Sprintf("%sfloor:t-%d", s.Prefix, w), answer, 0).Err(); err != nil {
			b.Fatal(err)
		}
	}

	owner, err = pgxpool.New(ctx, s.DBURL+"&pool_max_conns=40")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(owner.Close)
	if _, err := owner.Exec(ctx, `CREATE TABLE events_floor (LIKE episodic_events INCLUDING DEFAULTS);
		ALTER TABLE events_floor ADD PRIMARY KEY (org_id, job_id, seq);
		CREATE INDEX ON events_floor (org_id, job_id, fingerprint);
		CREATE UNIQUE INDEX ON events_floor (org_id, job_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
		CREATE UNIQUE INDEX ON events_floor (org_id, job_id, reverts_seq) WHERE reverts_seq IS NOT NULL;
		CREATE INDEX ON events_floor (org_id, user_id) WHERE user_id IS NOT NULL;`); err != nil {
		b.Fatal(err)
	}
	event := []byte(`{"op":"video.crop","params":{"x":10,"y":20,"w":1280,"h":720,"label":"crop"},"agent_id":"agent"}`)
	fp := bytes.Repeat([]byte{7}, 32)
	var floorSeq [maxC]atomic.Int64
	var run atomic.Int64

	// timed runs n calls of op over c workers and returns the elapsed time and latencies.
	timed := func(n, c int, op func(w int) error) (time.Duration, []time.Duration) {
		var next atomic.Int64
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		start := time.Now()
		for w := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					t0 := time.Now()
					if err := op(w); err != nil {
						b.Error(err)
						return
					}
					lat[i] = time.Since(t0)
				}
			}()
		}
		wg.Wait()
		return time.Since(start), lat
	}
	pair := func(name string, c int, floor, api func(w int) error) {
		b.Run(name, func(b *testing.B) {
			chunk := max(200, 10*c)
			timed(chunk, c, floor) // warm both (connections, plans, caches)
			timed(chunk, c, api)
			var floorT, apiT time.Duration
			var lats []time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				d, _ := timed(n, c, floor)
				floorT += d
				d, l := timed(n, c, api)
				apiT += d
				lats = append(lats, l...)
			}
			b.StopTimer()
			slices.Sort(lats)
			q := func(p float64) float64 {
				return float64(lats[min(len(lats)-1, int(float64(len(lats))*p))].Microseconds()) / 1000
			}
			b.ReportMetric(float64(b.N)/apiT.Seconds(), "strata-ops/s")
			b.ReportMetric(float64(b.N)/floorT.Seconds(), "floor-ops/s")
			b.ReportMetric(floorT.Seconds()/apiT.Seconds(), "speed")
			b.ReportMetric(q(0.5), "strata-p50-ms")
			b.ReportMetric(q(0.99), "strata-p99-ms")
		})
	}

	floorGet := func(w int) error {
		return do("GET", fmt.Sprintf("%s/v1/sessions/t-%d/state", floorSrv.URL, w), "", nil)
	}
	apiGet := func(w int) error {
		return do("GET", fmt.Sprintf("%s/v1/sessions/t-%d/state", s.URL, w), agent, nil)
	}
	for _, c := range []int{1, 16} {
		pair(fmt.Sprintf("state-get/c=%d", c), c, floorGet, apiGet)
	}

	// POST /v1/context's target (p99 < 25 ms) needs 100k memories: BenchmarkContext100k.

	for _, c := range []int{1, 32} {
		r := run.Add(1)
		floorInsert := func(w int) error {
			_, err := owner.Exec(ctx, `INSERT INTO events_floor (org_id, job_id, seq, op, params, fingerprint, agent_id)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, "bench", fmt.Sprintf("floor-%d-%d", r, w), floorSeq[w].Add(1),
				"video.crop", `{"x":10,"y":20,"w":1280,"h":720,"label":"crop"}`, fp, "agent")
			return err
		}
		apiAppend := func(w int) error {
			return do("POST", fmt.Sprintf("%s/v1/jobs/append-%d-%d/events", s.URL, r, w), agent, event)
		}
		pair(fmt.Sprintf("event-append/c=%d", c), c, floorInsert, apiAppend)
	}
	// Diagnostic: the same append against the HTTP write floor (HTTP + bare INSERT), which
	// separates what the HTTP transport costs on these cores from what Strata adds.
	r := run.Add(1)
	httpInsert := func(w int) error {
		return do("POST", fmt.Sprintf("%s/v1/jobs/floor-%d-%d/events", floorSrv.URL, r, w), "", event)
	}
	apiAppend := func(w int) error {
		return do("POST", fmt.Sprintf("%s/v1/jobs/append-%d-%d/events", s.URL, r, w), agent, event)
	}
	pair("event-append-vs-http-insert/c=32", 32, httpInsert, apiAppend)
}
