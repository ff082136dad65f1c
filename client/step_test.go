package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

// stepEnv is one server and an agent key of a fresh org.
type stepEnv struct {
	s     *apptest.Server
	key   string
	admin *client.Client // admin key of the same org
}

func setupSteps(t *testing.T) stepEnv {
	t.Helper()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	return stepEnv{s: s, key: s.NewKey("acme", "agent"), admin: client.New(s.URL, s.NewKey("acme", "admin"))}
}

func (e stepEnv) client(owner string, opts ...client.Option) *client.Client {
	return client.New(e.s.URL, e.key, append([]client.Option{client.WithOwner(owner),
		client.WithRetries(5, 5*time.Millisecond, 50*time.Millisecond)}, opts...)...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type cutResult struct {
	Output string `json:"output"`
	Frames int    `json:"frames"`
}

func TestRunStepCompletedStepIsNotRunAgain(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo", Owner: "bot"}, nil)
	require.NoError(t, err)

	calls := 0
	cut := func(ctx context.Context) (cutResult, error) {
		calls++
		run, ok := client.StepFromContext(ctx)
		require.True(t, ok)
		require.Equal(t, client.ClaimedStep{Job: "j", Step: "cut", Owner: "bot", FencingToken: 1, Attempt: 1}, run)
		return cutResult{Output: "cut.mp4", Frames: 240}, nil
	}
	in := client.StepInputOf(client.StepInput{Tool: "ffmpeg", Params: json.RawMessage(`{"from":0,"to":10}`)})
	got, err := client.RunStep(ctx, c, "j", "cut", cut, in)
	require.NoError(t, err)
	require.Equal(t, cutResult{Output: "cut.mp4", Frames: 240}, got)
	require.Equal(t, 1, calls)

	// Again (a restarted worker): the stored result, typed, and fn is not called.
	again, err := client.RunStep(ctx, e.client("bot"), "j", "cut", cut, in)
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, 1, calls, "a completed step is not run again")

	st, err := c.GetStep(ctx, "j", "cut")
	require.NoError(t, err)
	require.Equal(t, "completed", st.Status)
	require.EqualValues(t, 1, st.FencingToken)
	require.JSONEq(t, `{"output":"cut.mp4","frames":240}`, string(st.Result))
	require.JSONEq(t, `{"tool":"ffmpeg","params":{"from":0,"to":10}}`, string(st.Input), "the input is recorded at claim time")

	// A result that does not fit the caller's type is an error, not a silent zero value.
	_, err = client.RunStep(ctx, c, "j", "cut", func(context.Context) (int, error) { return 0, nil })
	require.ErrorContains(t, err, "does not decode into int")

	// No owner anywhere: refused before any call.
	_, err = client.RunStep(ctx, client.New(e.s.URL, e.key), "j", "x", cut)
	require.ErrorContains(t, err, "no owner")
}

func TestRunStepRetryableFailureThenRetrySucceeds(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)

	boom := errors.New("encoder crashed")
	_, err = client.RunStep(ctx, c, "j", "grade", func(context.Context) (string, error) { return "", boom })
	var fe *client.StepFailedError
	require.ErrorAs(t, err, &fe)
	require.ErrorIs(t, err, boom)
	require.Equal(t, client.DispositionRetryable, fe.Disposition)
	st, err := c.GetStep(ctx, "j", "grade")
	require.NoError(t, err)
	require.Equal(t, "failed", st.Status)
	require.Equal(t, "retryable", st.Disposition)
	require.Equal(t, "encoder crashed", st.Error)

	var token int64
	got, err := client.RunStep(ctx, c, "j", "grade", func(ctx context.Context) (string, error) {
		run, _ := client.StepFromContext(ctx)
		token = run.FencingToken
		require.Equal(t, 2, run.Attempt)
		return "graded.mp4", nil
	})
	require.NoError(t, err)
	require.Equal(t, "graded.mp4", got)
	require.EqualValues(t, 2, token, "the retry is a new claim with a greater token")
	st, err = c.GetStep(ctx, "j", "grade")
	require.NoError(t, err)
	require.Equal(t, "completed", st.Status)
	require.Equal(t, 2, st.Attempts)
}

