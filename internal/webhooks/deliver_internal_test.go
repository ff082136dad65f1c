package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoffSchedule: the first retry waits Backoff, each next one twice the last, never
// more than an hour (docs/events.md: 5s, 10s, 20s … with the default).
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	w := &Deliverer{Backoff: 5 * time.Second}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 320 * time.Second, 640 * time.Second, 1280 * time.Second, 2560 * time.Second, time.Hour, time.Hour}
	for i, d := range want {
		require.Equal(t, d, w.backoff(i+1), "attempt %d", i+1)
	}
	require.Equal(t, time.Hour, w.backoff(100))
	require.Equal(t, time.Hour, w.backoff(1_000_000)) // no overflow: the doubling stops at the cap
	require.Equal(t, 5*time.Second, w.backoff(0))

	w = &Deliverer{Backoff: 50 * time.Millisecond}
	require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		[]time.Duration{w.backoff(1), w.backoff(2), w.backoff(3)})
	w = &Deliverer{Backoff: 2 * time.Hour} // a misconfigured first step is still capped
	require.Equal(t, time.Hour, w.backoff(1))
}

// TestPostTreatsARedirectAsAFailure: a 3xx answer is a failed attempt (retried, then dead),
// and its Location is never called.
func TestPostTreatsARedirectAsAFailure(t *testing.T) {
	t.Parallel()
	var hit atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Add(1) }))
	t.Cleanup(inner.Close)
	outer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(outer.Close)
	w := &Deliverer{Client: NewClient(2*time.Second, true), RequestTimeout: 2 * time.Second}
	code, _, err := w.post(context.Background(), target{url: outer.URL, secrets: []string{NewSecret()}}, "msg_1", []byte(`{}`))
	require.Error(t, err)
	require.Equal(t, http.StatusTemporaryRedirect, code)
	require.Zero(t, hit.Load())
}
