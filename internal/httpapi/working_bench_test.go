package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkWorkingState compares state GET and PUT through the real server (HTTP, auth,
// unit of work, huma, the working store; PUT also writes through to Postgres and commits)
// with a bare go-redis GET/SET of the same document on the same Redis, in the same run.
// The vs-pg-commit variants use a one-row upsert transaction on the same Postgres as the
// floor instead: the write-through commit that a PUT pays for its zero loss window.
// Each sub-benchmark times b.N floor operations and b.N API calls, interleaved in chunks of
// 100, and reports floor-ns/op and x-floor (API time / floor time).
//
//	go test -run '^$' -bench BenchmarkWorkingState -benchtime 2000x ./internal/httpapi/
func BenchmarkWorkingState(b *testing.B) {
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0")) // the per-key rate limit would cap the benchmark
	agent := s.NewKey("bench", "agent")
	ctx := context.Background()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	rdb := redis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	doc := []byte(`{"state":{"job":"render-42","step":"colour","done":["cut","reframe"],"params":{"lut":"kodak","strength":0.7},"notes":"keep the second take"}}`)
	do := func(method, path, key string, body []byte) error {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, s.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
		}
		return nil
	}
	const workers = 16
	for w := 0; w < workers; w++ {
		if err := do("PUT", fmt.Sprintf("/v1/sessions/bench-%d/state", w), agent, doc); err != nil {
			b.Fatal(err)
		}
		if err := do("PUT", fmt.Sprintf("/v1/sessions/bench-%d/state", w), s.AdminKey, doc); err != nil {
			b.Fatal(err)
		}
		if err := rdb.Set(ctx, fmt.Sprintf("%sfloor:%d", s.Prefix, w), doc, 0).Err(); err != nil {
			b.Fatal(err)
		}
	}

	// run splits n operations over c goroutines; op gets the worker index.
	run := func(n, c int, op func(w int) error) {
		var wg sync.WaitGroup
		per := (n + c - 1) / c
		for w := 0; w < c; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per && w*per+i < n; i++ {
					if err := op(w); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// pair times b.N floor operations and b.N API calls, interleaved in chunks so that load
	// from elsewhere on the machine hits both alike; the benchmark's own ns/op is the API's.
	pair := func(name string, c int, floor, api func(w int) error) {
		b.Run(name, func(b *testing.B) {
			const chunk = 100
			var floorTime time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				b.StopTimer()
				start := time.Now()
				run(n, c, floor)
				floorTime += time.Since(start)
				b.StartTimer()
				run(n, c, api)
			}
			b.StopTimer()
			floorNS := float64(floorTime.Nanoseconds()) / float64(b.N)
			apiNS := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(floorNS, "floor-ns/op")
			b.ReportMetric(apiNS/floorNS, "x-floor")
		})
	}
	redisGet := func(w int) error { return rdb.Get(ctx, fmt.Sprintf("%sfloor:%d", s.Prefix, w)).Err() }
	redisSet := func(w int) error { return rdb.Set(ctx, fmt.Sprintf("%sfloor:%d", s.Prefix, w), doc, 0).Err() }
	apiGet := func(key string) func(int) error {
		return func(w int) error { return do("GET", fmt.Sprintf("/v1/sessions/bench-%d/state", w), key, nil) }
	}
	apiPut := func(w int) error { return do("PUT", fmt.Sprintf("/v1/sessions/bench-%d/state", w), agent, doc) }

	// Warm both paths (connections, script cache, plans) before timing anything.
	run(500, workers, redisGet)
	run(500, workers, apiGet(agent))
	run(200, workers, apiPut)

	pair("GET/c=1", 1, redisGet, apiGet(agent))
	pair("GET/c=16", workers, redisGet, apiGet(agent))
	pair("GET/c=1/root-key", 1, redisGet, apiGet(s.AdminKey))
	pair("GET/c=16/root-key", workers, redisGet, apiGet(s.AdminKey))
	pair("PUT/c=1", 1, redisSet, apiPut)
	pair("PUT/c=16", workers, redisSet, apiPut)

	// A second floor for PUT: the one synchronous Postgres commit it cannot avoid (one
	// upsert of the same size per transaction, on the same database).
	pool, err := pgxpool.New(ctx, s.DBURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_floor (id int PRIMARY KEY, doc jsonb, v bigint)`); err != nil {
		b.Fatal(err)
	}
	pgCommit := func(w int) error {
		_, err := pool.Exec(ctx, `INSERT INTO bench_floor VALUES ($1, $2, 1)
			ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, v = bench_floor.v + 1`, w, string(doc))
		return err
	}
	pair("PUT/c=1/vs-pg-commit", 1, pgCommit, apiPut)
	pair("PUT/c=16/vs-pg-commit", workers, pgCommit, apiPut)
}
