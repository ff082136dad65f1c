"""Trace context propagation. When the OpenTelemetry API (``opentelemetry-api``) is
installed, every call carries the caller's current trace context (``traceparent``) through
OpenTelemetry's global propagator, so an agent that traces continues its trace in Strata.
Without it nothing is added, and the client depends on nothing more."""

from __future__ import annotations

from typing import Any, MutableMapping

_propagate: Any
try:  # optional: the client does not require OpenTelemetry
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - depends on the environment
    _propagate = None


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current trace context to headers (a no-op without OpenTelemetry)."""
    if _propagate is not None:
        _propagate.inject(headers)
    return headers
