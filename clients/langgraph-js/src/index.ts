import {
  BaseCheckpointSaver,
  TASKS,
  WRITES_IDX_MAP,
  maxChannelVersion,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import type { RunnableConfig } from "@langchain/core/runnables";
import { randomUUID } from "node:crypto";
import { fetchSend, nodeSend, type Answer, type Send } from "./http.js";

/** Options of {@link StrataSaver}. */
export interface StrataSaverOptions {
  /** Strata's base URL. Default: $STRATA_URL, else http://localhost:8080. */
  url?: string;
  /** An agent API key. Default: $STRATA_API_KEY. */
  apiKey?: string;
  /** LangGraph's serializer (default: JsonPlusSerializer). */
  serde?: SerializerProtocol;
  /**
   * The data subject of the threads this saver writes (Strata's user_id: GDPR erasure and
   * export find the thread by it). Default: config.configurable.user_id, else metadata.user_id.
   */
  userId?: string;
  /** Recorded with every write (audit). */
  agentId?: string;
  sessionId?: string;
  /** Attempts per call when Strata is unreachable or answers 5xx/429 (default 6). */
  maxAttempts?: number;
  /**
   * Send an Idempotency-Key with every write (default true), so a retried call replays the
   * first answer. Strata's LangGraph writes are also idempotent by construction (upserts keyed
   * by the ids LangGraph chooses), so false is safe too and saves three statements per write
   * (see docs/benchmarks.md).
   */
  idempotencyKeys?: boolean;
  /** Per-request timeout in ms (default 30000). */
  timeoutMs?: number;
  /**
   * fetch implementation. Default: Node's own http client on a keep-alive connection pool,
   * which costs about half the CPU of the global fetch per call (docs/benchmarks.md).
   */
  fetch?: typeof fetch;
}

/** An error answer of the Strata API (RFC 9457 problem). */
export class StrataError extends Error {
  constructor(
    readonly status: number,
    readonly problem: unknown,
    message: string,
  ) {
    super(message);
    this.name = "StrataError";
  }
}

interface WireValue {
  channel: string;
  type: string;
  data?: string | null;
}

interface WireWrite {
  task_id: string;
  channel: string;
  type: string;
  data?: string | null;
}

interface WireTuple {
  thread_id: string;
  checkpoint_ns: string;
  checkpoint_id: string;
  parent_checkpoint_id?: string;
  checkpoint: Omit<Checkpoint, "channel_values">;
  metadata: Record<string, unknown>;
  channel_values: WireValue[];
  pending_writes: WireWrite[];
  pending_sends?: WireValue[];
}

const JOB_ID = /^[A-Za-z0-9._:-]{1,200}$/;
const ENCODED = "lg64.";

/**
 * The Strata job id of a LangGraph thread: the thread id itself when it is a valid job id
 * (1-200 of A-Z a-z 0-9 . _ : -), else "lg64." + its base64url.
 */
export function threadToJob(threadId: string): string {
  if (JOB_ID.test(threadId) && !threadId.startsWith(ENCODED)) return threadId;
  const job = ENCODED + Buffer.from(threadId, "utf8").toString("base64url");
  if (job.length > 200) {
    throw new Error(`thread_id is too long for Strata (${threadId.length} characters; encoded job id over 200)`);
  }
  return job;
}

/** The LangGraph thread id of a Strata job id (inverse of {@link threadToJob}). */
export function jobToThread(jobId: string): string {
  return jobId.startsWith(ENCODED) ? Buffer.from(jobId.slice(ENCODED.length), "base64url").toString("utf8") : jobId;
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
const unb64 = (s?: string | null) => new Uint8Array(Buffer.from(s ?? "", "base64"));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A LangGraph checkpointer that keeps threads in Strata. A thread is a Strata job (same id),
 * so it gets resume, audit, retention and GDPR erasure. Writes are retried with one
 * Idempotency-Key per call, so a retry after a timeout or a server restart never applies twice.
 *
 * ```ts
 * const checkpointer = new StrataSaver({ url: process.env.STRATA_URL, apiKey: process.env.STRATA_API_KEY });
 * const graph = builder.compile({ checkpointer });
 * ```
 */
export class StrataSaver extends BaseCheckpointSaver {
  readonly url: string;
  private readonly apiKey: string;
  private readonly opts: StrataSaverOptions;
  private readonly send: Send;

  constructor(options: StrataSaverOptions = {}) {
    super(options.serde);
    this.opts = options;
    this.url = (options.url ?? process.env.STRATA_URL ?? "http://localhost:8080").replace(/\/+$/, "");
    const key = options.apiKey ?? process.env.STRATA_API_KEY;
    if (!key) throw new Error("StrataSaver needs an API key: pass apiKey or set STRATA_API_KEY");
    this.apiKey = key;
    this.send = options.fetch ? fetchSend(options.fetch) : nodeSend;
  }

  // ---- HTTP -------------------------------------------------------------------------------

  private async request(
    method: string,
    path: string,
    body?: unknown,
    opts: { notFound?: boolean; minimal?: boolean } = {},
  ): Promise<any> {
    const attempts = Math.max(1, this.opts.maxAttempts ?? 6);
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}` };
    // A write whose answer the saver does not read: Strata answers 204 and stores it in one
    // round trip to Postgres (statement, audit row, idempotency record and COMMIT together).
    if (opts.minimal) headers["Prefer"] = "return=minimal";
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    if ((method === "POST" || method === "PUT") && this.opts.idempotencyKeys !== false) {
      headers["Idempotency-Key"] = randomUUID(); // one per call, the same on every retry
    }
    let lastErr: unknown;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      let res: Answer;
      try {
        res = await this.send(method, this.url + path, headers, payload, this.opts.timeoutMs ?? 30000);
      } catch (e) {
        lastErr = e; // refused, reset, timed out: the write may or may not have landed; the key makes the retry safe
        if (attempt < attempts) await sleep(backoff(attempt));
        continue;
      }
      if (res.status === 404 && opts.notFound) return undefined;
      const text = res.text;
      if (res.status >= 200 && res.status < 300) return text ? JSON.parse(text) : undefined;
      const retryAfter = res.retryAfter;
      const transient = res.status >= 500 || res.status === 429 || (res.status === 409 && retryAfter !== null);
      let problem: any = text;
      try {
        problem = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      const err = new StrataError(
        res.status,
        problem,
        `Strata ${method} ${path}: ${res.status} ${problem?.detail ?? problem?.title ?? text}`,
      );
      if (!transient) throw err;
      lastErr = err;
      if (attempt < attempts) await sleep(Math.max(backoff(attempt), Number(retryAfter ?? 0) * 1000));
    }
    throw lastErr;
  }

  private jobPath(threadId: unknown): string {
    return `/v1/jobs/${encodeURIComponent(threadToJob(String(threadId)))}`;
  }

  private scope(config: RunnableConfig, metadata?: CheckpointMetadata): Record<string, string> {
    const out: Record<string, string> = {};
    const user = this.opts.userId ?? config.configurable?.user_id ?? (metadata as any)?.user_id;
    if (typeof user === "string" && user !== "") out.user_id = user;
    if (this.opts.agentId) out.agent_id = this.opts.agentId;
    if (this.opts.sessionId) out.session_id = this.opts.sessionId;
    return out;
  }

  // ---- BaseCheckpointSaver ------------------------------------------------------------------

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable ?? {};
    if (thread_id === undefined || thread_id === null || thread_id === "") return undefined;
    const q = new URLSearchParams({ checkpoint_ns });
    if (checkpoint_id) q.set("checkpoint_id", checkpoint_id);
    const t: WireTuple | undefined = await this.request("GET", `${this.jobPath(thread_id)}/langgraph/checkpoint?${q}`, undefined, {
      notFound: true,
    });
    return t === undefined ? undefined : this.toTuple(t, thread_id);
  }

  async *list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple> {
    const { filter, before, limit } = options ?? {};
    if (limit !== undefined && limit <= 0) return;
    const { thread_id, checkpoint_ns, checkpoint_id } = config?.configurable ?? {};
    const hasThread = thread_id !== undefined && thread_id !== null && thread_id !== "";
    const base = hasThread ? `${this.jobPath(thread_id)}/langgraph/checkpoints` : `/v1/langgraph/checkpoints`;
    const q = new URLSearchParams();
    if (checkpoint_ns !== undefined && checkpoint_ns !== null) q.set("checkpoint_ns", checkpoint_ns);
    if (checkpoint_id) q.set("checkpoint_id", checkpoint_id);
    if (before?.configurable?.checkpoint_id !== undefined) q.set("before", before.configurable.checkpoint_id);
    if (filter && Object.keys(filter).length > 0) q.set("filter", JSON.stringify(filter));
    let remaining = limit ?? Infinity;
    let cursor: string | undefined;
    do {
      q.set("limit", String(Math.min(remaining, 1000)));
      if (cursor) q.set("cursor", cursor);
      const page: { items: WireTuple[]; next_cursor?: string } = await this.request("GET", `${base}?${q}`);
      for (const t of page.items) {
        yield await this.toTuple(t, hasThread ? thread_id : jobToThread(t.thread_id));
        remaining--;
      }
      cursor = page.next_cursor;
    } while (cursor && remaining > 0);
  }

  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    if (config.configurable === undefined) throw new Error(`Missing "configurable" field in "config" param`);
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable;
    if (thread_id === undefined || thread_id === null || thread_id === "") {
      throw new Error(`Missing "thread_id" field in "config.configurable" param`);
    }
    const { channel_values: values = {}, ...doc } = checkpoint;
    const blobs = await Promise.all(
      Object.entries(newVersions).map(async ([channel, version]) => {
        if (!(channel in values)) return { channel, version: String(version), type: "empty" };
        const [type, bytes] = await this.serde.dumpsTyped((values as Record<string, unknown>)[channel]);
        return { channel, version: String(version), type, data: b64(bytes) };
      }),
    );
    await this.request("POST", `${this.jobPath(thread_id)}/langgraph/checkpoints`, {
      checkpoint_ns,
      checkpoint_id: checkpoint.id,
      parent_checkpoint_id: checkpoint_id || undefined,
      checkpoint: doc,
      metadata: await this.dumpMetadata(metadata),
      blobs,
      ...this.scope(config, metadata),
    }, { minimal: true });
    return { configurable: { thread_id, checkpoint_ns, checkpoint_id: checkpoint.id } };
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void> {
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable ?? {};
    if (thread_id === undefined || thread_id === null || thread_id === "") {
      throw new Error(`Missing "thread_id" field in "config.configurable" param`);
    }
    if (!checkpoint_id) throw new Error(`Missing "checkpoint_id" field in "config.configurable" param`);
    const dumped = await Promise.all(
      writes.map(async ([channel, value], idx) => {
        const [type, bytes] = await this.serde.dumpsTyped(value);
        return { idx: WRITES_IDX_MAP[channel] ?? idx, channel, type, data: b64(bytes) };
      }),
    );
    await this.request("POST", `${this.jobPath(thread_id)}/langgraph/writes`, {
      checkpoint_ns,
      checkpoint_id,
      task_id: taskId,
      task_path: taskPath || undefined,
      writes: dumped,
      ...this.scope(config),
    }, { minimal: true });
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.request("DELETE", `${this.jobPath(threadId)}/langgraph`);
  }

  /** Nothing to release (HTTP keep-alive connections close on their own). */
  async end(): Promise<void> {}

  // ---- (de)serialization ---------------------------------------------------------------------

  private async dumpMetadata(metadata: CheckpointMetadata): Promise<Record<string, unknown>> {
    // As PostgresSaver: the serializer's JSON, so list can filter by it; NUL dropped (Postgres refuses it).
    const [, bytes] = await this.serde.dumpsTyped(metadata);
    return JSON.parse(new TextDecoder().decode(bytes).replace(/\0/g, ""));
  }

  private async toTuple(t: WireTuple, threadId: string): Promise<CheckpointTuple> {
    const channelValues: Record<string, unknown> = {};
    await Promise.all(
      t.channel_values.map(async (v) => {
        channelValues[v.channel] = await this.serde.loadsTyped(v.type, unb64(v.data));
      }),
    );
    const checkpoint = {
      ...t.checkpoint,
      channel_versions: { ...(t.checkpoint.channel_versions ?? {}) },
      versions_seen: t.checkpoint.versions_seen ?? {},
      channel_values: channelValues,
    } as Checkpoint;
    if (t.pending_sends?.length) {
      // Checkpoints before format 4 kept pending Sends as writes to TASKS on the parent.
      channelValues[TASKS] = await Promise.all(t.pending_sends.map((v) => this.serde.loadsTyped(v.type, unb64(v.data))));
      const versions = Object.values(checkpoint.channel_versions);
      (checkpoint.channel_versions as Record<string, unknown>)[TASKS] =
        versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
    }
    const [type, bytes] = await this.serde.dumpsTyped(t.metadata);
    const pendingWrites: CheckpointPendingWrite[] = await Promise.all(
      t.pending_writes.map(
        async (w) => [w.task_id, w.channel, await this.serde.loadsTyped(w.type, unb64(w.data))] as CheckpointPendingWrite,
      ),
    );
    const ns = t.checkpoint_ns;
    return {
      config: { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: t.checkpoint_id } },
      checkpoint,
      metadata: await this.serde.loadsTyped(type, bytes),
      parentConfig: t.parent_checkpoint_id
        ? { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: t.parent_checkpoint_id } }
        : undefined,
      pendingWrites,
    };
  }
}

function backoff(attempt: number): number {
  return Math.min(2000, 50 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
}

export { StrataStore, itemToKey, keyToItem, type StrataStoreOptions } from "./store.js";
