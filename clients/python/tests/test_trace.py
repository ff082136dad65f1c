"""Trace context: with OpenTelemetry's propagator available, every call carries the caller's
traceparent; without it, none. A stand-in propagator keeps the test free of the
opentelemetry-api package (the client imports it only when installed)."""

from __future__ import annotations

import asyncio

import httpx

import strata
from strata import _trace

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Propagate:
    @staticmethod
    def inject(carrier):
        carrier["traceparent"] = TRACEPARENT


def _recording_transport(seen):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("traceparent"))
        return httpx.Response(200, json={"session_id": "s1", "state": {}, "version": 1, "etag": '"1"'})
    return handler


def test_sync_client_sends_traceparent(monkeypatch):
    seen = []
    c = strata.Strata(base_url="http://strata.invalid", api_key="sk_test",
                      http_client=httpx.Client(transport=httpx.MockTransport(_recording_transport(seen))))
    monkeypatch.setattr(_trace, "_propagate", _Propagate)
    try:
        c.get_state("s1")
    except Exception:
        pass  # only the request matters
    monkeypatch.setattr(_trace, "_propagate", None)
    try:
        c.get_state("s1")
    except Exception:
        pass
    assert seen == [TRACEPARENT, None]


def test_async_client_sends_traceparent(monkeypatch):
    seen = []

    async def run():
        c = strata.AsyncStrata(base_url="http://strata.invalid", api_key="sk_test",
                               http_client=httpx.AsyncClient(transport=httpx.MockTransport(_recording_transport(seen))))
        monkeypatch.setattr(_trace, "_propagate", _Propagate)
        try:
            await c.get_state("s1")
        except Exception:
            pass
    asyncio.run(run())
    assert seen == [TRACEPARENT]
