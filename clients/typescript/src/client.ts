import { errorFor, StrataError, type Problem } from "./errors.js";
import { DurableJob, type DurableJobOptions } from "./durable.js";
import type {
  Applied,
  Claim,
  Disposition,
  Entity,
  EntityAbout,
  EntityHit,
  EntityInput,
  Event,
  EventInput,
  Job,
  JobSpec,
  JobStatus,
  Neighbor,
  Relation,
  RelationAdded,
  RelationInput,
  Resume,
  Scope,
  StartStepOptions,
  Step,
} from "./types.js";

/** Options of {@link Strata}. Every field is optional. */
export interface StrataOptions {
  /** Strata's base URL. Default: $STRATA_URL, else http://localhost:8080. */
  url?: string;
  /** An API key (agent role for jobs). Default: $STRATA_API_KEY. */
  apiKey?: string;
  /** Retries after the first attempt on network errors, 429, 502, 503, 504 (default 4). */
  maxRetries?: number;
  /** Backoff bounds in ms (default 100 to 5000); Retry-After is honoured up to the maximum. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Per-attempt timeout in ms (default 30000). */
  timeoutMs?: number;
  /** User-Agent header (default strata-ts-client/0.1). */
  userAgent?: string;
  /** fetch implementation (default: the global one). */
  fetch?: typeof fetch;
  /** Called before each retry (logging, tests). */
  onRetry?: (info: RetryInfo) => void;
  /**
   * Adds the caller's trace context to each request's headers, so an agent that traces
   * continues its trace in Strata (docs/observability.md). With OpenTelemetry:
   * `propagate: (h) => propagation.inject(context.active(), h)` (from `@opentelemetry/api`).
   * The client itself depends on nothing; default: none.
   */
  propagate?: (headers: Record<string, string>) => void;
}

/** What {@link StrataOptions.onRetry} is told. */
export interface RetryInfo {
  method: string;
  path: string;
  /** 1 for the first retry. */
  attempt: number;
  delayMs: number;
  idempotencyKey?: string;
  error: StrataError;
}

/** One call of {@link Strata.request}. */
export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  /** JSON-encoded. */
  body?: unknown;
  headers?: Record<string, string>;
  /** The Idempotency-Key for a POST/PUT/PATCH (default: a fresh UUID per call, reused on its retries). */
  idempotencyKey?: string;
  /** false: one attempt only. */
  retry?: boolean;
  signal?: AbortSignal;
}

/** A successful answer. */
export interface ApiResponse<T> {
  status: number;
  data: T;
  headers: Headers;
  etag?: string;
  requestId?: string;
  /** The server replayed an earlier answer for the same Idempotency-Key. */
  replayed: boolean;
}

