package client

import (
	"context"
	"fmt"
	"net/http"
)

// Once performs the side effect fn for (op, params) unless the job's episodic log already
// shows it applied, and records it in the log:
//
//  1. GET /v1/jobs/{job}/applied?op=&params= — if the log holds the op with exactly these
//     params (same fingerprint) and it was not reverted, Once returns that event's result
//     decoded into T and does not call fn;
//  2. otherwise it calls fn(ctx, key) — the side effect;
//  3. and appends the event {op, params, result} (POST /v1/jobs/{job}/events), retried with
//     one Idempotency-Key until acknowledged (for up to 30 s, even if ctx is cancelled
//     meanwhile: the side effect is done and must be recorded).
//
// The append is the side effect's commit point. Between the side effect (2) and its
// acknowledged append (3) there is a window Strata cannot close: a process killed there has
// changed the world without a record of it, and the next Once for (op, params) calls fn
// again. So fn must be idempotent on key: key is the same for the same job, op and params in
// every process and on every retry (the job id and the server's fingerprint of op + canonical
// params), so a side effect that dedups on it — a deterministic output name, a message id the
// receiver dedups on, a ledger row keyed by it, a conditional PUT — happens once in the world.
// Concurrent Once calls for the same (op, params) (two workers after a takeover) are made
// safe the same way: the check and the append are not one atomic step.
//
// Inside RunStep, the pair is exactly-once end to end: a completed step never runs fn again; a
// crash after Once's append and before the step's completion re-runs the step, and Once then
// finds the event and returns the recorded result without the side effect; a crash before
// the append re-runs the side effect, which its key makes idempotent.
//
// A reverted event no longer counts as applied, so Once applies it again (with the same key:
// a side effect that dedups on the key answers its first result; put what distinguishes the
// re-application into params if it must really happen twice).
func Once[T any](ctx context.Context, c *Client, job, op string, params any, fn func(ctx context.Context, key string) (T, error), opts ...OnceOption) (T, error) {
	var zero T
	o := onceOptions{}
	for _, f := range opts {
		f(&o)
	}
	if o.scope.AgentID == "" {
		if run, ok := StepFromContext(ctx); ok {
			o.scope.AgentID = run.Owner
		} else {
			o.scope.AgentID = c.owner
		}
	}
	ap, err := c.WasApplied(ctx, job, op, params)
	if err != nil {
		return zero, fmt.Errorf("checking whether %s was applied in job %s: %w", op, job, err)
	}
	if ap.Applied && ap.Event != nil {
		var v T
		if err := decodeResult(ap.Event.Result, &v); err != nil {
			return zero, fmt.Errorf("%s was applied in job %s (event %d), but its result does not decode into %T: %w", op, job, ap.Event.Seq, v, err)
		}
		if o.event != nil {
			*o.event = *ap.Event
		}
		return v, nil
	}
	v, err := fn(ctx, job+"/"+ap.Fingerprint)
	if err != nil {
		return zero, err
	}
	fin, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	var ev Event
	_, err = c.doUntil(fin, Call{Method: http.MethodPost, Path: jobPath(job, "events"), Body: EventInput{Op: op, Params: params,
		Result: v, AgentID: o.scope.AgentID, UserID: o.scope.UserID, SessionID: o.scope.SessionID}}, &ev)
	if err != nil {
		return zero, fmt.Errorf("recording %s in job %s (the side effect is done but not logged; the next Once runs fn again with the same key): %w", op, job, err)
	}
	if o.event != nil {
		*o.event = ev
	}
	return v, nil
}

// OnceOption configures one Once call.
type OnceOption func(*onceOptions)

type onceOptions struct {
	scope Scope
	event *Event
}

// OnceScope sets the event's agent, user and session (agent default: the running RunStep's
// owner, else the client's WithOwner).
func OnceScope(s Scope) OnceOption { return func(o *onceOptions) { o.scope = s } }

// OnceEvent stores the event that records the op — the one found in the log or the one
// just appended — into *ev.
func OnceEvent(ev *Event) OnceOption { return func(o *onceOptions) { o.event = ev } }
