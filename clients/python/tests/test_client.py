"""The blocking client against the live server: every area, real assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import strata


def test_sync_client_is_generated_from_async_source() -> None:
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "unasync.py")
    r = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_config_from_environment(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("STRATA_URL", url + "/")
    monkeypatch.setenv("STRATA_API_KEY", "sk_test")
    c = strata.Strata()
    assert c.base_url == url and c.api_key == "sk_test"
    monkeypatch.delenv("STRATA_API_KEY")
    with pytest.raises(ValueError, match="STRATA_API_KEY"):
        strata.Strata()


def test_session_state_etags_and_turns(client: strata.Strata, uid) -> None:
    sid = uid("sess")
    s = client.put_state(sid, {"draft": "v1", "n": 1})
    assert s["version"] == 1 and s["state"] == {"draft": "v1", "n": 1}
    s2 = client.patch_state(sid, {"n": 2, "draft": None}, if_match=s["version"])
    assert s2["version"] == 2 and s2["state"] == {"n": 2}
    with pytest.raises(strata.Conflict) as ei:
        client.put_state(sid, {"n": 3}, if_match=1)  # stale ETag
    assert ei.value.status == 409 and ei.value.current == {"version": 2}
    assert client.get_state(sid)["state"] == {"n": 2}

    for i in range(5):
        m = client.post_message(sid, "user" if i % 2 == 0 else "assistant", f"turn {i}")
        assert m["seq"] == i + 1
    assert [m["content"] for m in client.recent_messages(sid)] == [f"turn {i}" for i in range(5)]
    # The durable log, two per page: the iterator follows the cursor across three pages.
    assert [m["seq"] for m in client.list_messages(sid, limit=2)] == [1, 2, 3, 4, 5]

    with pytest.raises(strata.Conflict):
        client.delete_session(sid, if_match=1)
    client.delete_session(sid, if_match=2)
    with pytest.raises(strata.NotFound):
        client.get_state(sid)


def test_validation_error_names_the_field(client: strata.Strata, uid) -> None:
    with pytest.raises(strata.ValidationError) as ei:
        client.put_state(uid("bad"), {"a": 1}, ttl_seconds=-5)
    e = ei.value
    assert e.status == 422 and e.locations == ["body.ttl_seconds"]
    # The problem names the field; it never repeats the submitted value.
    assert e.errors[0].value is None and "body.ttl_seconds" in str(e)
    with pytest.raises(strata.ValidationError) as ei:
        client.start_step(uid("job"), "s1", owner="w", lease_seconds=0)
    assert ei.value.locations == ["body.lease_seconds"]


def test_auth_errors(client: strata.Strata, url: str) -> None:
    with strata.Strata(url, "sk_not_a_key") as bad:
        with pytest.raises(strata.Unauthorized) as ei:
            bad.get_job("nope")
    assert ei.value.status == 401
    with pytest.raises(strata.Forbidden):
        next(iter(client.list_keys()))  # an agent key is not an admin key
    with pytest.raises(strata.NotFound):
        client.get_job("py-no-such-job")


def test_jobs_steps_and_iterators(client: strata.Strata, uid) -> None:
    jid = uid("job")
    j = client.put_job(jid, goal="cut the trailer", owner="w1", metadata={"k": 1})
    assert j["status"] == "running" and j["owner"] == "w1" and j["version"] >= 1
    with pytest.raises(strata.Conflict):
        client.put_job(jid, goal="x", if_match=j["version"] + 5)
    assert client.get_job(jid)["goal"] == "cut the trailer"

    claim = client.start_step(jid, "s1", owner="w1", lease_seconds=30, input={"tool": "ffmpeg", "params": {"t": 1}})
    assert claim["status"] == "claimed" and claim["fencing_token"] == 1
    tok = claim["fencing_token"]
    hb = client.heartbeat_step(jid, "s1", tok, lease_seconds=30)
    assert hb["status"] == "running" and hb["lease"] == "live"
    with pytest.raises(strata.Conflict):
        client.complete_step(jid, "s1", tok + 1, {"bad": True})
    done = client.complete_step(jid, "s1", tok, {"clip": "a.mp4"})
    assert done["status"] == "completed" and done["result"] == {"clip": "a.mp4"}
    again = client.start_step(jid, "s1", owner="w1")
    assert again["status"] == "completed" and again["result"] == {"clip": "a.mp4"}

    c2 = client.start_step(jid, "s2", owner="w1")
    f = client.fail_step(jid, "s2", c2["fencing_token"], "ffmpeg exited 1")
    assert f["status"] == "failed" and f["disposition"] == "retryable"
    c3 = client.start_step(jid, "s2", owner="w1")
    assert c3["status"] == "claimed" and c3["fencing_token"] == 2 and c3["attempt"] == 2
    client.complete_step(jid, "s2", 2, None)
    for i in range(3, 6):
        c = client.start_step(jid, f"s{i}", owner="w1")
        client.complete_step(jid, f"s{i}", c["fencing_token"], i)
    assert client.get_step(jid, "s3")["result"] == 3
    assert [s["step_id"] for s in client.list_steps(jid, limit=2)] == ["s1", "s2", "s3", "s4", "s5"]  # run order

    r = client.resume_job(jid)
    assert {s["step_id"] for s in r["completed_steps"]} == {"s1", "s2", "s3", "s4", "s5"}
    assert r["job"]["job_id"] == jid

    others = [uid(f"job{i}") for i in range(3)]
    for o in others:
        client.put_job(o, goal="list me")
    seen = {j["job_id"] for j in client.list_jobs(status="running", limit=2)}
    assert set(others) <= seen and jid in seen
    fin = client.complete_job(jid, outcome={"ok": True})
    assert fin["status"] == "completed" and fin["outcome"] == {"ok": True}
    with pytest.raises(strata.Conflict):
        client.start_step(jid, "s6", owner="w1")


def test_checkpoints_and_fork(client: strata.Strata, uid) -> None:
    jid = uid("cp")
    client.put_job(jid, goal="g")
    v1 = client.put_checkpoint(jid, if_match=0, goal="g", current_step="s1", done=[], pending=["s1", "s2"],
                               next_action="run s1", state={"n": 1})
    assert v1["version"] == 1
    v2 = client.put_checkpoint(jid, if_match=1, goal="g", current_step="s2", done=["s1"], pending=["s2"],
                               next_action="run s2", state={"n": 2})
    assert v2["version"] == 2
    with pytest.raises(strata.Conflict) as ei:
        client.put_checkpoint(jid, if_match=1, goal="g", current_step="s2", next_action="stale")
    assert ei.value.status == 409
    for n in range(3, 6):
        client.put_checkpoint(jid, if_match=n - 1, goal="g", current_step=f"s{n}", next_action="go", state={"n": n})
    assert [c["version"] for c in client.list_checkpoints(jid, limit=2)] == [1, 2, 3, 4, 5]
    assert [c["version"] for c in client.list_checkpoints(jid, order="desc", limit=2)][:2] == [5, 4]
    assert client.get_checkpoint(jid, 2)["state"] == {"n": 2}
    fork = client.fork_checkpoint(jid, 2, uid("fork"), owner="w2")
    assert fork["job"]["parent_job_id"] == jid and fork["checkpoint"]["version"] == 2
    nxt = client.put_checkpoint(fork["job"]["job_id"], if_match=2, goal="g", current_step="alt", next_action="branch")
    assert nxt["version"] == 3
    # Without if_match only the first checkpoint is written; "*" is the explicit overwrite.
    with pytest.raises(strata.PreconditionRequired) as pe:
        client.put_checkpoint(jid, goal="g", next_action="blind")
    assert pe.value.status == 428 and pe.value.current == {"current_version": 5}
    assert "If-Match" in str(pe.value)
    assert client.put_checkpoint(jid, if_match="*", goal="g", next_action="overwrite")["version"] == 6
    assert client.get_checkpoint(jid, 3)["current_step"] == "s3"  # the parent is untouched


def test_events_applied_revert(client: strata.Strata, uid) -> None:
    jid = uid("ev")
    client.put_job(jid, goal="g")
    e1 = client.append_event(jid, "video.crop", {"x": 10, "y": 20}, result={"out": "c1.mp4"}, event_key="crop-1")
    assert e1["seq"] == 1 and not e1.get("replayed")
    rep = client.append_event(jid, "video.crop", {"x": 10, "y": 20}, result={"out": "c1.mp4"}, event_key="crop-1")
    assert rep["seq"] == 1 and rep["replayed"] is True
    batch = client.append_events(jid, [{"op": "video.trim", "params": {"s": i}} for i in range(4)])
    assert [e["seq"] for e in batch] == [2, 3, 4, 5]
    assert [e["seq"] for e in client.list_events(jid, limit=2)] == [1, 2, 3, 4, 5]
    assert [e["seq"] for e in client.list_events(jid, op="video.trim")] == [2, 3, 4, 5]
    a = client.applied(jid, "video.crop", {"y": 20, "x": 10})  # canonical params: key order does not matter
    assert a["applied"] is True and a["event"]["result"] == {"out": "c1.mp4"}
    assert client.applied(jid, "video.crop", {"x": 11, "y": 20})["applied"] is False
    rv = client.revert_event(jid, 1, reason="wrong crop")
    assert rv["op"] == "revert" and rv["reverts_seq"] == 1
    assert client.applied(jid, fingerprint=a["fingerprint"])["applied"] is False


def test_handoffs(client: strata.Strata, uid) -> None:
    jid = uid("ho")
    client.put_job(jid, goal="g", owner="planner")
    h = client.create_handoff(jid, from_agent="planner", to_agent="editor", context={"why": "edit"})
    assert h["status"] == "pending" and h["to"] == "editor"
    assert [x["id"] for x in client.list_handoffs(jid, status="pending")] == [h["id"]]
    with pytest.raises(strata.Conflict):
        client.ack_handoff(jid, h["id"], "someone-else")
    ack = client.ack_handoff(jid, h["id"], "editor")
    assert ack["handoff"]["status"] == "acknowledged" and ack["job"]["owner"] == "editor"


def test_assets_and_versions(client: strata.Strata, uid) -> None:
    aid = uid("asset")
    a1 = client.put_asset(aid, "s3://b/v1.mp4", media_type="video/mp4", sha256="a" * 64)
    assert a1["version"] == 1
    a2 = client.add_asset_version(aid, "s3://b/v2.mp4", parent_version=1)
    assert a2["version"] == 2 and a2["parent_version"] == 1
    with pytest.raises(strata.Conflict):
        client.add_asset_version(aid, "s3://b/v3.mp4", parent_version=1)
    with pytest.raises(strata.Conflict):
        client.put_asset(aid, "s3://b/v3.mp4", if_match=1)
    client.put_asset(aid, "s3://b/v3.mp4", if_match=2)
    assert client.get_asset(aid)["uri"] == "s3://b/v3.mp4"
    assert [v["version"] for v in client.list_asset_versions(aid, limit=2)] in ([1, 2, 3], [3, 2, 1])


def test_memories(client: strata.Strata, uid) -> None:
    user = uid("user")
    m = client.create_memory("The user prefers 16:9 trailers with subtitles", user_id=user, kind="preference",
                             trust="user_stated", metadata={"src": "chat"})
    assert m["text"].startswith("The user prefers") and m["version"] == 1 and not m["deduplicated"]
    dup = client.create_memory("The user prefers 16:9 trailers with subtitles", user_id=user, kind="preference")
    assert dup["deduplicated"] is True and dup["id"] == m["id"]
    client.create_memory("Deliverables go to the shared drive", user_id=user)
    assert client.get_memory(m["id"])["id"] == m["id"]
    res = client.search_memories("which aspect ratio for trailers", user_id=user, top_k=5, kinds=["preference"])
    assert res["items"] and res["items"][0]["memory"]["id"] == m["id"]
    # score is the number hits are ranked by; how it came about is beside it.
    hit = res["items"][0]
    assert isinstance(hit["score"], float) and hit["score"] == hit["breakdown"]["score"]
    assert {"rrf", "relevance", "recency"} <= set(hit["breakdown"])
    assert [h["score"] for h in res["items"]] == sorted((h["score"] for h in res["items"]), reverse=True)
    up = client.update_memory(m["id"], text="The user prefers 9:16 trailers with subtitles", if_match=m["version"])
    assert up["version"] == 2
    with pytest.raises(strata.Conflict):
        client.update_memory(up["id"], text="stale", if_match=1)
    assert [h["version"] for h in client.memory_history(up["id"])] in ([1, 2], [2, 1])
    v = client.verify_memory(up["id"])
    assert v.get("last_verified_at")
    gone = client.delete_memory(up["id"])
    assert gone["deleted_versions"]
    with pytest.raises(strata.NotFound):
        client.get_memory(up["id"])


def test_key_value(client: strata.Strata, uid) -> None:
    ns, user = uid("prefs"), uid("user")
    e = client.put_kv(ns, "lang", "en", user_id=user)
    assert e["version"] == 1 and e["level"] == "user"
    with pytest.raises(strata.Conflict):
        client.put_kv(ns, "lang", "fr", user_id=user, if_none_match=True)
    with pytest.raises(strata.Conflict):
        client.put_kv(ns, "lang", "fr", user_id=user, if_match=7)
    client.put_kv(ns, "lang", "de", user_id=user, if_match=1)
    client.put_kv(ns, "tz", "UTC")  # org level
    assert client.get_kv(ns, "lang", user_id=user)["value"] == "de"
    assert client.get_kv(ns, "tz", user_id=user)["value"] == "UTC"  # resolved from the org level
    hist = [h["value"] for h in client.kv_history(ns, "lang", user_id=user, limit=1)]
    assert set(hist) >= {"en", "de"}
    assert {k["key"] for k in client.list_kv(ns, user_id=user, resolve=True)} == {"lang", "tz"}
    d = client.delete_kv(ns, "lang", user_id=user)
    assert d["deleted"] is True
    with pytest.raises(strata.NotFound):
        client.get_kv(ns, "lang", user_id=user, exact=True)


def test_context_and_tools(client: strata.Strata, uid) -> None:
    user, jid = uid("user"), uid("ctxjob")
    client.create_memory("The client's brand colour is teal", user_id=user)
    client.put_job(jid, goal="make the teal poster", user_id=user)
    ctx = client.context(query="brand colour", user_id=user, job_id=jid, max_tokens=500)
    assert 0 < ctx["tokens"] <= 500 and "teal" in ctx["prompt"]
    assert [s["name"] for s in ctx["sections"]][:1] == ["job"]
    names = {t["function"]["name"] if "function" in t else t.get("name") for t in client.tools()}
    assert {"start_step", "complete_step", "recall"} <= names


def test_gdpr_export_restrict_rectify_erase(client: strata.Strata, compliance: strata.Strata, uid, tmp_path) -> None:
    user = uid("subject")
    m = client.create_memory("Subject lives in Lyon", user_id=user)
    client.put_kv(uid("ns"), "city", "Lyon", user_id=user)
    sid = uid("s")
    client.put_state(sid, {"city": "Lyon"}, user_id=user)

    out = compliance.export_subject(user, tmp_path / "export.ndjson")
    lines = [json.loads(x) for x in (tmp_path / "export.ndjson").read_text().splitlines()]
    assert out["lines"] == len(lines) >= 4 and out["bytes"] == (tmp_path / "export.ndjson").stat().st_size
    assert lines[0]["type"] == "export" and out["summary"] == lines[-1]
    assert any(r.get("id") == m["id"] for r in lines)

    r = compliance.restrict(user, reason="subject objected")
    assert r["restricted"] is True and compliance.get_restriction(user)["restricted"] is True
    with pytest.raises(strata.Forbidden) as ei:  # agents' reads of a restricted subject: 403
        client.get_memory(m["id"])
    assert ei.value.status == 403
    assert compliance.lift_restriction(user)["restricted"] is False

    rect = compliance.rectify(user, memory={"id": m["id"], "text": "Subject lives in Lille"}, reason="Art. 16")
    assert rect["type"] == "memory" and rect["memory"]["text"] == "Subject lives in Lille"

    seen = []
    e = compliance.erase_and_wait(user, reason="Art. 17", interval=0.2, timeout=60, progress=lambda x: seen.append(x["status"]))
    assert e["status"] == "completed" and e["verification"]["clean"] is True
    assert seen and seen[-1] == "completed"
    assert any(x["id"] == e["id"] for x in compliance.list_erasures(user_id=user))
    with pytest.raises(strata.NotFound):
        client.get_memory(m["id"])
    with pytest.raises(strata.NotFound):
        client.get_state(sid)


def test_audit(client: strata.Strata, compliance: strata.Strata, uid) -> None:
    jid = uid("aud")
    for i in range(3):
        client.put_job(jid, goal=f"g{i}")
    recs = list(compliance.list_audit(entity_id=jid, limit=2))
    assert len(recs) >= 3
    v = compliance.verify_audit()
    assert v["ok"] is True and v["checked"] >= 3


def test_admin_keys(admin: strata.Strata, url: str, org: str) -> None:
    k = admin.create_key(org, "agent", name="pytest-temp")
    assert k["key"].startswith("sk_") and k["role"] == "agent"
    assert k["id"] in {x["id"] for x in admin.list_keys(org_id=org, limit=1)}
    with strata.Strata(url, k["key"]) as temp:
        temp.put_job("py-admin-probe", goal="g")
        admin.revoke_key(k["id"])
        with pytest.raises(strata.Unauthorized):
            temp.get_job("py-admin-probe")


def test_graph(client: strata.Strata, org_admin: strata.Strata, uid) -> None:
    user = uid("user")
    ana = client.resolve_entity("Ana Silva", aliases=["Ana"], type="person", summary="Runs the stores", user_id=user)
    assert ana["created"] is True and ana["embedding"]["dims"] > 0
    assert client.resolve_entity("ana", user_id=user)["id"] == ana["id"]
    lisbon = client.resolve_entity("Lisbon store", user_id=user)
    porto = client.resolve_entity("Porto store", user_id=user)
    first = client.add_relation(ana["id"], "works at", object_id=lisbon["id"], functional=True,
                                valid_from="2026-01-01T00:00:00Z", user_id=user, idempotency_key=uid("rel"))
    assert first["created"] and first["relation"]["predicate"] == "works_at"
    second = client.add_relation(ana["id"], "works_at", object_id=porto["id"], functional=True,
                                 valid_from="2026-06-01T00:00:00Z", user_id=user)
    assert second["closed"] == [first["relation"]["id"]]
    hits = client.search_entities("Ana", user_id=user)
    assert hits[0]["entity"]["id"] == ana["id"] and hits[0]["exact"]
    assert [r["object_id"] for r in client.entity(ana["id"])["relations"]] == [porto["id"]]
    assert [r["object_id"] for r in client.entity(ana["id"], as_of="2026-03-01T00:00:00Z")["relations"]] == [lisbon["id"]]
    assert [n["entity"]["id"] for n in client.entity_neighbors(ana["id"], depth=2)] == [porto["id"]]
    assert len(list(client.entity_history(ana["id"], limit=1))) == 2
    with pytest.raises(strata.ValidationError) as e:
        client.entity_neighbors(ana["id"], depth=9)
    assert "depth" in str(e.value)
    dup = client.resolve_entity("A. Silva", user_id=user)
    with pytest.raises(strata.Forbidden):
        client.merge_entity(dup["id"], ana["id"])
    assert "A. Silva" in org_admin.merge_entity(dup["id"], ana["id"])["survivor"]["aliases"]
    split = org_admin.split_entity(ana["id"], "A. Silva (other)", aliases=["A. Silva"])
    assert split["new"]["id"] != ana["id"]
    assert client.delete_entity(porto["id"])["entities"] == 1
    with pytest.raises(strata.NotFound):
        client.entity(porto["id"])
    ctx = client.context(query="How is Ana?", user_id=user)
    graph = next(s for s in ctx["sections"] if s["name"] == "graph")
    assert graph["included"] == [ana["id"]] and graph["why"] == ["mentioned: 'Ana'"]
