"""Durable steps over Strata's step protocol (docs/jobs.md), blocking flavour.

    job = client.job("render-42", owner="worker-1")

    @job.step("cut")
    def cut(src):                 # runs at most once to completion, across crashes
        return {"clip": render(src)}

    clip = cut("in.mp4")          # a completed step returns its stored result, body not run

The context-manager form makes the skip explicit:

    with job.step("cut") as s:
        if not s.done:
            s.complete({"clip": render("in.mp4")})
    clip = s.result

While the body runs a background thread heartbeats the lease. If the lease is lost (a takeover
after expiry, a handoff) ``s.lease_lost`` is set, completion is refused with ``LeaseLost`` and
the step is left to its new holder. An exception fails the step as retryable (the next start
claims it again); ``raise strata.ManualReview(exc)`` fails it for a human instead.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, TypeVar

from .errors import Conflict, LeaseLost, ManualReview, NotFound, StepNotCompleted, StrataError
from .types import JSON, Claim, Resume

if TYPE_CHECKING:
    from ._sync_client import Strata

__all__ = ["Job", "StepRun", "current_step"]

T = TypeVar("T")
_current: "contextvars.ContextVar[Any]" = contextvars.ContextVar("strata_current_step", default=None)


def current_step() -> Any:
    """The step whose body is running in this thread or task (a StepRun or AsyncStepRun), or None."""
    return _current.get()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ManualReview) and exc.cause is not None:
        exc = exc.cause
    return f"{type(exc).__name__}: {exc}"[:2000]


class Job:
    """A job whose steps this process runs as ``owner`` (create with ``Strata.job``)."""

    def __init__(self, client: "Strata", job_id: str, *, owner: str, lease_seconds: int = 60, goal: str = "",
                 heartbeat_interval: Optional[float] = None, user_id: Optional[str] = None,
                 agent_id: Optional[str] = None, session_id: Optional[str] = None) -> None:
        self.client, self.job_id, self.owner = client, job_id, owner
        self.lease_seconds, self.goal = lease_seconds, goal
        self.heartbeat_interval = heartbeat_interval
        # The job's scope, set when the first claim creates it: its data subject (user_id) is
        # what GDPR export and erasure find it by.
        self.user_id, self.agent_id, self.session_id = user_id, agent_id, session_id

    def step(self, name: str, *, input: Optional[Dict[str, Any]] = None,
             lease_seconds: Optional[int] = None) -> "StepRun":
        """A durable step: use as ``@job.step(name)`` or ``with job.step(name) as s:``."""
        return StepRun(self, name, input=input, lease_seconds=lease_seconds or self.lease_seconds)

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` as step ``name`` (or return its stored result)."""
        return self.step(name)(fn)(*args, **kwargs)

    def once(self, op: str, params: Optional[Dict[str, Any]], fn: Callable[[], T]) -> T:
        """Do a side effect once per job: if the job's log already holds ``op`` with these exact
        ``params`` (not reverted), return that event's result without calling ``fn``; otherwise
        call ``fn()`` and append the event (retried with one Idempotency-Key until acknowledged)."""
        cur = current_step()
        if cur is not None and cur.lease_lost.is_set():
            raise LeaseLost(409, f"lease on step {cur.name!r} was lost: not doing {op!r}; resume the job")
        a = self.client.applied(self.job_id, op, params or {})
        if a.get("applied"):
            return (a.get("event") or {}).get("result")  # type: ignore[return-value]
        result = fn()
        self.client.append_event(self.job_id, op, params or {}, result=result)
        return result

    def resume(self, *, events: Optional[int] = None) -> Resume:
        return self.client.resume_job(self.job_id, events=events)

    def claim(self, name: str, *, input: Optional[Dict[str, Any]] = None, lease_seconds: Optional[int] = None) -> Claim:
        """Start (claim) a step, creating the job with this owner when it does not exist yet."""
        ls = lease_seconds or self.lease_seconds
        try:
            return self.client.start_step(self.job_id, name, owner=self.owner, lease_seconds=ls, input=input)
        except NotFound:
            self.client.put_job(self.job_id, goal=self.goal or None, owner=self.owner, user_id=self.user_id,
                                  agent_id=self.agent_id, session_id=self.session_id)
            return self.client.start_step(self.job_id, name, owner=self.owner, lease_seconds=ls, input=input)


