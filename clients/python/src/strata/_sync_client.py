"""The synchronous client. GENERATED from ``_async_client.py`` by ``scripts/unasync.py``: do not edit."""

from __future__ import annotations

import time
import json as _json
import os
import random
import uuid
from time import monotonic
from typing import Any, Iterator, Callable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote

import httpx

from . import _trace, errors
from .durable import Job as _DurableJob
from .types import (
    JSON, ApiKey, Applied, Asset, AuditRecord, AuditVerify, Checkpoint, Claim, Context, Disposition,
    Erasure, Event, ExportSummary, Fork, Handoff, HandoffAck, Job, KVEntry, Memory, Message,
    Rectification, Restriction, Resume, Role, SearchResult, SessionState, Step,
)

__all__ = ["Strata"]

VERSION = "1.0.0"
DEFAULT_URL = "http://localhost:8080"
ETag = Union[int, str]


def _seg(s: Union[str, int]) -> str:
    """Escape one path segment."""
    return quote(str(s), safe="")


def _etag(v: Optional[ETag]) -> Optional[str]:
    if v is None:
        return None
    s = str(v)
    return s if s.startswith('"') or s.startswith("W/") or s == "*" else f'"{s}"'


def _drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _hits(res: Any) -> Any:
    """Each hit's ``score`` as the number it ranks by, its breakdown beside it (``breakdown``)."""
    for hit in (res or {}).get("items") or []:
        b = hit.get("score")
        if isinstance(b, dict):
            hit["breakdown"], hit["score"] = b, b.get("score")
    return res


def _retry_after(resp: httpx.Response) -> Optional[float]:
    v = resp.headers.get("retry-after")
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        return None


