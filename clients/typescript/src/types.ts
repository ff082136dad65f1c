/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The user/agent/session a write acts for (the org is the API key's). */
export interface Scope {
  user_id?: string;
  agent_id?: string;
  session_id?: string;
}

export type JobStatus = "running" | "completed" | "failed" | "cancelled";

/** A durable job. */
export interface Job {
  job_id: string;
  version: number;
  goal: string;
  status: JobStatus;
  owner?: string;
  user_id?: string;
  agent_id?: string;
  session_id?: string;
  metadata?: unknown;
  outcome?: unknown;
  checkpoint_version: number;
  parent_job_id?: string;
  parent_version?: number;
  parent_event_seq?: number;
  progress_at: string;
  created_at: string;
  updated_at: string;
  finished_at?: string;
}

/** Creates or updates a job (PUT /v1/jobs/{job}). */
export interface JobSpec extends Scope {
  goal?: string;
  status?: JobStatus;
  owner?: string;
  outcome?: unknown;
  metadata?: unknown;
}

/** What a step runs on, recorded when it is claimed. */
export interface StepInput {
  tool?: string;
  model?: string;
  params?: unknown;
}

export type StepStatus = "running" | "completed" | "failed";
export type Disposition = "retryable" | "manual_review";

/** A step's record. */
export interface Step {
  job_id: string;
  step_id: string;
  status: StepStatus;
  owner: string;
  fencing_token: number;
  attempts: number;
  lease_seconds: number;
  lease_expires_at: string;
  /** "live" or "expired" for running steps. */
  lease?: string;
  input?: unknown;
  result?: unknown;
  error?: string;
  disposition?: Disposition;
  started_at: string;
  heartbeat_at: string;
  finished_at?: string;
  cleared_at?: string;
  cleared_by?: string;
}

/**
 * A step start's answer. `completed`: the step already ran, `result` is its result: do not
 * run it again. `claimed`: you hold the lease; complete or fail it with `fencing_token`.
 */
export interface Claim<R = unknown> {
  status: "claimed" | "completed";
  fencing_token: number;
  result?: R;
  attempt: number;
  lease_expires_at?: string;
  step: Step;
}

export interface StartStepOptions {
  /** Who runs the step (a stable worker id: restarting with the same owner reclaims its lease). */
  owner: string;
  /** Lease length, 1-86400 s (server default 60). */
  leaseSeconds?: number;
  input?: StepInput;
}

/** One event to append to a job's log. */
export interface EventInput extends Scope {
  op: string;
  params?: unknown;
  result?: unknown;
  /** Appending again with the same key returns the original event (survives your own crash). */
  idempotency_key?: string;
}

/** One stored event. */
export interface Event<R = unknown> {
  job_id: string;
  seq: number;
  op: string;
  params: unknown;
  result?: R;
  fingerprint: string;
  agent_id?: string;
  user_id?: string;
  session_id?: string;
  idempotency_key?: string;
  reverts_seq?: number;
  created_at: string;
  /** True when this answer replays an earlier append (same idempotency key). */
  replayed?: boolean;
}

/** GET /v1/jobs/{job}/applied: has exactly this edit been applied? */
export interface Applied<R = unknown> {
  applied: boolean;
  fingerprint: string;
  /** The latest such event; null when not applied. */
  event: Event<R> | null;
}

/** A checkpoint version. */
export interface Checkpoint {
  job_id: string;
  version: number;
  stored_in: string;
  goal: string;
  current_step: string;
  done?: unknown;
  pending?: unknown;
  next_action: string;
  state?: unknown;
  working_state?: unknown;
  event_seq: number;
  agent_id?: string;
  user_id?: string;
  created_at: string;
}

/** A completed step in a resume view. */
export interface CompletedStep {
  step_id: string;
  result: unknown;
  attempts: number;
  fencing_token: number;
  finished_at: string;
}

/** A pending offer of the job to another agent. */
export interface Handoff {
  job_id: string;
  id: string;
  from: string;
  to: string;
  context?: unknown;
  status: string;
  sent_count: number;
  created_at: string;
  last_sent_at: string;
  acked_at?: string;
}

/** GET /v1/jobs/{job}/resume: everything needed to carry on with a job. */
export interface Resume {
  job: Job;
  checkpoint: Checkpoint | null;
  next_action: string;
  working_state?: unknown;
  completed_steps: CompletedStep[];
  in_flight: Step[];
  failed_steps: Step[];
  pending_handoffs: Handoff[];
  steps_truncated?: boolean;
  events: Event[];
  last_event_seq: number;
}

// ---- graph memory (docs/graph.md) ---------------------------------------------------------

/** A person, place, organisation or thing the memory is about. */
export interface Entity extends Scope {
  id: string;
  name: string;
  type?: string;
  aliases: string[];
  summary?: string;
  embedding?: { embedder: string; model: string; dims: number };
  source_memory_ids?: string[];
  /** Set on a tombstone: the entity was merged into this one. */
  merged_into?: string;
  created_at: string;
  updated_at: string;
}

/** An entity to resolve (find by name or alias in its scope, or create). */
export interface EntityInput extends Scope {
  name: string;
  type?: string;
  aliases?: string[];
  summary?: string;
  source_memory_id?: string;
}

/** One version of subject -predicate-> object, with world time (valid_*) and record time. */
export interface Relation extends Scope {
  id: string;
  subject_id: string;
  subject_name?: string;
  predicate: string;
  object_id?: string;
  object_name?: string;
  object_value?: string;
  functional: boolean;
  fact?: string;
  provenance: { memory_id?: string; job_id?: string; event_seq?: number; key_id?: string; agent_id?: string };
  valid_from: string;
  valid_to?: string;
  recorded_at: string;
  superseded_at?: string;
  superseded_by?: string;
}

/** A relation to add: object_id or object_value. */
export interface RelationInput extends Scope {
  subject_id: string;
  predicate: string;
  object_id?: string;
  object_value?: string;
  functional?: boolean;
  fact?: string;
  valid_from?: string;
  valid_to?: string;
  source_memory_id?: string;
  provenance?: { job_id?: string; event_seq?: number; agent_id?: string };
}

/** addRelation's answer: created false when the same relation was in force. */
export interface RelationAdded {
  relation: Relation;
  created: boolean;
  closed: string[];
}

/** One entity search result. */
export interface EntityHit {
  entity: Entity;
  score: number;
  exact?: boolean;
  text_rank?: number;
  vector_rank?: number;
  similarity?: number;
}

/** An entity with its relations as subject or object. */
export interface EntityAbout {
  entity: Entity;
  relations: Relation[];
}

/** An entity reached by a walk, with the path and the relation of the last step. */
export interface Neighbor {
  entity: Entity;
  depth: number;
  path: string[];
  via: Relation;
}
