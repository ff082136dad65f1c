"""Durable steps, asyncio flavour (see strata.durable for the protocol).

    job = client.job("render-42", owner="worker-1")      # client: AsyncStrata

    @job.step("cut")
    async def cut(src):
        return {"clip": await render(src)}

    clip = await cut("in.mp4")

    async with job.step("cut") as s:
        if not s.done:
            await s.complete({"clip": await render("in.mp4")})

A heartbeat task keeps the lease; when the lease is lost the task running the body is
cancelled and ``LeaseLost`` is raised in its place.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Optional, TypeVar, Union

from .durable import _current, _describe, current_step
from .errors import Conflict, LeaseLost, ManualReview, NotFound, StepNotCompleted, StrataError
from .types import JSON, Claim, Resume

if TYPE_CHECKING:
    from ._async_client import AsyncStrata

__all__ = ["AsyncJob", "AsyncStepRun"]

T = TypeVar("T")


class AsyncJob:
    """A job whose steps this task runs as ``owner`` (create with ``AsyncStrata.job``)."""

    def __init__(self, client: "AsyncStrata", job_id: str, *, owner: str, lease_seconds: int = 60, goal: str = "",
                 heartbeat_interval: Optional[float] = None, user_id: Optional[str] = None,
                 agent_id: Optional[str] = None, session_id: Optional[str] = None) -> None:
        self.client, self.job_id, self.owner = client, job_id, owner
        self.lease_seconds, self.goal = lease_seconds, goal
        self.heartbeat_interval = heartbeat_interval
        # The job's scope, set when the first claim creates it: its data subject (user_id) is
        # what GDPR export and erasure find it by.
        self.user_id, self.agent_id, self.session_id = user_id, agent_id, session_id

    def step(self, name: str, *, input: Optional[Dict[str, Any]] = None,
             lease_seconds: Optional[int] = None) -> "AsyncStepRun":
        """A durable step: ``@job.step(name)`` on a coroutine function, or ``async with job.step(name) as s:``."""
        return AsyncStepRun(self, name, input=input, lease_seconds=lease_seconds or self.lease_seconds)

    async def run(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return await self.step(name)(fn)(*args, **kwargs)

    async def once(self, op: str, params: Optional[Dict[str, Any]],
                   fn: Callable[[], Union[T, Awaitable[T]]]) -> T:
        """Do a side effect once per job (see ``Job.once``); ``fn`` may be sync or async."""
        cur = current_step()
        if cur is not None and cur.lease_lost.is_set():
            raise LeaseLost(409, f"lease on step {cur.name!r} was lost: not doing {op!r}; resume the job")
        a = await self.client.applied(self.job_id, op, params or {})
        if a.get("applied"):
            return (a.get("event") or {}).get("result")  # type: ignore[return-value]
        result = fn()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        await self.client.append_event(self.job_id, op, params or {}, result=result)
        return result  # type: ignore[return-value]

    async def resume(self, *, events: Optional[int] = None) -> Resume:
        return await self.client.resume_job(self.job_id, events=events)

    async def claim(self, name: str, *, input: Optional[Dict[str, Any]] = None,
                    lease_seconds: Optional[int] = None) -> Claim:
        ls = lease_seconds or self.lease_seconds
        try:
            return await self.client.start_step(self.job_id, name, owner=self.owner, lease_seconds=ls, input=input)
        except NotFound:
            await self.client.put_job(self.job_id, goal=self.goal or None, owner=self.owner, user_id=self.user_id,
                                  agent_id=self.agent_id, session_id=self.session_id)
            return await self.client.start_step(self.job_id, name, owner=self.owner, lease_seconds=ls, input=input)


class AsyncStepRun:
    """One run of a durable step (asyncio): ``done``, ``result``, ``fencing_token``,
    ``lease_lost`` (an asyncio.Event) and ``await s.complete(result)``."""

    def __init__(self, job: AsyncJob, name: str, *, input: Optional[Dict[str, Any]], lease_seconds: int) -> None:
        self.job, self.name, self.input, self.lease_seconds = job, name, input, lease_seconds
        self.done = False
        self.result: JSON = None
        self.fencing_token = 0
        self.attempt = 0
        self.lease_lost = asyncio.Event()
        self._completed = False
        self._entered = False
        self._hb: Optional["asyncio.Task[None]"] = None
        self._task: Optional["asyncio.Task[Any]"] = None
        self._cancelled_by_us = False
        self._token: Any = None

    def __call__(self, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> T:
            async with AsyncStepRun(self.job, self.name, input=self.input, lease_seconds=self.lease_seconds) as s:
                if s.done:
                    return s.result
                r = await fn(*args, **kwargs)
                await s.complete(r)
                return r
        return wrapper

    async def __aenter__(self) -> "AsyncStepRun":
        if self._entered:
            raise RuntimeError("a StepRun runs once: call job.step(name) again for another run")
        self._entered = True
        claim = await self.job.claim(self.name, input=self.input, lease_seconds=self.lease_seconds)
        self.fencing_token = int(claim.get("fencing_token") or 0)
        self.attempt = int(claim.get("attempt") or 0)
        if claim.get("status") == "completed":
            self.done = True
            self.result = claim.get("result")
            return self
        self._task = asyncio.current_task()
        self._token = _current.set(self)
        interval = self.job.heartbeat_interval or max(0.2, self.lease_seconds / 3)
        self._hb = asyncio.ensure_future(self._heartbeat(interval))
        return self

    async def _heartbeat(self, interval: float) -> None:
        c = self.job.client
        while True:
            await asyncio.sleep(interval)
            try:
                await c.heartbeat_step(self.job.job_id, self.name, self.fencing_token, lease_seconds=self.lease_seconds)
            except Conflict:
                self.lease_lost.set()
                if self._task is not None and not self._completed:
                    self._cancelled_by_us = True
                    self._task.cancel()
                return
            except StrataError:
                continue

    async def _stop_heartbeat(self) -> None:
        hb, self._hb = self._hb, None
        if hb is not None and not hb.done():
            hb.cancel()
            try:
                await hb
            except asyncio.CancelledError:
                pass
        if self._token is not None:
            _current.reset(self._token)
            self._token = None

    def _lost(self, cause: Optional[BaseException] = None) -> LeaseLost:
        cur = cause.current if isinstance(cause, StrataError) else None
        return LeaseLost(409, f"lease on step {self.name!r} of job {self.job.job_id!r} was lost (fencing token "
                              f"{self.fencing_token} is stale); stop and resume the job", body={"current": cur})

    async def complete(self, result: JSON = None) -> None:
        """Complete the step with ``result`` under this run's fencing token."""
        if self.done:
            raise RuntimeError(f"step {self.name!r} had already completed: use s.result, do not run it again")
        if self._completed:
            raise RuntimeError(f"step {self.name!r} was already completed by this run")
        await self._stop_heartbeat()
        if self.lease_lost.is_set():
            raise self._lost()
        try:
            await self.job.client.complete_step(self.job.job_id, self.name, self.fencing_token, result)
        except Conflict as exc:
            self.lease_lost.set()
            raise self._lost(exc) from exc
        self._completed = True
        self.result = result

    async def _fail(self, exc: BaseException, disposition: str) -> None:
        try:
            await self.job.client.fail_step(self.job.job_id, self.name, self.fencing_token, _describe(exc),
                                            disposition=disposition)  # type: ignore[arg-type]
        except Conflict:
            self.lease_lost.set()

    async def __aexit__(self, et: Any, exc: Optional[BaseException], tb: Any) -> Optional[bool]:
        if self.done or self._completed:
            return None
        await self._stop_heartbeat()
        if self._cancelled_by_us and isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            raise self._lost() from None
        if isinstance(exc, LeaseLost):
            return None
        if exc is not None:
            if not self.lease_lost.is_set() and not isinstance(exc, asyncio.CancelledError):
                await self._fail(exc, "manual_review" if isinstance(exc, ManualReview) else "retryable")
            return None
        if self.lease_lost.is_set():
            raise self._lost()
        err = StepNotCompleted(0, f"the block of step {self.name!r} ended without await s.complete(result): the step "
                                  "was failed (retryable); call await s.complete(result) at the end of the block")
        await self._fail(err, "retryable")
        raise err
