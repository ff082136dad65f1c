"""Durable steps (blocking): claim, skip completed, heartbeat, lease loss, fencing, failure
dispositions, job.once, and a server outage in the middle of a step."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import strata
from faultproxy import FaultProxy


def test_decorator_runs_once_and_returns_stored_result(client: strata.Strata, uid) -> None:
    job = client.job(uid("dj"), owner="w1", goal="durable")
    runs = []

    @job.step("cut")
    def cut(src: str) -> dict:
        runs.append(src)
        assert strata.current_step().name == "cut"
        return {"clip": src + ".cut"}

    assert cut("a.mp4") == {"clip": "a.mp4.cut"}
    assert cut("b.mp4") == {"clip": "a.mp4.cut"}  # completed: stored result, body not run
    assert runs == ["a.mp4"]
    assert client.get_job(job.job_id)["owner"] == "w1"  # the helper created the job with its owner
    assert job.run("cut", lambda: pytest.fail("must not run")) == {"clip": "a.mp4.cut"}


def test_context_manager_form(client: strata.Strata, uid) -> None:
    job = client.job(uid("cm"), owner="w1")
    with job.step("render") as s:
        assert not s.done and s.fencing_token == 1
        s.complete({"frames": 24})
    with job.step("render") as s2:
        assert s2.done and s2.result == {"frames": 24}
        with pytest.raises(RuntimeError, match="already completed"):
            s2.complete({"frames": 25})
    assert client.get_step(job.job_id, "render")["result"] == {"frames": 24}

    with pytest.raises(strata.StepNotCompleted):
        with job.step("forgot"):
            pass
    st = client.get_step(job.job_id, "forgot")
    assert st["status"] == "failed" and st["disposition"] == "retryable"


def test_exception_fails_retryable_then_reruns(client: strata.Strata, uid) -> None:
    job = client.job(uid("retry"), owner="w1")
    calls = []

    @job.step("flaky", input={"tool": "ffmpeg"})
    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient codec error")
        return "ok"

    with pytest.raises(RuntimeError, match="transient"):
        flaky()
    st = client.get_step(job.job_id, "flaky")
    assert st["status"] == "failed" and st["disposition"] == "retryable"
    assert "RuntimeError: transient codec error" in st["error"] and st["input"]["tool"] == "ffmpeg"
    assert flaky() == "ok"
    st = client.get_step(job.job_id, "flaky")
    assert st["status"] == "completed" and st["fencing_token"] == 2


def test_manual_review_stops_for_a_human(client: strata.Strata, org_admin: strata.Strata, uid) -> None:
    job = client.job(uid("mr"), owner="w1")
    bad = {"input": "corrupt"}

    @job.step("decode")
    def decode() -> str:
        if bad["input"] == "corrupt":
            raise strata.ManualReview(ValueError("file header is corrupt"))
        return "decoded"

    with pytest.raises(strata.ManualReview):
        decode()
    st = client.get_step(job.job_id, "decode")
    assert st["status"] == "failed" and st["disposition"] == "manual_review"
    assert st["error"] == "ValueError: file header is corrupt"
    with pytest.raises(strata.Conflict):  # not claimable until an operator clears it
        decode()
    cleared = org_admin.clear_step(job.job_id, "decode")
    assert cleared["cleared_by"]
    bad["input"] = "fixed"
    assert decode() == "decoded"


def test_lease_loss_sets_the_event_and_refuses_completion(client: strata.Strata, uid) -> None:
    job = client.job(uid("ll"), owner="w1", lease_seconds=30, heartbeat_interval=0.2)
    with pytest.raises(strata.LeaseLost) as ei:
        with job.step("long") as s:
            # Another agent takes the job over: its ack moves the step's lease (new token).
            h = client.create_handoff(job.job_id, from_agent="w1", to_agent="w2")
            client.ack_handoff(job.job_id, h["id"], "w2")
            assert s.lease_lost.wait(10), "the heartbeat did not notice the lease loss"
            s.complete("too late")
    assert isinstance(ei.value, strata.Conflict)
    st = client.get_step(job.job_id, "long")
    assert st["status"] == "running" and st["owner"] == "w2" and st["fencing_token"] == 2


def test_stale_token_after_takeover_raises_conflict(client: strata.Strata, uid) -> None:
    jid = uid("take")
    client.put_job(jid, goal="g")  # no owner: any agent may take over an expired lease
    job = client.job(jid, owner="slow", lease_seconds=1, heartbeat_interval=60)

    @job.step("s")
    def s() -> str:
        time.sleep(1.3)  # the lease expires; nobody heartbeats
        other = client.start_step(jid, "s", owner="fast")
        assert other["status"] == "claimed" and other["fencing_token"] == 2
        return "slow result"

    with pytest.raises(strata.Conflict) as ei:
        s()
    assert isinstance(ei.value, strata.LeaseLost)
    with pytest.raises(strata.Conflict):
        client.complete_step(jid, "s", 1, "stale")  # the raw call: 409 for the old token
    client.complete_step(jid, "s", 2, "fast result")
    assert s() == "fast result"


def test_once_skips_applied_side_effects(client: strata.Strata, uid) -> None:
    job = client.job(uid("once"), owner="w1")
    done = []
    r1 = job.once("email.send", {"to": "team", "n": 1}, lambda: done.append(1) or "sent-1")
    r2 = job.once("email.send", {"n": 1, "to": "team"}, lambda: done.append(2) or "sent-2")
    assert (r1, r2, done) == ("sent-1", "sent-1", [1])
    assert client.applied(job.job_id, "email.send", {"to": "team", "n": 1})["applied"] is True


def test_server_down_mid_step_is_retried_with_the_same_key(proxy: FaultProxy, uid) -> None:
    c = strata.Strata(proxy.url, os.environ["STRATA_API_KEY"], backoff=0.05, max_retries=6)
    job = c.job(uid("down"), owner="w1", lease_seconds=30, heartbeat_interval=0.2)
    proxy.retry_after = "1"

    @job.step("encode")
    def encode() -> str:
        proxy.plan = lambda m, p, h: "503"  # the server goes away mid-step ...
        threading.Timer(1.5, lambda: setattr(proxy, "plan", lambda m, p, h: "pass")).start()  # ... and comes back
        return "encoded"

    assert encode() == "encoded"
    done = proxy.requests("/steps/encode/complete", "POST")
    assert len(done) >= 2 and done[0]["status"] == 503 and done[-1]["status"] == 200
    assert len({r["key"] for r in done}) == 1
    assert c.get_step(job.job_id, "encode")["status"] == "completed"


def test_job_tied_to_a_user_and_steps_in_run_order(client: strata.Strata, compliance: strata.Strata, uid,
                                                    tmp_path) -> None:
    user = uid("subject")
    job = client.job(uid("dj"), owner="w1", goal="edit the interview", user_id=user)
    for name in ("transcribe", "cut", "approve"):  # not alphabetical
        job.run(name, lambda: name)
    j = client.get_job(job.job_id)
    assert j["user_id"] == user  # tied on creation: no separate put_job
    assert [s["step_id"] for s in client.list_steps(job.job_id)] == ["transcribe", "cut", "approve"]
    # The subject's export finds the job.
    path = tmp_path / "export.ndjson"
    compliance.export_subject(user, path)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert any(rec.get("tier") == "jobs" and rec.get("type") == "job" and rec.get("id") == job.job_id for rec in lines)