const WRITES = new Set(["POST", "PUT", "PATCH"]);
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** AbortSignal.any (Node ≥ 20.3), with a fallback for 20.0-20.2. */
function anySignal(a: AbortSignal, b: AbortSignal): AbortSignal {
  if (typeof AbortSignal.any === "function") return AbortSignal.any([a, b]);
  const c = new AbortController();
  for (const s of [a, b]) {
    if (s.aborted) c.abort(s.reason);
    else s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

/** Retry-After as ms: delta-seconds or an HTTP date. */
function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

const seg = (s: string) => encodeURIComponent(s);
const jobPath = (job: string, ...rest: string[]) => ["/v1/jobs", seg(job), ...rest].join("/");
const stepPath = (job: string, step: string, action?: string) =>
  jobPath(job, "steps", seg(step), ...(action ? [action] : []));

/**
 * A typed client for Strata's HTTP API.
 *
 * Every POST/PUT/PATCH carries an Idempotency-Key (one per logical call) that is reused on each
 * retry, so a write retried after a timeout, a connection reset, a 429 or a 503 is applied once.
 *
 * ```ts
 * const strata = new Strata(); // STRATA_URL, STRATA_API_KEY
 * const job = strata.job("render-42", { owner: "worker-1" });
 * const cut = await job.step("cut", async (signal) => cutVideo(signal));
 * ```
 */
export class Strata {
  readonly url: string;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;
  private readonly maxRetries: number;
  private readonly minBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly onRetry?: (info: RetryInfo) => void;
  private readonly propagate?: (headers: Record<string, string>) => void;

  constructor(options: StrataOptions = {}) {
    this.url = (options.url ?? process.env.STRATA_URL ?? "http://localhost:8080").replace(/\/+$/, "");
    const key = options.apiKey ?? process.env.STRATA_API_KEY;
    if (!key) throw new Error("Strata needs an API key: pass { apiKey } or set STRATA_API_KEY (POST /v1/admin/keys creates one)");
    this.apiKey = key;
    this.fetchImpl = options.fetch ?? fetch;
    this.maxRetries = options.maxRetries ?? 4;
    this.minBackoffMs = options.minBackoffMs ?? 100;
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.userAgent = options.userAgent ?? "strata-ts-client/0.1";
    this.onRetry = options.onRetry;
    this.propagate = options.propagate;
  }

  /**
   * Sends one API call and decodes its JSON answer. Retries network errors (for reads and
   * for writes, which always carry an Idempotency-Key), 429, 502, 503 and 504, and a 409
   * "still in progress" of the same key, with bounded exponential backoff and jitter
   * honouring Retry-After. An error answer throws a {@link StrataError} subclass.
   */
  async request<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<ApiResponse<T>> {
    method = method.toUpperCase();
    let url = this.url + path;
    if (opts.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(opts.query)) if (v !== undefined) q.set(k, String(v));
      const s = q.toString();
      if (s) url += "?" + s;
    }
    const headers: Record<string, string> = {
      Accept: "application/json",
      Authorization: `Bearer ${this.apiKey}`,
      "User-Agent": this.userAgent,
      ...opts.headers,
    };
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === "content-type")) {
      headers["Content-Type"] = "application/json";
    }
    let idemKey: string | undefined;
    if (WRITES.has(method)) {
      idemKey = opts.idempotencyKey ?? headers["Idempotency-Key"] ?? globalThis.crypto.randomUUID();
      headers["Idempotency-Key"] = idemKey;
    }
    this.propagate?.(headers);
    const call = `${method} ${path}`;
    const attempts = opts.retry === false ? 1 : this.maxRetries + 1;
    for (let attempt = 0; ; attempt++) {
      let err: StrataError;
      try {
        return await this.once<T>(method, url, call, headers, body, opts.signal);
      } catch (e) {
        if (!(e instanceof StrataError)) throw e;
        err = e;
      }
      const retryable =
        err.kind === "network"
          ? method === "GET" || method === "HEAD" || method === "DELETE" || idemKey !== undefined
          : err.status === 429 ||
            err.kind === "unavailable" ||
            (err.status === 409 && idemKey !== undefined && /still in progress/i.test(err.detail));
      if (!retryable || attempt + 1 >= attempts) throw err;
      const delayMs = this.backoff(attempt + 1, err);
      this.onRetry?.({ method, path, attempt: attempt + 1, delayMs, idempotencyKey: idemKey, error: err });
      await sleep(delayMs, opts.signal);
    }
  }

  private backoff(attempt: number, err: StrataError): number {
    if (err.retryAfterMs !== undefined) return Math.min(err.retryAfterMs, this.maxBackoffMs);
    const d = Math.min(this.minBackoffMs * 2 ** (attempt - 1), this.maxBackoffMs);
    return d / 2 + Math.random() * (d / 2);
  }

  private async once<T>(
    method: string,
    url: string,
    call: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal?: AbortSignal,
  ): Promise<ApiResponse<T>> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const sig = signal ? anySignal(signal, timeout) : timeout;
    let res: Response;
    let text: string;
    try {
      res = await this.fetchImpl(url, { method, headers, body, signal: sig });
      text = await res.text();
    } catch (e) {
      // The caller's own abort is not a network failure: do not retry it.
      if (signal?.aborted) throw signal.reason;
      const why = timeout.aborted ? `no answer within ${this.timeoutMs} ms` : e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      throw errorFor({
        status: 0,
        call,
        cause: e,
        message: `${call}: could not reach Strata at ${this.url} (${why}); check STRATA_URL and that the server is up`,
      });
    }
    const requestId = res.headers.get("X-Request-Id") ?? undefined;
    let data: unknown = undefined;
    if (text.length > 0) {
      try {
        data = JSON.parse(text);
      } catch {
        data = text;
      }
    }
    if (res.status >= 400) {
      const problem: Problem = data && typeof data === "object" ? (data as Problem) : { detail: typeof data === "string" ? data.slice(0, 500) : undefined };
      throw errorFor({
        status: res.status,
        problem,
        call,
        requestId,
        retryAfterMs: parseRetryAfter(res.headers.get("Retry-After")),
      });
    }
    return {
      status: res.status,
      data: data as T,
      headers: res.headers,
      etag: res.headers.get("ETag") ?? undefined,
      requestId,
      replayed: res.headers.get("Idempotent-Replayed") === "true",
    };
  }

  // ---- jobs ---------------------------------------------------------------------------------

  /** Creates (created: true) or updates a job. ifMatch: the job's version (0: must not exist). */
  async putJob(job: string, spec: JobSpec = {}, opts: { ifMatch?: number; signal?: AbortSignal } = {}): Promise<{ job: Job; created: boolean }> {
    const headers: Record<string, string> = {};
    if (opts.ifMatch !== undefined) headers["If-Match"] = `"${opts.ifMatch}"`;
    const r = await this.request<Job>("PUT", jobPath(job), { body: spec, headers, signal: opts.signal });
    return { job: r.data, created: r.status === 201 };
  }

  /** Reads a job. */
  async getJob(job: string, opts: { signal?: AbortSignal } = {}): Promise<Job> {
    return (await this.request<Job>("GET", jobPath(job), opts)).data;
  }

  /** Finishes a job: status completed (default), failed or cancelled. */
  async completeJob(
    job: string,
    opts: { status?: Exclude<JobStatus, "running">; outcome?: unknown; signal?: AbortSignal } = {},
  ): Promise<Job> {
    const body: Record<string, unknown> = {};
    if (opts.status) body.status = opts.status;
    if (opts.outcome !== undefined) body.outcome = opts.outcome;
    return (await this.request<Job>("POST", jobPath(job, "complete"), { body, signal: opts.signal })).data;
  }

  /** Everything needed to carry on with a job (events: how many of the newest, default 20). */
  async resume(job: string, opts: { events?: number; signal?: AbortSignal } = {}): Promise<Resume> {
    const r = (await this.request<Resume>("GET", jobPath(job, "resume"), { query: { events: opts.events }, signal: opts.signal })).data;
    // The server sends null for empty lists; callers get [].
    r.completed_steps ??= [];
    r.in_flight ??= [];
    r.failed_steps ??= [];
    r.pending_handoffs ??= [];
    r.events ??= [];
    return r;
  }

  // ---- steps --------------------------------------------------------------------------------

  /**
   * Claims a step (lease + fencing token) or answers its stored result (status "completed":
   * do not run it again). Another owner's live lease → {@link ConflictError} whose
   * conflictValue has holder and until.
   */
  async startStep<R = unknown>(job: string, step: string, opts: StartStepOptions & { signal?: AbortSignal }): Promise<Claim<R>> {
    const body: Record<string, unknown> = { owner: opts.owner };
    if (opts.leaseSeconds !== undefined) body.lease_seconds = opts.leaseSeconds;
    if (opts.input !== undefined) body.input = opts.input;
    return (await this.request<Claim<R>>("POST", stepPath(job, step, "start"), { body, signal: opts.signal })).data;
  }

  /** Extends the lease held with fencingToken (a stale token → ConflictError). */
  async heartbeat(job: string, step: string, fencingToken: number, opts: { leaseSeconds?: number; signal?: AbortSignal } = {}): Promise<Step> {
    const body: Record<string, unknown> = { fencing_token: fencingToken };
    if (opts.leaseSeconds !== undefined) body.lease_seconds = opts.leaseSeconds;
    return (await this.request<Step>("POST", stepPath(job, step, "heartbeat"), { body, signal: opts.signal })).data;
  }

  /** Completes a step with its (JSON) result under fencingToken (a stale token → ConflictError). */
  async completeStep(job: string, step: string, fencingToken: number, result?: unknown, opts: { signal?: AbortSignal } = {}): Promise<Step> {
    const body: Record<string, unknown> = { fencing_token: fencingToken };
    if (result !== undefined) body.result = result;
    return (await this.request<Step>("POST", stepPath(job, step, "complete"), { body, signal: opts.signal })).data;
  }

  /** Fails a step: "retryable" (the next start claims it again) or "manual_review" (an admin must clear it). */
  async failStep(
    job: string,
    step: string,
    fencingToken: number,
    error: string,
    disposition: Disposition = "retryable",
    opts: { signal?: AbortSignal } = {},
  ): Promise<Step> {
    return (
      await this.request<Step>("POST", stepPath(job, step, "fail"), {
        body: { fencing_token: fencingToken, error, disposition },
        signal: opts.signal,
      })
    ).data;
  }

  /** Releases a manual_review failure (admin keys only): the step becomes failed/retryable. */
  async clearStep(job: string, step: string, opts: { signal?: AbortSignal } = {}): Promise<Step> {
    return (await this.request<Step>("POST", stepPath(job, step, "clear"), opts)).data;
  }

  /** Reads one step. */
  async getStep(job: string, step: string, opts: { signal?: AbortSignal } = {}): Promise<Step> {
    return (await this.request<Step>("GET", stepPath(job, step), opts)).data;
  }

  // ---- episodic log -------------------------------------------------------------------------

  /** Has exactly this edit (op + params, or a fingerprint) been applied to the job? */
  async applied<R = unknown>(
    job: string,
    q: ({ op: string; params?: unknown } | { fingerprint: string }) & { signal?: AbortSignal },
  ): Promise<Applied<R>> {
    const query =
      "fingerprint" in q
        ? { fingerprint: q.fingerprint }
        : { op: q.op, params: q.params === undefined ? undefined : JSON.stringify(q.params) };
    return (await this.request<Applied<R>>("GET", jobPath(job, "applied"), { query, signal: q.signal })).data;
  }

  /**
   * Appends one event: the commit point of a side effect. Retried with the same
   * Idempotency-Key; set input.idempotency_key too so a retry after your own crash does not
   * append twice.
   */
  async appendEvent<R = unknown>(job: string, input: EventInput, opts: { signal?: AbortSignal } = {}): Promise<Event<R>> {
    return (await this.request<Event<R>>("POST", jobPath(job, "events"), { body: input, signal: opts.signal })).data;
  }

  // ---- graph memory (docs/graph.md) -----------------------------------------------------------

  /** Finds the entity of the scope with this name or an alias, or creates it (created says which). */
  async resolveEntity(input: EntityInput, opts: { signal?: AbortSignal } = {}): Promise<Entity & { created: boolean }> {
    return (await this.request<Entity & { created: boolean }>("POST", "/v1/graph/entities", { body: input, signal: opts.signal })).data;
  }

  /** Adds subject -predicate-> object; a functional relation closes the one in force it contradicts. */
  async addRelation(input: RelationInput, opts: { signal?: AbortSignal } = {}): Promise<RelationAdded> {
    const r = (await this.request<RelationAdded>("POST", "/v1/graph/relations", { body: input, signal: opts.signal })).data;
    r.closed ??= [];
    return r;
  }

  /** Entities by name, alias or description (an exact name or alias first). */
  async searchEntities(q: string, opts: Scope & { limit?: number; signal?: AbortSignal } = {}): Promise<EntityHit[]> {
    const { signal, ...query } = opts;
    return (await this.request<{ items: EntityHit[] }>("GET", "/v1/graph/entities", { query: { q, ...query }, signal })).data.items;
  }

  /** An entity and its relations in force, or true at asOf (as Strata knew them at recordedAsOf). */
  async entity(id: string, opts: { asOf?: string; recordedAsOf?: string; limit?: number; signal?: AbortSignal } = {}): Promise<EntityAbout> {
    const query = { as_of: opts.asOf, recorded_as_of: opts.recordedAsOf, limit: opts.limit };
    return (await this.request<EntityAbout>("GET", `/v1/graph/entities/${seg(id)}`, { query, signal: opts.signal })).data;
  }

  /** Entities within depth (1-3) relations of an entity, nearest first. */
  async neighbors(id: string, opts: Scope & { depth?: number; asOf?: string; limit?: number; signal?: AbortSignal } = {}): Promise<Neighbor[]> {
    const { signal, asOf, ...rest } = opts;
    const r = await this.request<{ items: Neighbor[] }>("GET", `/v1/graph/entities/${seg(id)}/neighbors`, { query: { ...rest, as_of: asOf }, signal });
    return r.data.items;
  }

  /** One page of every version of an entity's relations (cursor: the previous page's next_cursor). */
  async entityHistory(
    id: string,
    opts: { predicate?: string; limit?: number; cursor?: string; signal?: AbortSignal } = {},
  ): Promise<{ items: Relation[]; next_cursor?: string }> {
    const { signal, ...query } = opts;
    return (await this.request<{ items: Relation[]; next_cursor?: string }>("GET", `/v1/graph/entities/${seg(id)}/history`, { query, signal })).data;
  }

  /** Merges an entity into another (admin keys). */
  async mergeEntity(id: string, into: string, opts: { signal?: AbortSignal } = {}): Promise<{ survivor: Entity; relations: number; closed: number }> {
    return (await this.request<{ survivor: Entity; relations: number; closed: number }>("POST", `/v1/graph/entities/${seg(id)}/merge`, { body: { into }, signal: opts.signal })).data;
  }

  /** Moves aliases and relations of an entity to a new one (admin keys). */
  async splitEntity(
    id: string,
    input: { name: string; type?: string; aliases?: string[]; relations?: string[] },
    opts: { signal?: AbortSignal } = {},
  ): Promise<{ from: Entity; new: Entity; relations: number }> {
    return (await this.request<{ from: Entity; new: Entity; relations: number }>("POST", `/v1/graph/entities/${seg(id)}/split`, { body: input, signal: opts.signal })).data;
  }

  /** Deletes an entity with every relation version naming it. */
  async deleteEntity(id: string, opts: { signal?: AbortSignal } = {}): Promise<{ entities: number; relations: number }> {
    return (await this.request<{ entities: number; relations: number }>("DELETE", `/v1/graph/entities/${seg(id)}`, opts)).data;
  }

  // ---- durable steps ------------------------------------------------------------------------

  /** A handle for running a job's steps durably: {@link DurableJob.step}, {@link DurableJob.once}. */
  job(jobId: string, opts: DurableJobOptions): DurableJob {
    return new DurableJob(this, jobId, opts);
  }
}
