package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// This file is the one-line form of the step protocol of docs/jobs.md: RunStep claims a step,
// runs the caller's function under a heartbeated lease and records its result (or its
// failure) under the fencing token. The raw calls (StartStep, Heartbeat, CompleteStep,
// FailStep) stay available for anything the helper does not cover.

// RunStep runs fn as step of job at most once to completion:
//
//   - it claims the step (POST …/steps/{step}/start) as the owner set with WithOwner on the
//     client or StepOwner on the call, recording StepInputOf's input;
//   - if the step already completed, it returns the stored result decoded into T without
//     running fn;
//   - otherwise it runs fn with a context that carries the claim (StepFromContext) and is
//     cancelled, with a *LeaseLostError as its cause (context.Cause), when the lease is lost:
//     a heartbeat answered that the token is stale (a takeover or a handoff moved the lease),
//     or the lease ran out before a heartbeat could renew it (the server was unreachable);
//   - while fn runs it heartbeats in the background (every third of the lease by default);
//   - when fn returns a value it completes the step with it under the fencing token; when fn
//     returns an error it fails the step: retryable (the next RunStep claims it again), or
//     manual_review when the error was wrapped with ManualReview.
//
// Every call is retried on network errors, 429, 502, 503 and 504 with one Idempotency-Key
// per call (see Client.Do), so a lost response never applies a write twice. The completion
// or failure is retried for up to 30 s, past the client's retry budget (it records work
// already done) and even when ctx was cancelled after fn returned, so a worker that is
// shutting down, or meets a server restart, keeps the work it did.
//
// Errors: *LeaseHeldError when another owner holds a live lease on the step; *LeaseLostError
// (errors.Is(err, ErrLeaseLost)) when the step could not be completed because the lease moved
// on — another claim owns the step now and fn's result was not recorded; *StepFailedError
// wrapping fn's error after the failure was recorded; other errors wrap the failing call.
//
// Exactly-once: a completed step never runs again. fn itself runs at least once: a process
// that dies inside fn, or after fn but before the completion is acknowledged, leaves the step
// claimed, and the next RunStep (the same owner at once, another after the lease expired) runs
// fn again. Make fn's side effects exactly-once with Once and an idempotent effect (see Once).
func RunStep[T any](ctx context.Context, c *Client, job, step string, fn func(ctx context.Context) (T, error), opts ...StepOption) (T, error) {
	var zero T
	o := stepOptions{owner: c.owner, lease: DefaultLease}
	for _, f := range opts {
		f(&o)
	}
	if o.owner == "" {
		return zero, fmt.Errorf("step %s of job %s: no owner: set client.WithOwner on the client or client.StepOwner on the call", step, job)
	}
	secs := leaseSeconds(o.lease)
	every := o.heartbeat
	if every <= 0 {
		every = time.Duration(secs) * time.Second / 3
	}
	sent := time.Now()
	claim, err := c.StartStep(ctx, job, step, o.owner, secs, o.input)
	if err != nil {
		return zero, startError(job, step, err)
	}
	if claim.Status == "completed" {
		var v T
		if err := decodeResult(claim.Result, &v); err != nil {
			return zero, fmt.Errorf("step %s of job %s completed earlier, but its stored result does not decode into %T: %w", step, job, v, err)
		}
		return v, nil
	}
	run := ClaimedStep{Job: job, Step: step, Owner: o.owner, FencingToken: claim.FencingToken, Attempt: claim.Attempt}
	runCtx, lost := context.WithCancelCause(context.WithValue(ctx, stepRunKey{}, run))
	defer lost(nil)
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB() // also if fn panics: a recovered panic must not leave the lease renewed forever
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		c.heartbeatLoop(hbCtx, lost, run, secs, every, sent)
	}()
	v, fnErr := fn(runCtx)
	stopHB()
	<-hbDone

	// Record the outcome even if ctx is cancelled by now: the work was done.
	fin, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if fnErr == nil {
		if _, err := c.doUntil(fin, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "complete"),
			Body: map[string]any{"fencing_token": run.FencingToken, "result": v}}, nil); err != nil {
			if IsConflict(err) {
				return zero, &LeaseLostError{Claim: run, Reason: "completion refused: the fencing token is stale", Err: err}
			}
			return zero, fmt.Errorf("completing step %s of job %s (fn succeeded but its result is not recorded; the next RunStep runs it again): %w", step, job, err)
		}
		return v, nil
	}
	if cause := context.Cause(runCtx); errors.Is(cause, ErrLeaseLost) && !errors.Is(fnErr, ErrLeaseLost) {
		fnErr = fmt.Errorf("%w (%w)", fnErr, cause)
	}
	disp := DispositionRetryable
	var mr *manualReviewError
	if errors.As(fnErr, &mr) {
		disp = DispositionManualReview
	}
	if _, err := c.doUntil(fin, Call{Method: http.MethodPost, Path: jobPath(job, "steps", PathEscape(step), "fail"),
		Body: map[string]any{"fencing_token": run.FencingToken, "error": errorText(fnErr), "disposition": disp}}, nil); err != nil {
		if IsConflict(err) {
			return zero, &LeaseLostError{Claim: run, Reason: "failure not recorded: the fencing token is stale", Err: errors.Join(fnErr, err)}
		}
		return zero, fmt.Errorf("step %s of job %s failed (%w), and recording the failure failed too (the lease expires and the step runs again): %w", step, job, fnErr, err)
	}
	return zero, &StepFailedError{Claim: run, Disposition: disp, Err: fnErr}
}