class Strata:
    """A Strata client (blocking). Configure with ``base_url``/``api_key`` or the environment:
    ``STRATA_URL`` (default http://localhost:8080) and ``STRATA_API_KEY``, like the CLI.

    Every write carries one ``Idempotency-Key`` per logical call (yours, or a fresh UUID), so
    the retries on network errors, 429 and 503 (bounded exponential backoff, honouring
    ``Retry-After``) never apply a write twice. Errors raise ``strata.StrataError`` subclasses.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        self.base_url = (base_url or os.environ.get("STRATA_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("STRATA_API_KEY", "")
        if not self.api_key:
            raise ValueError("no API key: pass api_key= or set STRATA_API_KEY (an admin creates keys with `strata keys create`)")
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._http = http_client or httpx.Client(timeout=timeout)
        self._headers = {
            "Authorization": f"Bearer {self.api_key}",
            "User-Agent": f"strata-python/{VERSION}",
            "Accept": "application/json, application/problem+json",
        }

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> "Strata":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- transport -------------------------------------------------------------------

    def _delay(self, attempt: int, resp: Optional[httpx.Response]) -> float:
        ra = _retry_after(resp) if resp is not None else None
        if ra is not None:
            return min(ra, self.max_backoff)
        d = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return d / 2 + random.uniform(0, d / 2)

    def _retryable(self, method: str, keyed: bool, resp: httpx.Response) -> bool:
        if resp.status_code in (429, 502, 503, 504):
            return True
        if resp.status_code == 409 and keyed:
            return "still in progress" in resp.text
        return False

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Any]] = None,
        json: Any = None,
        has_body: bool = False,
        if_match: Optional[ETag] = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        content_type: str = "application/json",
    ) -> httpx.Response:
        """Send one logical call with retries; return the 2xx response or raise."""
        hdr = dict(self._headers)
        if headers:
            hdr.update(headers)
        _trace.inject(hdr)
        if _etag(if_match) is not None:
            hdr["If-Match"] = _etag(if_match)  # type: ignore[assignment]
        keyed = method in ("POST", "PUT", "PATCH")
        if keyed:
            hdr["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        content: Optional[bytes] = None
        if has_body or json is not None:
            content = _json.dumps(json, separators=(",", ":"), ensure_ascii=False).encode()
            hdr["Content-Type"] = content_type
        q = {k: ("true" if v is True else "false" if v is False else v) for k, v in (params or {}).items() if v is not None}
        url = self.base_url + path
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._http.request(method, url, params=q, content=content, headers=hdr)
            except httpx.TransportError as exc:
                safe = keyed or method in ("GET", "DELETE", "HEAD")
                if not safe or attempt > self.max_retries:
                    raise errors.Unavailable(0, f"could not reach Strata at {self.base_url}: {exc!r} — is the server running? set STRATA_URL",
                                             method=method, path=path) from exc
                time.sleep(self._delay(attempt, None))
                continue
            if resp.status_code < 400:
                return resp
            if attempt <= self.max_retries and self._retryable(method, keyed, resp):
                time.sleep(self._delay(attempt, resp))
                continue
            raise self._error(resp, method, path)

    def _error(self, resp: httpx.Response, method: str, path: str) -> errors.StrataError:
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        return errors.from_response(resp.status_code, body, resp.headers, method, path)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        resp = self._send(method, path, **kw)
        if not resp.content:
            return None
        return resp.json()

    def _paginate(self, path: str, params: Optional[Mapping[str, Any]] = None,
                        cursor_param: str = "cursor", method: str = "GET") -> Iterator[Any]:
        """Yield every item of a list endpoint, following next_cursor page after page."""
        p = dict(params or {})
        while True:
            page = self._call(method, path, params=p)
            for item in page.get("items") or []:
                yield item
            nxt = page.get("next_cursor")
            if not nxt:
                return
            p[cursor_param] = nxt

    # ---- durable jobs (helper) -----------------------------------------------------

    def job(self, job_id: str, *, owner: str, lease_seconds: int = 60, goal: str = "",
            heartbeat_interval: Optional[float] = None, user_id: Optional[str] = None,
            agent_id: Optional[str] = None, session_id: Optional[str] = None) -> _DurableJob:
        """A handle for running durable steps of job ``job_id`` as ``owner`` (see strata.durable).
        The first claim creates the job with ``goal`` and its scope: ``user_id`` ties it to a data
        subject (GDPR export and erasure find it), with no separate ``put_job``."""
        return _DurableJob(self, job_id, owner=owner, lease_seconds=lease_seconds, goal=goal,
                           heartbeat_interval=heartbeat_interval, user_id=user_id, agent_id=agent_id,
                           session_id=session_id)

    # ---- working memory: sessions --------------------------------------------------

    def get_state(self, session_id: str) -> SessionState:
        """Read a session's state document (its ``version`` is the ETag)."""
        return self._call("GET", f"/v1/sessions/{_seg(session_id)}/state")

    def put_state(self, session_id: str, state: Dict[str, Any], *, if_match: Optional[ETag] = None,
                        ttl_seconds: Optional[int] = None, user_id: Optional[str] = None,
                        agent_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> SessionState:
        """Replace a session's state; with ``if_match`` a stale version raises Conflict."""
        body = _drop_none({"state": state, "ttl_seconds": ttl_seconds, "user_id": user_id, "agent_id": agent_id})
        return self._call("PUT", f"/v1/sessions/{_seg(session_id)}/state", json=body, if_match=if_match,
                                idempotency_key=idempotency_key)

    def patch_state(self, session_id: str, patch: Dict[str, Any], *, if_match: Optional[ETag] = None,
                          ttl_seconds: Optional[int] = None, idempotency_key: Optional[str] = None) -> SessionState:
        """Merge-patch (RFC 7386) a session's state: ``None`` values delete keys."""
        body = _drop_none({"ttl_seconds": ttl_seconds})
        body["state"] = patch
        return self._call("PATCH", f"/v1/sessions/{_seg(session_id)}/state", json=body, if_match=if_match,
                                content_type="application/merge-patch+json", idempotency_key=idempotency_key)

    def delete_session(self, session_id: str, *, if_match: Optional[ETag] = None) -> None:
        """Delete a session's state and turns."""
        self._call("DELETE", f"/v1/sessions/{_seg(session_id)}/state", if_match=if_match)

    def post_message(self, session_id: str, role: str, content: str, *, metadata: Optional[Dict[str, Any]] = None,
                           user_id: Optional[str] = None, agent_id: Optional[str] = None,
                           ttl_seconds: Optional[int] = None, idempotency_key: Optional[str] = None) -> Message:
        """Append a turn (``role``: user, assistant, system, tool)."""
        body = _drop_none({"role": role, "content": content, "metadata": metadata, "user_id": user_id,
                           "agent_id": agent_id, "ttl_seconds": ttl_seconds})
        return self._call("POST", f"/v1/sessions/{_seg(session_id)}/messages", json=body,
                                idempotency_key=idempotency_key)

    def recent_messages(self, session_id: str, *, limit: Optional[int] = None) -> List[Message]:
        """The turn buffer: the newest turns, oldest first."""
        page = self._call("GET", f"/v1/sessions/{_seg(session_id)}/messages", params={"limit": limit})
        return list(page.get("items") or [])

    def list_messages(self, session_id: str, *, after_seq: int = 0, limit: Optional[int] = None) -> Iterator[Message]:
        """Every turn of the session's durable log after ``after_seq``, page by page."""
        return self._paginate(f"/v1/sessions/{_seg(session_id)}/messages",
                              {"after_seq": after_seq, "limit": limit}, cursor_param="after_seq")

    # ---- jobs ------------------------------------------------------------------------

    def put_job(self, job_id: str, *, goal: Optional[str] = None, status: Optional[str] = None,
                      owner: Optional[str] = None, metadata: JSON = None, outcome: JSON = None,
                      user_id: Optional[str] = None, agent_id: Optional[str] = None,
                      session_id: Optional[str] = None, if_match: Optional[ETag] = None,
                      idempotency_key: Optional[str] = None) -> Job:
        """Create or update a job (``if_match``: only at this version)."""
        body = _drop_none({"goal": goal, "status": status, "owner": owner, "metadata": metadata, "outcome": outcome,
                           "user_id": user_id, "agent_id": agent_id, "session_id": session_id})
        return self._call("PUT", f"/v1/jobs/{_seg(job_id)}", json=body, if_match=if_match,
                                idempotency_key=idempotency_key)

    def get_job(self, job_id: str) -> Job:
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}")

    def list_jobs(self, *, status: Optional[str] = None, stalled: Optional[bool] = None,
                  limit: Optional[int] = None) -> Iterator[Job]:
        """Every job (``stalled=True``: running jobs whose lease expired or that made no progress)."""
        return self._paginate("/v1/jobs", {"status": status, "stalled": stalled, "limit": limit})

    def complete_job(self, job_id: str, *, outcome: JSON = None, status: str = "completed",
                           idempotency_key: Optional[str] = None) -> Job:
        """Finish a job: completed, failed or cancelled."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/complete",
                                json=_drop_none({"outcome": outcome, "status": status}), idempotency_key=idempotency_key)

    def resume_job(self, job_id: str, *, events: Optional[int] = None) -> Resume:
        """Everything needed to carry on: checkpoint, completed/in-flight/failed steps, handoffs, events."""
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}/resume", params={"events": events})

    # ---- steps -------------------------------------------------------------------------

    def start_step(self, job_id: str, step_id: str, *, owner: str, lease_seconds: Optional[int] = None,
                         input: Optional[Dict[str, Any]] = None, idempotency_key: Optional[str] = None) -> Claim:
        """Claim a step's lease (``status`` ``claimed``) or get its stored result (``completed``).

        A live lease held by another owner raises Conflict (``current`` has ``holder`` and ``until``).
        """
        body = _drop_none({"owner": owner, "lease_seconds": lease_seconds, "input": input})
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}/start", json=body,
                                idempotency_key=idempotency_key)

    def heartbeat_step(self, job_id: str, step_id: str, fencing_token: int, *,
                             lease_seconds: Optional[int] = None) -> Step:
        """Extend the lease; a stale token raises Conflict."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}/heartbeat",
                                json=_drop_none({"fencing_token": fencing_token, "lease_seconds": lease_seconds}))

    def complete_step(self, job_id: str, step_id: str, fencing_token: int, result: JSON = None, *,
                            idempotency_key: Optional[str] = None) -> Step:
        """Complete a step under its fencing token; a stale token raises Conflict."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}/complete",
                                json={"fencing_token": fencing_token, "result": result}, idempotency_key=idempotency_key)

    def fail_step(self, job_id: str, step_id: str, fencing_token: int, error: str, *,
                        disposition: Disposition = "retryable", idempotency_key: Optional[str] = None) -> Step:
        """Fail a step: ``retryable`` (the next start claims it) or ``manual_review`` (an admin clears it)."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}/fail",
                                json={"fencing_token": fencing_token, "error": error, "disposition": disposition},
                                idempotency_key=idempotency_key)

    def clear_step(self, job_id: str, step_id: str) -> Step:
        """Release a manual_review failure (admin key)."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}/clear", has_body=False)

    def get_step(self, job_id: str, step_id: str) -> Step:
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}/steps/{_seg(step_id)}")

    def list_steps(self, job_id: str, *, limit: Optional[int] = None) -> Iterator[Step]:
        return self._paginate(f"/v1/jobs/{_seg(job_id)}/steps", {"limit": limit})

    # ---- checkpoints ------------------------------------------------------------------

    def put_checkpoint(self, job_id: str, *, if_match: Optional[ETag] = None, goal: Optional[str] = None,
                             current_step: Optional[str] = None, done: JSON = None, pending: JSON = None,
                             next_action: Optional[str] = None, state: JSON = None, working_state: JSON = None,
                             agent_id: Optional[str] = None, user_id: Optional[str] = None,
                             idempotency_key: Optional[str] = None) -> Checkpoint:
        """Write the next checkpoint version. ``if_match`` = the version you resumed from
        (0 for the first); someone else's checkpoint in between raises Conflict. Without
        ``if_match`` only a job's first checkpoint is written: on a job that has one the server
        answers 428 (PreconditionRequired). ``if_match="*"`` overwrites whatever the latest is."""
        body = _drop_none({"goal": goal, "current_step": current_step, "done": done, "pending": pending,
                           "next_action": next_action, "state": state, "working_state": working_state,
                           "agent_id": agent_id, "user_id": user_id})
        return self._call("PUT", f"/v1/jobs/{_seg(job_id)}/checkpoint", json=body, if_match=if_match,
                                idempotency_key=idempotency_key)

    def list_checkpoints(self, job_id: str, *, order: Optional[str] = None,
                         limit: Optional[int] = None) -> Iterator[Checkpoint]:
        """Checkpoint summaries (``order="desc"``: newest first)."""
        return self._paginate(f"/v1/jobs/{_seg(job_id)}/checkpoints", {"order": order, "limit": limit})

    def get_checkpoint(self, job_id: str, version: int) -> Checkpoint:
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}/checkpoints/{int(version)}")

    def fork_checkpoint(self, job_id: str, version: int, new_job_id: str, *, owner: Optional[str] = None,
                              idempotency_key: Optional[str] = None) -> Fork:
        """Start a new running job from checkpoint ``version`` (time travel / branch)."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/checkpoints/{int(version)}/fork",
                                json=_drop_none({"new_job_id": new_job_id, "owner": owner}),
                                idempotency_key=idempotency_key)

    # ---- events ------------------------------------------------------------------------

    def append_event(self, job_id: str, op: str, params: Optional[Dict[str, Any]] = None, *, result: JSON = None,
                           event_key: Optional[str] = None, agent_id: Optional[str] = None,
                           user_id: Optional[str] = None, session_id: Optional[str] = None,
                           idempotency_key: Optional[str] = None) -> Event:
        """Append one event to the job's log. ``event_key`` (the event's own idempotency_key)
        makes the append happen once per job however often it is sent (``replayed`` is then true)."""
        body = _drop_none({"op": op, "params": params, "result": result, "idempotency_key": event_key,
                           "agent_id": agent_id, "user_id": user_id, "session_id": session_id})
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/events", json=body, idempotency_key=idempotency_key)

    def append_events(self, job_id: str, events: List[Dict[str, Any]], *,
                            idempotency_key: Optional[str] = None) -> List[Event]:
        """Append several events in one transaction (dicts with op, params, result, idempotency_key...)."""
        out = self._call("POST", f"/v1/jobs/{_seg(job_id)}/events", json=list(events),
                               idempotency_key=idempotency_key)
        return list(out.get("items") or [])

    def list_events(self, job_id: str, *, after_seq: Optional[int] = None, op: Optional[str] = None,
                    since: Optional[str] = None, until: Optional[str] = None, raw: Optional[bool] = None,
                    limit: Optional[int] = None) -> Iterator[Event]:
        return self._paginate(f"/v1/jobs/{_seg(job_id)}/events", {"after_seq": after_seq, "op": op, "since": since,
                                                                   "until": until, "raw": raw, "limit": limit})

    def applied(self, job_id: str, op: Optional[str] = None, params: Optional[Dict[str, Any]] = None, *,
                      fingerprint: Optional[str] = None) -> Applied:
        """Has the job already applied ``op`` with exactly these ``params`` (not reverted)?"""
        q: Dict[str, Any] = {"fingerprint": fingerprint}
        if op is not None:
            q["op"] = op
            q["params"] = _json.dumps(params or {}, separators=(",", ":"), ensure_ascii=False)
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}/applied", params=q)

    def revert_event(self, job_id: str, seq: int, *, reason: Optional[str] = None, agent_id: Optional[str] = None,
                           idempotency_key: Optional[str] = None) -> Event:
        """Append a revert event for event ``seq`` (``applied`` then answers false for it)."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/events/{int(seq)}/revert",
                                json=_drop_none({"reason": reason, "agent_id": agent_id}), idempotency_key=idempotency_key)

    # ---- handoffs ----------------------------------------------------------------------

    def create_handoff(self, job_id: str, *, from_agent: str, to_agent: str, context: JSON = None,
                             handoff_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> Handoff:
        """Offer the job to ``to_agent``; pending until it acknowledges."""
        body = _drop_none({"from": from_agent, "to": to_agent, "context": context, "id": handoff_id})
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/handoffs", json=body, idempotency_key=idempotency_key)

    def list_handoffs(self, job_id: str, *, status: Optional[str] = None,
                      limit: Optional[int] = None) -> Iterator[Handoff]:
        return self._paginate(f"/v1/jobs/{_seg(job_id)}/handoffs", {"status": status, "limit": limit})

    def ack_handoff(self, job_id: str, handoff_id: str, agent_id: str, *,
                          idempotency_key: Optional[str] = None) -> HandoffAck:
        """Accept a handoff: the job's owner becomes ``agent_id`` and in-flight leases move to it."""
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/handoffs/{_seg(handoff_id)}/ack",
                                json={"agent_id": agent_id}, idempotency_key=idempotency_key)

    # ---- assets ------------------------------------------------------------------------

    def put_asset(self, asset_id: str, uri: str, *, if_match: Optional[ETag] = None, sha256: Optional[str] = None,
                        media_type: Optional[str] = None, metadata: JSON = None, job_id: Optional[str] = None,
                        seq: Optional[int] = None, user_id: Optional[str] = None, agent_id: Optional[str] = None,
                        session_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> Asset:
        """Write an asset's next version at its stable address."""
        body = _drop_none({"uri": uri, "sha256": sha256, "media_type": media_type, "metadata": metadata, "job_id": job_id,
                           "seq": seq, "user_id": user_id, "agent_id": agent_id, "session_id": session_id})
        return self._call("PUT", f"/v1/assets/{_seg(asset_id)}", json=body, if_match=if_match,
                                idempotency_key=idempotency_key)

    def get_asset(self, asset_id: str) -> Asset:
        return self._call("GET", f"/v1/assets/{_seg(asset_id)}")

    def add_asset_version(self, asset_id: str, uri: str, *, parent_version: Optional[int] = None,
                                sha256: Optional[str] = None, media_type: Optional[str] = None, metadata: JSON = None,
                                job_id: Optional[str] = None, seq: Optional[int] = None,
                                user_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> Asset:
        """Add a version replacing ``parent_version`` (a stale parent raises Conflict)."""
        body = _drop_none({"uri": uri, "parent_version": parent_version, "sha256": sha256, "media_type": media_type,
                           "metadata": metadata, "job_id": job_id, "seq": seq, "user_id": user_id})
        return self._call("POST", f"/v1/assets/{_seg(asset_id)}/versions", json=body,
                                idempotency_key=idempotency_key)

    def list_asset_versions(self, asset_id: str, *, limit: Optional[int] = None) -> Iterator[Asset]:
        return self._paginate(f"/v1/assets/{_seg(asset_id)}/versions", {"limit": limit})

    # ---- semantic memory ---------------------------------------------------------------

    def create_memory(self, text: str, *, kind: Optional[str] = None, trust: Optional[str] = None,
                            importance: Optional[float] = None, pinned: Optional[bool] = None,
                            metadata: Optional[Dict[str, Any]] = None, provenance: Optional[Dict[str, Any]] = None,
                            user_id: Optional[str] = None, agent_id: Optional[str] = None,
                            session_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> Memory:
        """Store a memory (deduplicated against the scope: ``deduplicated`` says so)."""
        body = _drop_none({"text": text, "kind": kind, "trust": trust, "importance": importance, "pinned": pinned,
                           "metadata": metadata, "provenance": provenance, "user_id": user_id, "agent_id": agent_id,
                           "session_id": session_id})
        return self._call("POST", "/v1/memories", json=body, idempotency_key=idempotency_key)

    def search_memories(self, query: str, *, top_k: Optional[int] = None, user_id: Optional[str] = None,
                              agent_id: Optional[str] = None, session_id: Optional[str] = None,
                              kinds: Optional[List[str]] = None, trust: Optional[List[str]] = None,
                              **filters: Any) -> SearchResult:
        """Hybrid search (vector + full text). Extra keyword filters are passed as-is
        (``metadata``, ``as_of``, ``exclude_stale``, ``provenance``...)."""
        body = _drop_none({"query": query, "top_k": top_k, "user_id": user_id, "agent_id": agent_id,
                           "session_id": session_id, "kinds": kinds, "trust": trust, **filters})
        return _hits(self._call("POST", "/v1/memories/search", json=body))

    def get_memory(self, memory_id: str) -> Memory:
        return self._call("GET", f"/v1/memories/{_seg(memory_id)}")

    def update_memory(self, memory_id: str, *, if_match: Optional[ETag] = None, text: Optional[str] = None,
                            metadata: Optional[Dict[str, Any]] = None, importance: Optional[float] = None,
                            pinned: Optional[bool] = None, trust: Optional[str] = None,
                            idempotency_key: Optional[str] = None) -> Memory:
        """Write a new version of a memory (the old one stays in its history)."""
        body = _drop_none({"text": text, "metadata": metadata, "importance": importance, "pinned": pinned, "trust": trust})
        return self._call("PATCH", f"/v1/memories/{_seg(memory_id)}", json=body, if_match=if_match,
                                idempotency_key=idempotency_key)

    def delete_memory(self, memory_id: str) -> Dict[str, Any]:
        """Delete a memory and every version of it."""
        return self._call("DELETE", f"/v1/memories/{_seg(memory_id)}")

    def memory_history(self, memory_id: str) -> Iterator[Memory]:
        """Every version of a memory, following next_cursor."""
        return self._paginate(f"/v1/memories/{_seg(memory_id)}/history")

    def verify_memory(self, memory_id: str) -> Memory:
        """Mark a memory as verified now (resets its staleness)."""
        return self._call("POST", f"/v1/memories/{_seg(memory_id)}/verify", has_body=False)

    # ---- graph memory: entities and relations (docs/graph.md) --------------------------

    def resolve_entity(self, name: str, *, type: Optional[str] = None, aliases: Optional[List[str]] = None,
                             summary: Optional[str] = None, user_id: Optional[str] = None,
                             agent_id: Optional[str] = None, session_id: Optional[str] = None,
                             source_memory_id: Optional[str] = None,
                             idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """Find the entity of the scope whose name or an alias matches, or create it
        (``created`` says which); the server embeds name + summary."""
        body = _drop_none({"name": name, "type": type, "aliases": aliases, "summary": summary, "user_id": user_id,
                           "agent_id": agent_id, "session_id": session_id, "source_memory_id": source_memory_id})
        return self._call("POST", "/v1/graph/entities", json=body, idempotency_key=idempotency_key)

    def add_relation(self, subject_id: str, predicate: str, *, object_id: Optional[str] = None,
                           object_value: Optional[str] = None, functional: Optional[bool] = None,
                           fact: Optional[str] = None, valid_from: Optional[str] = None,
                           valid_to: Optional[str] = None, user_id: Optional[str] = None,
                           agent_id: Optional[str] = None, session_id: Optional[str] = None,
                           source_memory_id: Optional[str] = None, provenance: Optional[Dict[str, Any]] = None,
                           idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """Add subject -predicate-> object (an entity id or a literal value). A functional
        relation closes the one in force it contradicts (``closed`` lists them)."""
        body = _drop_none({"subject_id": subject_id, "predicate": predicate, "object_id": object_id,
                           "object_value": object_value, "functional": functional, "fact": fact,
                           "valid_from": valid_from, "valid_to": valid_to, "user_id": user_id,
                           "agent_id": agent_id, "session_id": session_id, "source_memory_id": source_memory_id,
                           "provenance": provenance})
        return self._call("POST", "/v1/graph/relations", json=body, idempotency_key=idempotency_key)

    def search_entities(self, q: str, *, limit: Optional[int] = None, user_id: Optional[str] = None,
                              agent_id: Optional[str] = None, session_id: Optional[str] = None) -> List[Dict[str, Any]]:
        """Entities by name, alias or description (an exact name or alias first)."""
        params = _drop_none({"q": q, "limit": limit, "user_id": user_id, "agent_id": agent_id,
                             "session_id": session_id})
        res = self._call("GET", "/v1/graph/entities", params=params)
        return list(res.get("items") or [])

    def entity(self, entity_id: str, *, as_of: Optional[str] = None, recorded_as_of: Optional[str] = None,
                     limit: Optional[int] = None) -> Dict[str, Any]:
        """An entity and its relations in force, or true at ``as_of`` (RFC 3339) as Strata
        knew them at ``recorded_as_of``."""
        params = _drop_none({"as_of": as_of, "recorded_as_of": recorded_as_of, "limit": limit})
        return self._call("GET", f"/v1/graph/entities/{_seg(entity_id)}", params=params)

    def entity_neighbors(self, entity_id: str, *, depth: Optional[int] = None, as_of: Optional[str] = None,
                               limit: Optional[int] = None, user_id: Optional[str] = None,
                               agent_id: Optional[str] = None, session_id: Optional[str] = None) -> List[Dict[str, Any]]:
        """Entities within ``depth`` (1-3) relations, nearest first."""
        params = _drop_none({"depth": depth, "as_of": as_of, "limit": limit, "user_id": user_id,
                             "agent_id": agent_id, "session_id": session_id})
        res = self._call("GET", f"/v1/graph/entities/{_seg(entity_id)}/neighbors", params=params)
        return list(res.get("items") or [])

    def entity_history(self, entity_id: str, *, predicate: Optional[str] = None,
                       limit: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Every version of the entity's relations, closed ones included, page after page."""
        return self._paginate(f"/v1/graph/entities/{_seg(entity_id)}/history",
                              _drop_none({"predicate": predicate, "limit": limit}))

    def merge_entity(self, entity_id: str, into: str) -> Dict[str, Any]:
        """Merge ``entity_id`` into ``into`` (admin keys)."""
        return self._call("POST", f"/v1/graph/entities/{_seg(entity_id)}/merge", json={"into": into})

    def split_entity(self, entity_id: str, name: str, *, type: Optional[str] = None,
                           aliases: Optional[List[str]] = None, relations: Optional[List[str]] = None) -> Dict[str, Any]:
        """Move aliases and relations of ``entity_id`` to a new entity ``name`` (admin keys)."""
        body = _drop_none({"name": name, "type": type, "aliases": aliases, "relations": relations})
        return self._call("POST", f"/v1/graph/entities/{_seg(entity_id)}/split", json=body)

    def delete_entity(self, entity_id: str) -> Dict[str, Any]:
        """Delete an entity with every relation version naming it (counts in the answer)."""
        return self._call("DELETE", f"/v1/graph/entities/{_seg(entity_id)}")

    # ---- key-value ---------------------------------------------------------------------

    def put_kv(self, namespace: str, key: str, value: JSON, *, if_match: Optional[ETag] = None,
                     if_none_match: bool = False, ttl_seconds: Optional[int] = None, user_id: Optional[str] = None,
                     agent_id: Optional[str] = None, session_id: Optional[str] = None,
                     idempotency_key: Optional[str] = None) -> KVEntry:
        """Write a key (``if_none_match=True``: only if absent)."""
        body = _drop_none({"ttl_seconds": ttl_seconds, "user_id": user_id, "agent_id": agent_id, "session_id": session_id})
        body["value"] = value
        return self._call("PUT", f"/v1/kv/{_seg(namespace)}/{_seg(key)}", json=body, if_match=if_match,
                                headers={"If-None-Match": "*"} if if_none_match else None,
                                idempotency_key=idempotency_key)

    def get_kv(self, namespace: str, key: str, *, user_id: Optional[str] = None, agent_id: Optional[str] = None,
                     session_id: Optional[str] = None, exact: Optional[bool] = None) -> KVEntry:
        """Read a key, resolved from the most specific level (session > agent > user > org) unless ``exact``."""
        return self._call("GET", f"/v1/kv/{_seg(namespace)}/{_seg(key)}",
                                params={"user_id": user_id, "agent_id": agent_id, "session_id": session_id, "exact": exact})

    def delete_kv(self, namespace: str, key: str, *, if_match: Optional[ETag] = None,
                        user_id: Optional[str] = None, agent_id: Optional[str] = None,
                        session_id: Optional[str] = None) -> KVEntry:
        return self._call("DELETE", f"/v1/kv/{_seg(namespace)}/{_seg(key)}", if_match=if_match,
                                params={"user_id": user_id, "agent_id": agent_id, "session_id": session_id})

    def kv_history(self, namespace: str, key: str, *, user_id: Optional[str] = None, agent_id: Optional[str] = None,
                   session_id: Optional[str] = None, limit: Optional[int] = None) -> Iterator[KVEntry]:
        return self._paginate(f"/v1/kv/{_seg(namespace)}/{_seg(key)}/history",
                              {"user_id": user_id, "agent_id": agent_id, "session_id": session_id, "limit": limit})

    def list_kv(self, namespace: str, *, user_id: Optional[str] = None, agent_id: Optional[str] = None,
                session_id: Optional[str] = None, resolve: Optional[bool] = None,
                limit: Optional[int] = None) -> Iterator[KVEntry]:
        return self._paginate(f"/v1/kv/{_seg(namespace)}", {"user_id": user_id, "agent_id": agent_id,
                                                            "session_id": session_id, "resolve": resolve, "limit": limit})

    # ---- context and tools -------------------------------------------------------------

    def context(self, *, query: Optional[str] = None, max_tokens: Optional[int] = None,
                      model: Optional[str] = None, job_id: Optional[str] = None, session_id: Optional[str] = None,
                      user_id: Optional[str] = None, agent_id: Optional[str] = None,
                      kv_namespaces: Optional[List[str]] = None, **options: Any) -> Context:
        """A token-budgeted prompt of the job, working state, preferences, memories and similar jobs."""
        body = _drop_none({"query": query, "max_tokens": max_tokens, "model": model, "job_id": job_id,
                           "session_id": session_id, "user_id": user_id, "agent_id": agent_id,
                           "kv_namespaces": kv_namespaces, **options})
        return self._call("POST", "/v1/context", json=body)

    def tools(self) -> List[Dict[str, Any]]:
        """The agent tools as OpenAI function-calling schemas."""
        out = self._call("GET", "/v1/tools")
        return list(out.get("items") or [])

    # ---- GDPR (compliance key) ---------------------------------------------------------

    def erase(self, user_id: str, *, reason: Optional[str] = None,
                    idempotency_key: Optional[str] = None) -> Erasure:
        """Request erasure of a data subject (Art. 17); runs in the background."""
        return self._call("POST", "/v1/gdpr/erasures", json=_drop_none({"user_id": user_id, "reason": reason}),
                                idempotency_key=idempotency_key)

    def get_erasure(self, erasure_id: str) -> Erasure:
        return self._call("GET", f"/v1/gdpr/erasures/{_seg(erasure_id)}")

    def list_erasures(self, *, user_id: Optional[str] = None, limit: Optional[int] = None) -> Iterator[Erasure]:
        return self._paginate("/v1/gdpr/erasures", {"user_id": user_id, "limit": limit})

    def wait_erasure(self, erasure_id: str, *, interval: float = 0.5, timeout: Optional[float] = None,
                           progress: Optional[Callable[[Erasure], Any]] = None) -> Erasure:
        """Poll until the erasure completed or failed, calling ``progress(erasure)`` on every read."""
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            e = self.get_erasure(erasure_id)
            if progress is not None:
                progress(e)
            if e.get("status") in ("completed", "failed"):
                return e
            if deadline is not None and monotonic() >= deadline:
                raise TimeoutError(f"erasure {erasure_id} still {e.get('status')} after {timeout}s; "
                                   f"poll it again with get_erasure({erasure_id!r})")
            time.sleep(interval)

    def erase_and_wait(self, user_id: str, *, reason: Optional[str] = None, interval: float = 0.5,
                             timeout: Optional[float] = None,
                             progress: Optional[Callable[[Erasure], Any]] = None) -> Erasure:
        """Request an erasure and wait for its receipt (``verification.clean``)."""
        e = self.erase(user_id, reason=reason)
        return self.wait_erasure(e["id"], interval=interval, timeout=timeout, progress=progress)

    def export_subject(self, user_id: str, path: Union[str, "os.PathLike[str]"]) -> ExportSummary:
        """Stream a data subject's export (Art. 15/20, NDJSON) into the file at ``path``.

        Memory stays bounded however large the export; the file is fsync'd before returning.
        """
        url = self.base_url + "/v1/gdpr/exports"
        attempt = 0
        while True:
            attempt += 1
            n, lines, last = 0, 0, b""
            try:
                with self._http.stream("GET", url, params={"user_id": user_id}, headers=_trace.inject(dict(self._headers))) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        if attempt <= self.max_retries and self._retryable("GET", False, resp):
                            time.sleep(self._delay(attempt, resp))
                            continue
                        raise self._error(resp, "GET", "/v1/gdpr/exports")
                    with open(path, "wb") as f:
                        tail = b""
                        for chunk in resp.iter_bytes():
                            f.write(chunk)
                            n += len(chunk)
                            lines += chunk.count(b"\n")
                            tail = (tail + chunk)[-65536:]
                        f.flush()
                        os.fsync(f.fileno())
                    stripped = tail.rstrip(b"\n")
                    last = stripped.rsplit(b"\n", 1)[-1] if stripped else b""
            except httpx.TransportError as exc:
                if attempt > self.max_retries:
                    raise errors.Unavailable(0, f"export stream from {self.base_url} broke: {exc!r}; call export_subject again",
                                             method="GET", path="/v1/gdpr/exports") from exc
                time.sleep(self._delay(attempt, None))
                continue
            summary: Dict[str, Any] = {}
            try:
                summary = _json.loads(last) if last else {}
            except ValueError:
                pass
            return {"path": os.fspath(path), "bytes": n, "lines": lines, "summary": summary}

    def restrict(self, user_id: str, *, reason: Optional[str] = None,
                       idempotency_key: Optional[str] = None) -> Restriction:
        """Restrict processing of a subject (Art. 18): agents' reads and writes for it are refused."""
        return self._call("POST", f"/v1/gdpr/restrictions/{_seg(user_id)}", json=_drop_none({"reason": reason}),
                                idempotency_key=idempotency_key)

    def lift_restriction(self, user_id: str) -> Restriction:
        return self._call("DELETE", f"/v1/gdpr/restrictions/{_seg(user_id)}")

    def get_restriction(self, user_id: str) -> Restriction:
        return self._call("GET", f"/v1/gdpr/restrictions/{_seg(user_id)}")

    def rectify(self, user_id: str, *, memory: Optional[Dict[str, Any]] = None, kv: Optional[Dict[str, Any]] = None,
                      reason: Optional[str] = None, idempotency_key: Optional[str] = None) -> Rectification:
        """Correct a subject's data (Art. 16): ``memory={"id", "text"?, "metadata"?}`` or
        ``kv={"namespace", "key", "value", "agent_id"?, "session_id"?}``."""
        body = _drop_none({"user_id": user_id, "memory": memory, "kv": kv, "reason": reason})
        return self._call("POST", "/v1/gdpr/rectifications", json=body, idempotency_key=idempotency_key)

    # ---- audit (compliance key) --------------------------------------------------------

    def list_audit(self, *, action: Optional[str] = None, entity_type: Optional[str] = None,
                   entity_id: Optional[str] = None, actor_key_id: Optional[str] = None, agent_id: Optional[str] = None,
                   user_id: Optional[str] = None, since: Optional[str] = None, until: Optional[str] = None,
                   limit: Optional[int] = None) -> Iterator[AuditRecord]:
        return self._paginate("/v1/audit", {"action": action, "entity_type": entity_type, "entity_id": entity_id,
                                            "actor_key_id": actor_key_id, "agent_id": agent_id, "user_id": user_id,
                                            "since": since, "until": until, "limit": limit})

    def verify_audit(self) -> AuditVerify:
        """Re-check the org's audit hash chain (``ok``, ``first_broken``)."""
        return self._call("GET", "/v1/audit/verify")

    # ---- admin (admin key) -------------------------------------------------------------

    def create_key(self, org_id: str, role: Role, *, name: Optional[str] = None,
                         idempotency_key: Optional[str] = None) -> ApiKey:
        """Create an API key; ``key`` in the answer is shown once."""
        return self._call("POST", "/v1/admin/keys", json=_drop_none({"org_id": org_id, "role": role, "name": name}),
                                idempotency_key=idempotency_key)

    def list_keys(self, *, org_id: Optional[str] = None, limit: Optional[int] = None) -> Iterator[ApiKey]:
        return self._paginate("/v1/admin/keys", {"org_id": org_id, "limit": limit})

    def revoke_key(self, key_id: str) -> ApiKey:
        return self._call("DELETE", f"/v1/admin/keys/{_seg(key_id)}")
