"""Shapes of Strata's JSON answers (TypedDicts: the values are plain dicts from the API).

Fields follow the server's OpenAPI document (GET /openapi.json, info.version 1.0.0). Keys the
server may omit are optional (``total=False``).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional

if sys.version_info >= (3, 8):
    from typing import Literal, TypedDict
else:  # pragma: no cover
    from typing_extensions import Literal, TypedDict

JSON = Any

JobStatus = Literal["running", "completed", "failed", "cancelled"]
Disposition = Literal["retryable", "manual_review"]
Role = Literal["agent", "compliance", "admin"]
Trust = Literal["verified", "user_stated", "agent_inferred", "tool_output", "consolidated"]


class Job(TypedDict, total=False):
    job_id: str
    goal: str
    status: JobStatus
    owner: str
    outcome: JSON
    metadata: JSON
    user_id: str
    agent_id: str
    session_id: str
    version: int
    checkpoint_version: int
    parent_job_id: str
    parent_version: int
    parent_event_seq: int
    created_at: str
    updated_at: str
    progress_at: str
    finished_at: str
    stalled: Dict[str, Any]


class Step(TypedDict, total=False):
    job_id: str
    step_id: str
    status: Literal["running", "completed", "failed"]
    owner: str
    fencing_token: int
    attempts: int
    lease: Literal["live", "expired"]
    lease_seconds: int
    lease_expires_at: str
    heartbeat_at: str
    input: JSON
    result: JSON
    error: str
    disposition: Disposition
    started_at: str
    finished_at: str
    cleared_at: str
    cleared_by: str


class Claim(TypedDict, total=False):
    status: Literal["claimed", "completed"]
    fencing_token: int
    attempt: int
    lease_expires_at: str
    result: JSON
    step: Step


class Checkpoint(TypedDict, total=False):
    job_id: str
    version: int
    stored_in: str
    goal: str
    current_step: str
    done: JSON
    pending: JSON
    next_action: str
    state: JSON
    working_state: JSON
    event_seq: int
    agent_id: str
    user_id: str
    created_at: str


class Fork(TypedDict):
    job: Job
    checkpoint: Checkpoint


class Event(TypedDict, total=False):
    job_id: str
    seq: int
    op: str
    params: JSON
    result: JSON
    fingerprint: str
    idempotency_key: str
    replayed: bool
    reverts_seq: int
    agent_id: str
    session_id: str
    user_id: str
    created_at: str


class Applied(TypedDict, total=False):
    applied: bool
    fingerprint: str
    event: Optional[Event]


class Resume(TypedDict, total=False):
    job: Job
    checkpoint: Optional[Checkpoint]
    next_action: str
    working_state: JSON
    completed_steps: List[Dict[str, Any]]
    in_flight: List[Dict[str, Any]]
    failed_steps: List[Dict[str, Any]]
    pending_handoffs: List["Handoff"]
    events: List[Event]
    last_event_seq: int
    steps_truncated: bool


class Handoff(TypedDict, total=False):
    id: str
    job_id: str
    status: Literal["pending", "acknowledged"]
    to: str
    context: JSON
    sent_count: int
    created_at: str
    last_sent_at: str
    acked_at: str


class HandoffAck(TypedDict):
    handoff: Handoff
    job: Job


class Asset(TypedDict, total=False):
    asset_id: str
    version: int
    uri: str
    sha256: str
    media_type: str
    metadata: JSON
    parent_version: int
    job_id: str
    seq: int
    agent_id: str
    session_id: str
    user_id: str
    created_at: str
    updated_at: str


class Memory(TypedDict, total=False):
    id: str
    root_id: str
    version: int
    text: str
    kind: str
    trust: str
    importance: float
    pinned: bool
    metadata: Dict[str, Any]
    provenance: Dict[str, Any]
    embedding: Dict[str, Any]
    deduplicated: bool
    dedup: Dict[str, Any]
    dedup_count: int
    access_count: int
    superseded_by: str
    user_id: str
    agent_id: str
    session_id: str
    valid_from: str
    valid_to: str
    updated_at: str
    last_verified_at: str
    last_verified_by: str
    last_accessed_at: str


class SearchHit(TypedDict, total=False):
    memory: Memory
    score: float  # what the hits are ranked by
    breakdown: Dict[str, Any]  # how the score came about: rrf, relevance, vector/text ranks, recency...
    stale: bool


class SearchResult(TypedDict, total=False):
    items: List[SearchHit]
    search: Dict[str, Any]


class KVEntry(TypedDict, total=False):
    namespace: str
    key: str
    value: JSON
    version: int
    level: Literal["org", "user", "agent", "session"]
    deleted: bool
    user_id: str
    agent_id: str
    session_id: str
    expires_at: str
    created_at: str
    updated_at: str
    updated_by: str


class SessionState(TypedDict, total=False):
    session_id: str
    state: JSON
    version: int
    ttl_seconds: int
    restored: bool
    user_id: str
    agent_id: str
    created_at: str
    updated_at: str
    expires_at: str


class Message(TypedDict, total=False):
    session_id: str
    seq: int
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    metadata: JSON
    created_at: str
    expires_at: str


class Context(TypedDict, total=False):
    model: str
    encoding: str
    estimated: bool
    max_tokens: int
    tokens: int
    prompt: str
    sections: List[Dict[str, Any]]
    job: Dict[str, Any]
    kv_namespaces: List[str]
    timings_ms: Dict[str, float]


class Erasure(TypedDict, total=False):
    id: str
    subject: str
    user_id: str
    status: Literal["pending", "running", "completed", "failed"]
    reason: str
    requested_by: str
    requested_at: str
    deadline: str
    started_at: str
    finished_at: str
    counts: Dict[str, Any]
    phases: List[str]
    phases_done: List[str]
    rounds: int
    attempts: int
    verification: Dict[str, Any]
    last_error: str


class Restriction(TypedDict, total=False):
    user_id: str
    restricted: bool
    reason: str
    restricted_at: str
    restricted_by: str


class Rectification(TypedDict, total=False):
    type: Literal["memory", "kv"]
    user_id: str
    previous_version: int
    memory: Memory
    kv: KVEntry


class ExportSummary(TypedDict, total=False):
    path: str
    bytes: int
    lines: int
    summary: Dict[str, Any]


class AuditRecord(TypedDict, total=False):
    id: int
    seq: int
    at: str
    action: str
    status: int
    entity_type: str
    entity_id: str
    actor_key_id: str
    actor_role: str
    agent_id: str
    subject: str
    request_id: str
    details: Dict[str, Any]
    hash: str
    prev_hash: str


class AuditVerify(TypedDict, total=False):
    ok: bool
    checked: int
    head_seq: int
    unchained: int
    first_broken: Dict[str, Any]


class ApiKey(TypedDict, total=False):
    id: str
    org_id: str
    role: Role
    name: str
    prefix: str
    key: str
    created_at: str
    created_by: str
    revoked_at: str