func TestRunStepManualReview(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo", Owner: "bot"}, nil)
	require.NoError(t, err)

	_, err = client.RunStep(ctx, c, "j", "publish", func(context.Context) (string, error) {
		return "", client.ManualReview(errors.New("the platform rejected the caption: policy"))
	})
	var fe *client.StepFailedError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, client.DispositionManualReview, fe.Disposition)
	require.ErrorContains(t, err, "an operator must clear it")
	st, err := c.GetStep(ctx, "j", "publish")
	require.NoError(t, err)
	require.Equal(t, "manual_review", st.Disposition)

	ran := false
	publish := func(context.Context) (string, error) { ran = true; return "posted", nil }
	_, err = client.RunStep(ctx, c, "j", "publish", publish)
	require.True(t, client.IsConflict(err), "waits for review: %v", err)
	require.ErrorContains(t, err, "manual review")
	require.False(t, ran)

	_, err = e.admin.ClearStep(ctx, "j", "publish")
	require.NoError(t, err)
	got, err := client.RunStep(ctx, c, "j", "publish", publish)
	require.NoError(t, err)
	require.Equal(t, "posted", got)
	require.True(t, ran)
}

func TestRunStepLeaseHeldByAnother(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	a := e.client("agent-a")
	_, _, err := a.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)
	cl, err := a.StartStep(ctx, "j", "cut", "agent-a", 30, nil)
	require.NoError(t, err)

	ran := false
	_, err = client.RunStep(ctx, e.client("agent-b"), "j", "cut", func(context.Context) (int, error) { ran = true; return 1, nil })
	var held *client.LeaseHeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "agent-a", held.Holder)
	require.WithinDuration(t, *cl.LeaseExpiresAt, held.Until, time.Millisecond)
	require.True(t, client.IsConflict(err))
	require.False(t, ran)
}

// TestRunStepHandoffFencesTheRunningFn: the lease moves to another agent (a handoff ack)
// while fn runs; the next heartbeat is refused, fn's context is cancelled with the cause, and
// fn's late result is refused under the stale token.
func TestRunStepHandoffFencesTheRunningFn(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	a := e.client("agent-a")
	_, _, err := a.PutJob(ctx, "j", client.JobSpec{Goal: "promo", Owner: "agent-a"}, nil)
	require.NoError(t, err)

	started := make(chan struct{})
	var cause error
	done := make(chan error, 1)
	go func() {
		_, err := client.RunStep(ctx, a, "j", "render", func(ctx context.Context) (string, error) {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return "late render", nil // ignores the cancellation: the server must refuse it
		}, client.StepLease(30*time.Second), client.StepHeartbeat(100*time.Millisecond))
		done <- err
	}()
	<-started
	_, err = a.CreateHandoff(ctx, "j", "h1", "agent-a", "agent-b", nil)
	require.NoError(t, err)
	_, err = e.client("agent-b").AckHandoff(ctx, "j", "h1", "agent-b")
	require.NoError(t, err)

	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("fn's context was not cancelled after the lease moved")
	}
	require.ErrorIs(t, err, client.ErrLeaseLost)
	require.ErrorContains(t, err, "completion refused")
	require.ErrorIs(t, cause, client.ErrLeaseLost)
	require.ErrorContains(t, cause, "heartbeat was refused")
	st, err := a.GetStep(ctx, "j", "render")
	require.NoError(t, err)
	require.Equal(t, "running", st.Status, "the stale completion wrote nothing")
	require.Equal(t, "agent-b", st.Owner)
	require.EqualValues(t, 2, st.FencingToken)
}

