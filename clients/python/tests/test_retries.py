"""Retries: one Idempotency-Key per logical call, so a retried write is applied once."""

from __future__ import annotations

import itertools
import os

import pytest

import strata
from faultproxy import FaultProxy


def _first_n(n: int, action: str, path_part: str, method: str):
    """A plan that answers `action` to the first n requests matching method and path."""
    count = itertools.count()

    def plan(m: str, p: str, h: dict) -> str:
        if m == method and path_part in p and next(count) < n:
            return action
        return "pass"
    return plan


def test_lost_response_is_retried_with_the_same_key_and_replayed(proxy: FaultProxy) -> None:
    c = strata.Strata(proxy.url, os.environ["STRATA_API_KEY"], backoff=0.05)
    jid = "py-retry-drop-" + os.urandom(4).hex()
    c.put_job(jid, goal="g")
    proxy.plan = _first_n(1, "drop", f"/v1/jobs/{jid}/events", "POST")
    ev = c.append_event(jid, "render", {"frame": 1}, result="ok")  # no per-event key: only the header protects it
    reqs = proxy.requests(f"/v1/jobs/{jid}/events", "POST")
    assert [r["action"] for r in reqs] == ["drop", "pass"]
    assert reqs[0]["status"] == 201  # the server did append on the first attempt ...
    assert reqs[0]["key"] and reqs[0]["key"] == reqs[1]["key"]  # ... the retry carried the same key ...
    assert reqs[1]["replayed"] is True  # ... and the server replayed it instead of appending again
    assert [e["seq"] for e in c.list_events(jid)] == [ev["seq"]] == [1]


def test_503_and_429_are_retried_with_one_key(proxy: FaultProxy) -> None:
    c = strata.Strata(proxy.url, os.environ["STRATA_API_KEY"], backoff=0.05)
    mid = "py-retry-503-" + os.urandom(4).hex()
    proxy.plan = _first_n(3, "503", "/v1/memories", "POST")
    m = c.create_memory(f"retried memory {mid}", user_id=mid)
    reqs = proxy.requests("/v1/memories", "POST")
    assert [r["status"] for r in reqs] == [503, 503, 503, 201]
    assert len({r["key"] for r in reqs}) == 1
    assert m["version"] == 1 and not m["deduplicated"]

    proxy.log.clear()
    proxy.plan = _first_n(2, "429", "/v1/jobs/", "GET")
    with pytest.raises(strata.NotFound):
        c.get_job(mid)
    assert [r["status"] for r in proxy.requests("/v1/jobs/", "GET")] == [429, 429, 404]


def test_retries_are_bounded(proxy: FaultProxy) -> None:
    c = strata.Strata(proxy.url, os.environ["STRATA_API_KEY"], backoff=0.01, max_retries=2)
    proxy.plan = lambda m, p, h: "503"
    with pytest.raises(strata.Unavailable) as ei:
        c.put_job("py-never", goal="g")
    assert ei.value.status == 503 and ei.value.retry_after == 0
    assert len(proxy.log) == 3 and len({r["key"] for r in proxy.log}) == 1


def test_unreachable_server_raises_unavailable() -> None:
    c = strata.Strata("http://127.0.0.1:9", "sk_x", backoff=0.01, max_retries=1, timeout=2)
    with pytest.raises(strata.Unavailable) as ei:
        c.get_job("x")
    assert ei.value.status == 0 and "STRATA_URL" in str(ei.value)


def test_caller_key_is_used_and_replays(client: strata.Strata, uid) -> None:
    jid = uid("ikey")
    client.put_job(jid, goal="g")
    a = client.append_event(jid, "op", {"a": 1}, idempotency_key=f"k-{jid}")
    b = client.append_event(jid, "op", {"a": 1}, idempotency_key=f"k-{jid}")
    assert a["seq"] == b["seq"] == 1
    with pytest.raises(strata.ValidationError) as ei:  # same key, different body
        client.append_event(jid, "op", {"a": 2}, idempotency_key=f"k-{jid}")
    assert ei.value.locations == ["header.Idempotency-Key"]