// DefaultLease is the lease RunStep asks for unless StepLease says otherwise.
const DefaultLease = 60 * time.Second

// finishTimeout bounds the recording of fn's outcome (RunStep's completion or failure,
// Once's event) once fn has returned: long enough to ride out a server restart.
const finishTimeout = 30 * time.Second

// doUntil is Do for a write that must not be given up lightly (fn's outcome is done work):
// one Idempotency-Key for every attempt, and when Do has spent its retries on errors it
// retries (network errors, 429, 502-504), it starts again after a backoff, until ctx ends.
func (c *Client) doUntil(ctx context.Context, call Call, out any) (Meta, error) {
	hdr := http.Header{}
	for k, v := range call.Header {
		hdr[k] = v
	}
	if hdr.Get("Idempotency-Key") == "" {
		hdr.Set("Idempotency-Key", uuid.NewString())
	}
	call.Header = hdr
	for {
		m, err := c.Do(ctx, call, out)
		if err == nil || !c.retryable(call.Method, hdr, err) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, err
		case <-time.After(max(c.backoff(c.maxRetries+1, err), 50*time.Millisecond)):
		}
	}
}

// Step failure dispositions.
const (
	DispositionRetryable    = "retryable"
	DispositionManualReview = "manual_review"
)

// StepOption configures one RunStep call.
type StepOption func(*stepOptions)

type stepOptions struct {
	owner     string
	lease     time.Duration
	heartbeat time.Duration
	input     *StepInput
}

// StepOwner claims the step as owner (default: the client's WithOwner).
func StepOwner(owner string) StepOption { return func(o *stepOptions) { o.owner = owner } }

// StepLease sets the lease (whole seconds, rounded up; default DefaultLease). A shorter lease
// lets another worker take over sooner after a crash and costs more heartbeats.
func StepLease(d time.Duration) StepOption { return func(o *stepOptions) { o.lease = d } }

// StepHeartbeat sets how often the lease is renewed while fn runs (default a third of the
// lease).
func StepHeartbeat(every time.Duration) StepOption {
	return func(o *stepOptions) { o.heartbeat = every }
}

// StepInputOf records what the step runs on (tool, model, params) when it is claimed, so a
// failed or stalled step shows the exact input it had.
func StepInputOf(in StepInput) StepOption { return func(o *stepOptions) { o.input = &in } }

// WithOwner sets the agent id this client claims steps as (RunStep) and records events as
// (Once).
func WithOwner(owner string) Option { return func(c *Client) { c.owner = owner } }

func leaseSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// errorText is err's message as the server stores it: no NUL characters (Postgres refuses
// them), at most maxErrorText characters, never empty.
func errorText(err error) string {
	s := strings.ReplaceAll(err.Error(), "\x00", "")
	if len(s) > maxErrorText {
		cut := maxErrorText - len("…")
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	if s == "" {
		s = fmt.Sprintf("%T with an empty message", err)
	}
	return s
}

// maxErrorText is the server's limit on a step failure's error (body.error).
const maxErrorText = 10000

func decodeResult(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// ClaimedStep is the claim a running fn holds.
type ClaimedStep struct {
	Job, Step, Owner string
	// FencingToken grows with every claim of the step: pass it to systems that can refuse
	// writes from an older claim.
	FencingToken int64
	Attempt      int
}

type stepRunKey struct{}

// StepFromContext returns the claim of the RunStep whose fn received ctx.
func StepFromContext(ctx context.Context) (ClaimedStep, bool) {
	r, ok := ctx.Value(stepRunKey{}).(ClaimedStep)
	return r, ok
}

// heartbeatLoop renews the lease every `every` until ctx ends. It cancels fn's context with a
// *LeaseLostError when the server says the token is stale, or when the lease has run out by
// the local clock without a renewal. The local deadline is measured from when the renewing
// request was sent, which is no later than the server's own clock started the lease, so it
// never outlives the server's lease (with clocks running at the same rate).
func (c *Client) heartbeatLoop(ctx context.Context, lost context.CancelCauseFunc, run ClaimedStep, secs int, every time.Duration, sent time.Time) {
	lease := time.Duration(secs) * time.Second
	deadline := sent.Add(lease)
	expire := time.NewTimer(time.Until(deadline))
	defer expire.Stop()
	tick := time.NewTimer(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expire.C:
			lost(&LeaseLostError{Claim: run, Reason: "the lease ran out before a heartbeat could renew it"})
			return
		case <-tick.C:
		}
		hctx, cancel := context.WithDeadline(ctx, deadline)
		at := time.Now()
		_, err := c.Heartbeat(hctx, run.Job, run.Step, run.FencingToken, secs)
		cancel()
		switch {
		case err == nil:
			deadline = at.Add(lease)
			expire.Reset(time.Until(deadline))
		case IsConflict(err):
			lost(&LeaseLostError{Claim: run, Reason: "a heartbeat was refused: another claim holds the step", Err: err})
			return
		}
		// Anything else (the server unreachable for now): try again at the next tick; the
		// expiry timer decides when it is too late.
		tick.Reset(every)
	}
}

// ErrLeaseLost is what every *LeaseLostError matches with errors.Is.
var ErrLeaseLost = errors.New("step lease lost")

// LeaseLostError says a RunStep claim ended before its outcome was recorded.
type LeaseLostError struct {
	Claim  ClaimedStep
	Reason string
	Err    error // the server's refusal, when there was one
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("step %s of job %s: lease of token %d lost: %s; resume the job to see who holds it now",
		e.Claim.Step, e.Claim.Job, e.Claim.FencingToken, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the server's refusal.
func (e *LeaseLostError) Unwrap() error { return e.Err }

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// LeaseHeldError says RunStep could not claim a step because another owner holds a live lease.
type LeaseHeldError struct {
	Job, Step, Holder string
	Until             time.Time // when the lease expires unless renewed; a takeover is possible after it
	Err               *Error
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("step %s of job %s is held by %q until %s: retry after that or work on something else",
		e.Step, e.Job, e.Holder, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns the server's 409.
func (e *LeaseHeldError) Unwrap() error { return e.Err }

// StepFailedError is fn's error after RunStep recorded the failure.
type StepFailedError struct {
	Claim       ClaimedStep
	Disposition string // retryable or manual_review
	Err         error  // fn's error
}

func (e *StepFailedError) Error() string {
	next := "the next RunStep claims it again"
	if e.Disposition == DispositionManualReview {
		next = "an operator must clear it (POST /v1/jobs/" + e.Claim.Job + "/steps/" + e.Claim.Step + "/clear) before it runs again"
	}
	return fmt.Sprintf("step %s of job %s failed (recorded as %s; %s): %v", e.Claim.Step, e.Claim.Job, e.Disposition, next, e.Err)
}

// Unwrap returns fn's error.
func (e *StepFailedError) Unwrap() error { return e.Err }

// ManualReview marks fn's error as one that a retry will not fix: RunStep records the failure
// with disposition manual_review, and the step is not claimed again until an operator clears
// it. ManualReview(nil) is nil.
func ManualReview(err error) error {
	if err == nil {
		return nil
	}
	return &manualReviewError{err: err}
}

type manualReviewError struct{ err error }

func (e *manualReviewError) Error() string { return e.err.Error() }
func (e *manualReviewError) Unwrap() error { return e.err }

// startError turns a refused start into a typed error.
func startError(job, step string, err error) error {
	var e *Error
	if errors.As(err, &e) && e.Status == 409 && len(e.Errors) > 0 {
		if m, ok := e.Errors[0].Value.(map[string]any); ok {
			holder, _ := m["holder"].(string)
			until, _ := m["until"].(string)
			if holder != "" && until != "" {
				t, _ := time.Parse(time.RFC3339Nano, until)
				return &LeaseHeldError{Job: job, Step: step, Holder: holder, Until: t, Err: e}
			}
		}
	}
	return fmt.Errorf("claiming step %s of job %s: %w", step, job, err)
}