// TestRunStepLeaseExpiryCancelsFnAndTakeoverFencesIt: heartbeats cannot reach the server
// (a proxy answers them 503), so the 1 s lease runs out: fn's context is cancelled; another
// agent takes the step over; fn's result is then refused under the stale token.
func TestRunStepLeaseExpiryCancelsFnAndTakeoverFencesIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	target, _ := url.Parse(e.s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var heartbeats atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			heartbeats.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	a := client.New(front.URL, e.key, client.WithOwner("agent-a"), client.WithRetries(2, 5*time.Millisecond, 20*time.Millisecond))
	b := e.client("agent-b")
	_, _, err := b.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)

	cancelled := make(chan error, 1)
	takenOver := make(chan struct{})
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		_, err := client.RunStep(ctx, a, "j", "render", func(ctx context.Context) (string, error) {
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			<-takenOver
			return "late render", nil
		}, client.StepLease(time.Second))
		done <- err
	}()
	var cause error
	select {
	case cause = <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("fn's context was not cancelled when the lease ran out")
	}
	require.ErrorIs(t, cause, client.ErrLeaseLost)
	require.ErrorContains(t, cause, "lease ran out")
	require.GreaterOrEqual(t, time.Since(begin), 900*time.Millisecond)
	require.Positive(t, heartbeats.Load(), "heartbeats were tried")

	// agent-b takes the expired lease over (new token) once the server sees it expired.
	var cl client.Claim
	require.Eventually(t, func() bool {
		cl, err = b.StartStep(ctx, "j", "render", "agent-b", 0, nil)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "takeover: %v", err)
	require.EqualValues(t, 2, cl.FencingToken)
	close(takenOver)

	err = <-done
	require.ErrorIs(t, err, client.ErrLeaseLost)
	require.ErrorContains(t, err, "completion refused")
	_, err = b.CompleteStep(ctx, "j", "render", cl.FencingToken, "b's render")
	require.NoError(t, err)
	st, err := b.GetStep(ctx, "j", "render")
	require.NoError(t, err)
	require.JSONEq(t, `"b's render"`, string(st.Result), "only the current claim's result is stored")
}

// flakyFront is a proxy in front of the server that fails the first attempts of chosen
// writes and records every attempt's Idempotency-Key.
type flakyFront struct {
	mu        sync.Mutex
	attempts  map[string][]string // path suffix → Idempotency-Keys of its attempts
	forwarded map[string]int
	replayed  map[string]int
}

func (f *flakyFront) record(kind, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[kind] = append(f.attempts[kind], key)
	return len(f.attempts[kind])
}