class StepRun:
    """One run of a durable step. In a ``with`` block: ``done`` (already completed: do not run
    it again), ``result``, ``fencing_token``, ``lease_lost`` (a threading.Event) and
    ``complete(result)``. As a decorator it wraps a function that runs as this step."""

    def __init__(self, job: Job, name: str, *, input: Optional[Dict[str, Any]], lease_seconds: int) -> None:
        self.job, self.name, self.input, self.lease_seconds = job, name, input, lease_seconds
        self.done = False
        self.result: JSON = None
        self.fencing_token = 0
        self.attempt = 0
        self.lease_lost = threading.Event()
        self._completed = False
        self._entered = False
        self._stop = threading.Event()
        self._hb: Optional[threading.Thread] = None
        self._token: "Optional[contextvars.Token[Any]]" = None

    # -- decorator ---------------------------------------------------------------------
    def __call__(self, fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            run = StepRun(self.job, self.name, input=self.input, lease_seconds=self.lease_seconds)
            with run as s:
                if s.done:
                    return s.result
                r = fn(*args, **kwargs)
                s.complete(r)
                return r
        return wrapper

    # -- context manager ---------------------------------------------------------------
    def __enter__(self) -> "StepRun":
        if self._entered:
            raise RuntimeError("a StepRun runs once: call job.step(name) again for another run")
        self._entered = True
        claim = self.job.claim(self.name, input=self.input, lease_seconds=self.lease_seconds)
        self.fencing_token = int(claim.get("fencing_token") or 0)
        self.attempt = int(claim.get("attempt") or 0)
        if claim.get("status") == "completed":
            self.done = True
            self.result = claim.get("result")
            return self
        self._token = _current.set(self)
        interval = self.job.heartbeat_interval or max(0.2, self.lease_seconds / 3)
        self._hb = threading.Thread(target=self._heartbeat, args=(interval,), daemon=True,
                                    name=f"strata-heartbeat-{self.name}")
        self._hb.start()
        return self

    def _heartbeat(self, interval: float) -> None:
        c = self.job.client
        while not self._stop.wait(interval):
            try:
                c.heartbeat_step(self.job.job_id, self.name, self.fencing_token, lease_seconds=self.lease_seconds)
            except Conflict:
                if not self._stop.is_set():  # after completion a 409 only says the step is done
                    self.lease_lost.set()
                return
            except StrataError:
                continue  # unreachable for a while: the lease may still be live, keep trying

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._hb is not None and self._hb is not threading.current_thread():
            # A heartbeat stuck in its retries (server down) must not hold up completion, which
            # retries on its own; the thread exits at its next loop.
            self._hb.join(timeout=1.0)
        if self._token is not None:
            _current.reset(self._token)
            self._token = None

    def _lost(self, cause: Optional[BaseException] = None) -> LeaseLost:
        cur = cause.current if isinstance(cause, StrataError) else None
        return LeaseLost(409, f"lease on step {self.name!r} of job {self.job.job_id!r} was lost (fencing token "
                              f"{self.fencing_token} is stale); stop and resume the job",
                         body={"current": cur})

    def complete(self, result: JSON = None) -> None:
        """Complete the step with ``result`` under this run's fencing token."""
        if self.done:
            raise RuntimeError(f"step {self.name!r} had already completed: use s.result, do not run it again")
        if self._completed:
            raise RuntimeError(f"step {self.name!r} was already completed by this run")
        self._stop_heartbeat()
        if self.lease_lost.is_set():
            raise self._lost()
        try:
            self.job.client.complete_step(self.job.job_id, self.name, self.fencing_token, result)
        except Conflict as exc:
            self.lease_lost.set()
            raise self._lost(exc) from exc
        self._completed = True
        self.result = result

    def _fail(self, exc: BaseException, disposition: str) -> None:
        try:
            self.job.client.fail_step(self.job.job_id, self.name, self.fencing_token, _describe(exc),
                                      disposition=disposition)  # type: ignore[arg-type]
        except Conflict:
            self.lease_lost.set()

    def __exit__(self, et: Any, exc: Optional[BaseException], tb: Any) -> None:
        if self.done or self._completed:
            return None
        self._stop_heartbeat()
        if isinstance(exc, LeaseLost):
            return None
        if exc is not None:
            if not self.lease_lost.is_set():
                self._fail(exc, "manual_review" if isinstance(exc, ManualReview) else "retryable")
            return None
        if self.lease_lost.is_set():
            raise self._lost()
        err = StepNotCompleted(0, f"the block of step {self.name!r} ended without s.complete(result): the step was "
                                  "failed (retryable); call s.complete(result) at the end of the block")
        self._fail(err, "retryable")
        raise err
