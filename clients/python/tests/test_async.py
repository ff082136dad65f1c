"""AsyncStrata and async durable steps (asyncio.run per test: no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import os

import pytest

import strata
from faultproxy import FaultProxy


def _client(url: str = "") -> strata.AsyncStrata:
    return strata.AsyncStrata(url or os.environ["STRATA_URL"], os.environ["STRATA_API_KEY"], backoff=0.05)


def test_async_client_areas(uid) -> None:
    async def main() -> None:
        async with _client() as c:
            sid, jid, ns = uid("as"), uid("aj"), uid("ans")
            s = await c.put_state(sid, {"a": 1})
            with pytest.raises(strata.Conflict):
                await c.patch_state(sid, {"a": 2}, if_match=s["version"] + 1)
            assert (await c.patch_state(sid, {"b": 2}, if_match=s["version"]))["state"] == {"a": 1, "b": 2}
            await c.put_job(jid, goal="async")
            await c.append_events(jid, [{"op": "o", "params": {"i": i}} for i in range(5)])
            assert [e["seq"] async for e in c.list_events(jid, limit=2)] == [1, 2, 3, 4, 5]
            await c.put_kv(ns, "k", {"v": 1})
            assert (await c.get_kv(ns, "k"))["value"] == {"v": 1}
            m = await c.create_memory("async memories are searchable", user_id=uid("u"))
            assert (await c.get_memory(m["id"]))["text"] == "async memories are searchable"
            with pytest.raises(strata.ValidationError) as ei:
                await c.start_step(jid, "s", owner="w", lease_seconds=0)
            assert ei.value.locations == ["body.lease_seconds"]
            # Concurrency: ten calls at once on one client.
            got = await asyncio.gather(*(c.get_job(jid) for _ in range(10)))
            assert {g["job_id"] for g in got} == {jid}
    asyncio.run(main())


def test_async_retry_reuses_the_key(proxy: FaultProxy, uid) -> None:
    async def main() -> None:
        async with _client(proxy.url) as c:
            jid = uid("ar")
            await c.put_job(jid, goal="g")
            proxy.plan = lambda m, p, h: "drop" if m == "POST" and "/events" in p and not proxy.requests("/events") else "pass"
            await c.append_event(jid, "op", {"x": 1})
            reqs = proxy.requests(f"/v1/jobs/{jid}/events", "POST")
            assert [r["action"] for r in reqs] == ["drop", "pass"] and reqs[1]["replayed"] is True
            assert reqs[0]["key"] == reqs[1]["key"]
            assert len([e async for e in c.list_events(jid)]) == 1
    asyncio.run(main())


def test_async_durable_steps(uid) -> None:
    async def main() -> None:
        async with _client() as c:
            job = c.job(uid("ad"), owner="w1")
            runs = []

            @job.step("cut")
            async def cut(x: int) -> dict:
                runs.append(x)
                await asyncio.sleep(0)
                return {"x": x}

            assert await cut(1) == {"x": 1}
            assert await cut(2) == {"x": 1}
            assert runs == [1]
            async with job.step("cm") as s:
                if not s.done:
                    await s.complete("r")
            async with job.step("cm") as s:
                assert s.done and s.result == "r"

            @job.step("boom")
            async def boom() -> None:
                raise strata.ManualReview("needs a human")

            with pytest.raises(strata.ManualReview):
                await boom()
            assert (await c.get_step(job.job_id, "boom"))["disposition"] == "manual_review"
            assert await job.once("notify", {"n": 1}, lambda: "sent") == "sent"
            assert await job.once("notify", {"n": 1}, lambda: "again") == "sent"
    asyncio.run(main())


def test_async_lease_loss_cancels_the_body(uid) -> None:
    async def main() -> None:
        async with _client() as c:
            job = c.job(uid("al"), owner="w1", lease_seconds=30, heartbeat_interval=0.2)
            reached = []

            @job.step("long")
            async def long() -> str:
                h = await c.create_handoff(job.job_id, from_agent="w1", to_agent="w2")
                await c.ack_handoff(job.job_id, h["id"], "w2")
                await asyncio.sleep(10)  # cancelled when the heartbeat sees the lease gone
                reached.append("end")
                return "never"

            t0 = asyncio.get_running_loop().time()
            with pytest.raises(strata.LeaseLost):
                await long()
            assert asyncio.get_running_loop().time() - t0 < 5 and reached == []
            st = await c.get_step(job.job_id, "long")
            assert st["owner"] == "w2" and st["status"] == "running"
    asyncio.run(main())