// TestRunStepRetriesThroughAnOutage: the start meets a dropped connection and a 429; the
// completion meets three 503s (more than the client's retry budget, which RunStep outlasts
// for done work) and then a 503 that hides a committed write. Each call keeps its one
// Idempotency-Key through every retry, and the server applies the completion once (the retry
// after the lost answer is a replay).
func TestRunStepRetriesThroughAnOutage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	target, _ := url.Parse(e.s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	f := &flakyFront{attempts: map[string][]string{}, forwarded: map[string]int{}, replayed: map[string]int{}}
	forward := func(w http.ResponseWriter, r *http.Request, kind string) {
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		f.mu.Lock()
		f.forwarded[kind]++
		if rec.Header().Get("Idempotent-Replayed") == "true" {
			f.replayed[kind]++
		}
		f.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		key := r.Header.Get("Idempotency-Key")
		switch {
		case kind == "start":
			switch f.record(kind, key) {
			case 1: // the connection drops before an answer
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}
				return
			case 2:
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		case kind == "complete":
			switch f.record(kind, key) {
			case 1, 2, 3: // down for longer than the client's own retry budget (3 attempts)
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			case 4: // the server commits, the answer is lost
				rec := httptest.NewRecorder()
				proxy.ServeHTTP(rec, r)
				f.mu.Lock()
				f.forwarded[kind]++
				f.mu.Unlock()
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		forward(w, r, kind)
	}))
	t.Cleanup(front.Close)
	c := client.New(front.URL, e.key, client.WithOwner("bot"), client.WithRetries(2, 5*time.Millisecond, 20*time.Millisecond))
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo", Owner: "bot"}, nil)
	require.NoError(t, err)

	calls := 0
	got, err := client.RunStep(ctx, c, "j", "cut", func(context.Context) (string, error) { calls++; return "cut.mp4", nil })
	require.NoError(t, err)
	require.Equal(t, "cut.mp4", got)
	require.Equal(t, 1, calls)

	f.mu.Lock()
	defer f.mu.Unlock()
	for kind, n := range map[string]int{"start": 3, "complete": 5} {
		keys := f.attempts[kind]
		require.Len(t, keys, n, kind)
		require.NotEmpty(t, keys[0])
		for _, k := range keys {
			require.Equal(t, keys[0], k, "%s: every retry carries the first attempt's Idempotency-Key", kind)
		}
	}
	require.Equal(t, 1, f.forwarded["start"])
	require.Equal(t, 2, f.forwarded["complete"], "the completion reached the server twice...")
	require.Equal(t, 1, f.replayed["complete"], "...and the second was answered from the idempotency record")
	st, err := e.client("bot").GetStep(ctx, "j", "cut")
	require.NoError(t, err)
	require.Equal(t, "completed", st.Status)
	require.Equal(t, 1, st.Attempts)
}

func TestOnceAppliesOnceAndReplaysTheResult(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)

	params := map[string]any{"channel": "tiktok", "aspect": "9:16"}
	var keys []string
	reframe := func(_ context.Context, key string) (cutResult, error) {
		keys = append(keys, key)
		return cutResult{Output: "tiktok.mp4", Frames: len(keys)}, nil
	}
	var ev client.Event
	got, err := client.Once(ctx, c, "j", "video.reframe", params, reframe, client.OnceEvent(&ev))
	require.NoError(t, err)
	require.Equal(t, cutResult{Output: "tiktok.mp4", Frames: 1}, got)
	require.Len(t, keys, 1)
	require.Equal(t, "j/"+ev.Fingerprint, keys[0], "the key is the job and the op's fingerprint")
	require.Equal(t, "bot", ev.AgentID)
	require.Equal(t, "video.reframe", ev.Op)

	// Same op and params (keys in another order): the recorded result, fn not called.
	var ev2 client.Event
	again, err := client.Once(ctx, c, "j", "video.reframe", map[string]any{"aspect": "9:16", "channel": "tiktok"}, reframe, client.OnceEvent(&ev2))
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Len(t, keys, 1)
	require.Equal(t, ev.Seq, ev2.Seq)

	// Other params: another op instance.
	_, err = client.Once(ctx, c, "j", "video.reframe", map[string]any{"channel": "reels", "aspect": "4:5"}, reframe)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.NotEqual(t, keys[0], keys[1])

	// fn's error: nothing recorded, the next Once tries again with the same key.
	_, err = client.Once(ctx, c, "j", "video.caption", nil, func(context.Context, string) (string, error) { return "", errors.New("no subtitles") })
	require.ErrorContains(t, err, "no subtitles")
	ap, err := c.WasApplied(ctx, "j", "video.caption", nil)
	require.NoError(t, err)
	require.False(t, ap.Applied)

	// A reverted op is applied again, under the same key.
	_, err = c.RevertEvent(ctx, "j", ev.Seq, "wrong crop", client.Scope{})
	require.NoError(t, err)
	_, err = client.Once(ctx, c, "j", "video.reframe", params, reframe)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Equal(t, keys[0], keys[2])
}

