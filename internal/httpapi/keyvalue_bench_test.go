package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkKVCachedGet compares a cached, resolved GET /v1/kv/{ns}/{key} (four scope
// levels consulted, answered by the user level) through the whole HTTP stack with a bare
// go-redis GET of a value of the same size, in the same run. Metrics: http-ns/op,
// redis-ns/op and their ratio; serial (one client) and parallel (16 clients). "agentkey"
// authenticates with an org API key, which costs a Postgres lookup per request in the
// foundation's authenticate middleware; "rootkey" uses STRATA_ADMIN_KEY, checked in memory,
// so it shows the key-value path alone.
func BenchmarkKVCachedGet(b *testing.B) {
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0")) // the per-key rate limit would cap the benchmark
	for _, k := range []struct{ name, key string }{{"agentkey", s.NewKey("default", "agent")}, {"rootkey", s.AdminKey}} {
		b.Run(k.name, func(b *testing.B) { benchCachedGet(b, s, k.key) })
	}
}

func benchCachedGet(b *testing.B, s *apptest.Server, key string) {
	value := map[string]any{"palette": []string{"#112233", "#445566", "#778899"}, "font": "Inter", "caption_style": "lower-third"}
	for _, body := range []map[string]any{{"value": value}, {"value": value, "user_id": "u1"}} {
		if r := s.Do("PUT", "/v1/kv/brand/profile", key, body); r.Status != 201 && r.Status != 200 {
			b.Fatalf("put: %d %s", r.Status, r.Body)
		}
	}
	url := s.URL + "/v1/kv/brand/profile?user_id=u1&agent_id=a1&session_id=s1"
	r := s.Do("GET", "/v1/kv/brand/profile?user_id=u1&agent_id=a1&session_id=s1", key, nil)
	if r.Status != 200 {
		b.Fatalf("get: %d %s", r.Status, r.Body)
	}
	rdb, prefix := testenv.Redis(b)
	ctx := context.Background()
	if err := rdb.Set(ctx, prefix+"floor", string(r.Body), 0).Err(); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	httpGet := func() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	redisGet := func() {
		if err := rdb.Get(ctx, prefix+"floor").Err(); err != nil {
			b.Fatal(err)
		}
	}
	report := func(b *testing.B, httpD, redisD time.Duration) {
		h := float64(httpD.Nanoseconds()) / float64(b.N)
		f := float64(redisD.Nanoseconds()) / float64(b.N)
		b.ReportMetric(h, "http-ns/op")
		b.ReportMetric(f, "redis-ns/op")
		b.ReportMetric(h/f, "ratio")
	}
	b.Run("serial", func(b *testing.B) {
		for i := 0; i < 200; i++ {
			httpGet()
			redisGet()
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			httpGet()
		}
		httpD := time.Since(start)
		start = time.Now()
		for i := 0; i < b.N; i++ {
			redisGet()
		}
		report(b, httpD, time.Since(start))
	})
	b.Run("parallel16", func(b *testing.B) {
		run := func(f func()) time.Duration {
			var next atomic.Int64
			done := make(chan struct{})
			start := time.Now()
			for g := 0; g < 16; g++ {
				go func() {
					defer func() { done <- struct{}{} }()
					for next.Add(1) <= int64(b.N) {
						f()
					}
				}()
			}
			for g := 0; g < 16; g++ {
				<-done
			}
			return time.Since(start)
		}
		b.ResetTimer()
		report(b, run(httpGet), run(redisGet))
	})
}
