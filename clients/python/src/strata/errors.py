"""Typed exceptions for Strata's RFC 9457 problem+json answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional


@dataclass(frozen=True)
class FieldError:
    """One entry of a problem's ``errors[]``: where (``body.lease_seconds``), what, and the value."""

    location: str
    message: str
    value: Any = None


class StrataError(Exception):
    """Base class of every error this client raises for a Strata answer or a failed call.

    ``status`` is the HTTP status (0 when no answer arrived), ``detail`` the server's
    explanation, ``errors`` the per-field details and ``locations`` their locations.
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str = "",
        errors: Optional[List[FieldError]] = None,
        headers: Optional[Mapping[str, str]] = None,
        method: str = "",
        path: str = "",
        body: Any = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.title = title
        self.errors: List[FieldError] = list(errors or [])
        self.headers: Dict[str, str] = dict(headers or {})
        self.method = method
        self.path = path
        self.body = body
        where = f"{method} {path}: " if method else ""
        locs = f" ({', '.join(self.locations)})" if self.locations else ""
        super().__init__(f"{where}{status} {detail}{locs}")

    @property
    def locations(self) -> List[str]:
        """The field locations named by the problem, e.g. ``["body.ttl_seconds"]``."""
        return [e.location for e in self.errors if e.location]

    @property
    def current(self) -> Any:
        """For a 409: the current state the server reported (``errors[0].value``), if any."""
        for e in self.errors:
            if e.value is not None:
                return e.value
        return None

    @property
    def retry_after(self) -> Optional[float]:
        """The server's Retry-After in seconds, when it sent one."""
        v = self.headers.get("retry-after")
        try:
            return float(v) if v is not None else None
        except ValueError:
            return None


class ValidationError(StrataError):
    """400 or 422: the request is malformed; ``locations`` names the fields to fix."""


class Unauthorized(StrataError):
    """401: the API key is missing, unknown or revoked — check STRATA_API_KEY."""


class Forbidden(StrataError):
    """403: the key's role may not do this (agent, compliance and admin keys are separate)."""


class NotFound(StrataError):
    """404: no such resource in this key's org."""


class Conflict(StrataError):
    """409: a precondition failed (stale If-Match/ETag, stale fencing token, lease held...).

    ``current`` holds what the server reported as the current state.
    """


class PreconditionRequired(Conflict):
    """428: the write needs If-Match (a job's checkpoint once it has one): send the version you
    built on, or ``"*"`` to overwrite whatever the latest is. ``current`` holds the current version."""


class LeaseLost(Conflict):
    """The step's lease moved to another claim (takeover, handoff): this worker was fenced off.

    Stop working on the step and resume the job.
    """


class RateLimited(StrataError):
    """429 after the retries ran out: slow down (``retry_after`` says how long)."""


class Unavailable(StrataError):
    """503/502/504 after the retries ran out, or the server could not be reached (status 0)."""


class ManualReview(Exception):
    """Raise inside a durable step to fail it for a human (disposition ``manual_review``).

    ``raise ManualReview(exc)`` or ``raise ManualReview("reason")``; an operator clears it with
    an admin key (POST /v1/jobs/{job}/steps/{step}/clear) before it can run again.
    """

    def __init__(self, reason: Any = "manual review needed") -> None:
        self.cause = reason if isinstance(reason, BaseException) else None
        super().__init__(str(reason) if not isinstance(reason, BaseException) else f"{type(reason).__name__}: {reason}")


class StepNotCompleted(StrataError):
    """A ``with job.step(...)`` block ended without ``s.complete(result)``: the step was failed
    (retryable) so it runs again; call ``s.complete(result)`` at the end of the block."""


_BY_STATUS = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ValidationError,
    428: PreconditionRequired,
    429: RateLimited,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def from_response(status: int, body: Any, headers: Mapping[str, str], method: str, path: str) -> StrataError:
    """Build the typed error for a non-2xx answer."""
    detail, title, errs = "", "", []
    if isinstance(body, dict):
        detail = str(body.get("detail") or "")
        title = str(body.get("title") or "")
        for e in body.get("errors") or []:
            if isinstance(e, dict):
                errs.append(FieldError(str(e.get("location") or ""), str(e.get("message") or ""), e.get("value")))
    elif isinstance(body, str):
        detail = body[:500]
    cls = _BY_STATUS.get(status, StrataError)
    return cls(status, detail or title or f"HTTP {status}", title=title, errors=errs,
               headers={k.lower(): v for k, v in headers.items()}, method=method, path=path, body=body)