// TestRunStepWithOnceAfterACrashBeforeCompletion: the first attempt applies the side effect
// and records it, then dies before the step completes (here: returns an error, which leaves
// the step retryable); the retry finds the event and completes without a second side effect.
func TestRunStepWithOnceAfterACrashBeforeCompletion(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo", Owner: "bot"}, nil)
	require.NoError(t, err)

	effects := map[string]int{}
	crash := true
	step := func(ctx context.Context) (string, error) {
		out, err := client.Once(ctx, c, "j", "video.export", map[string]any{"format": "mp4"}, func(_ context.Context, key string) (string, error) {
			effects[key]++
			return "export.mp4", nil
		})
		if err != nil {
			return "", err
		}
		if crash {
			crash = false
			return "", errors.New("worker died after the export was logged")
		}
		return out, nil
	}
	_, err = client.RunStep(ctx, c, "j", "export", step)
	require.Error(t, err)
	got, err := client.RunStep(ctx, c, "j", "export", step)
	require.NoError(t, err)
	require.Equal(t, "export.mp4", got)
	require.Len(t, effects, 1)
	for _, n := range effects {
		require.Equal(t, 1, n, "the side effect happened once")
	}
	page, err := c.ListEvents(ctx, "j", client.EventFilter{Op: "video.export"}, 10)
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
}

// TestRunStepHeartbeatsKeepALongStepAlive: fn runs for 2.5 leases; the background
// heartbeats keep the lease live, so another agent cannot take the step over meanwhile.
func TestRunStepHeartbeatsKeepALongStepAlive(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	a := e.client("agent-a")
	_, _, err := a.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := client.RunStep(ctx, a, "j", "render", func(ctx context.Context) (string, error) {
			select {
			case <-time.After(2500 * time.Millisecond):
				return "rendered", nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}, client.StepLease(time.Second))
		done <- err
	}()
	b := e.client("agent-b")
	time.Sleep(1500 * time.Millisecond) // kept: real lease expiry in the server process (the renewal is what is tested)
	_, err = client.RunStep(ctx, b, "j", "render", func(context.Context) (string, error) { return "b", nil })
	var held *client.LeaseHeldError
	require.ErrorAs(t, err, &held, "the lease was renewed")
	require.Equal(t, "agent-a", held.Holder)
	require.NoError(t, <-done)
	st, err := a.GetStep(ctx, "j", "render")
	require.NoError(t, err)
	require.Equal(t, "completed", st.Status)
	require.EqualValues(t, 1, st.FencingToken)
	require.True(t, st.HeartbeatAt.After(st.StartedAt))
}

// TestRunStepEdgeCases: a huge error with a NUL is recorded (cut to the server's limit); a
// panicking fn stops the heartbeats, so its lease expires and the step can be taken over.
func TestRunStepEdgeCases(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := setupSteps(t)
	c := e.client("bot")
	_, _, err := c.PutJob(ctx, "j", client.JobSpec{Goal: "promo"}, nil)
	require.NoError(t, err)

	huge := errors.New("bad\x00frame: " + strings.Repeat("é", 12000))
	_, err = client.RunStep(ctx, c, "j", "huge", func(context.Context) (int, error) { return 0, huge })
	var fe *client.StepFailedError
	require.ErrorAs(t, err, &fe, "the failure was recorded: %v", err)
	st, err := c.GetStep(ctx, "j", "huge")
	require.NoError(t, err)
	require.Equal(t, "failed", st.Status)
	require.True(t, strings.HasPrefix(st.Error, "badframe: éé"))
	require.True(t, strings.HasSuffix(st.Error, "…"))

	func() {
		defer func() { require.Equal(t, "render crashed", recover()) }()
		_, _ = client.RunStep(ctx, c, "j", "panics", func(context.Context) (int, error) { panic("render crashed") },
			client.StepLease(time.Second), client.StepHeartbeat(100*time.Millisecond))
	}()
	require.Eventually(t, func() bool {
		_, err := e.client("other").StartStep(ctx, "j", "panics", "other", 0, nil)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "the panicked step's lease expired and was taken over")
}
