import type { Strata } from "./client.js";
import { ConflictError, LeaseLostError, ManualReview, StepBusyError } from "./errors.js";
import type { Claim, StepInput } from "./types.js";

/** Options of {@link Strata.job}. */
export interface DurableJobOptions {
  /**
   * Who runs the steps: a stable worker id. A worker restarted with the same owner reclaims
   * the steps it held at once; another owner must wait for the lease to expire.
   */
  owner: string;
  /** Lease per claim in seconds (default 60). */
  leaseSeconds?: number;
  /** Heartbeat period in ms (default: a third of the lease). */
  heartbeatMs?: number;
  /** Recorded as agent_id on the events once() appends. */
  agentId?: string;
}

/** Per-step options of {@link DurableJob.step}. */
export interface StepOptions {
  /** Recorded with the claim (tool, model, params), shown in resume and the stalled list. */
  input?: StepInput;
  leaseSeconds?: number;
  heartbeatMs?: number;
}

/** What a step function is told besides its signal. */
export interface StepContext {
  job: string;
  step: string;
  fencingToken: number;
  /** The claim's attempt number (grows on takeovers and retries). */
  attempt: number;
}

/** Options of {@link DurableJob.once}. */
export interface OnceOptions {
  /** Stored as the event's idempotency_key. */
  idempotencyKey?: string;
}

function errorText(err: unknown): string {
  const s = err instanceof Error ? `${err.name === "Error" ? "" : err.name + ": "}${err.message}` : String(err);
  return (s || "step failed").slice(0, 4000);
}

/**
 * Runs a job's steps with Strata's lease/fencing protocol (docs/jobs.md). Create it with
 * {@link Strata.job}.
 */
export class DurableJob {
  constructor(
    readonly client: Strata,
    readonly id: string,
    readonly opts: DurableJobOptions,
  ) {}

  /**
   * Runs `fn` as step `name`, at most once to completion:
   *
   * - the step is claimed; if it already completed, its stored result is returned and `fn`
   *   does not run;
   * - while `fn` runs the lease is heartbeated; if a heartbeat is refused (409: another worker
   *   took the step over after the lease expired) `signal` aborts with a
   *   {@link LeaseLostError} and the step throws it without completing;
   * - `fn`'s (JSON-serialisable) result is stored with the fencing token and returned;
   * - if `fn` throws, the step is failed: `retryable` (the next `step()` claims it again) or,
   *   for a {@link ManualReview} error (see `manualReview(err)`), `manual_review`; the error is
   *   rethrown.
   *
   * Another owner's live lease → {@link StepBusyError}; a step in manual review → ConflictError.
   */
  async step<R>(name: string, fn: (signal: AbortSignal, ctx: StepContext) => Promise<R> | R, opts: StepOptions = {}): Promise<R> {
    const c = this.client;
    const lease = opts.leaseSeconds ?? this.opts.leaseSeconds ?? 60;
    let claim: Claim<R>;
    try {
      claim = await c.startStep<R>(this.id, name, { owner: this.opts.owner, leaseSeconds: lease, input: opts.input });
    } catch (e) {
      const v = e instanceof ConflictError ? e.conflictValue : undefined;
      if (e instanceof ConflictError && v && typeof v.holder === "string" && v.holder !== this.opts.owner) {
        throw new StepBusyError(this.id, name, v.holder, typeof v.until === "string" ? v.until : undefined, e);
      }
      throw e;
    }
    if (claim.status === "completed") return claim.result as R;

    const token = claim.fencing_token;
    const lost = new AbortController(); // aborts fn's signal when the lease is lost
    const stop = new AbortController(); // cancels an in-flight heartbeat when the step ends
    const loseLease = (cause: unknown) => {
      if (!lost.signal.aborted && !stop.signal.aborted) lost.abort(new LeaseLostError(this.id, name, token, cause));
    };
    let beating = false;
    const beat = async () => {
      if (beating || lost.signal.aborted || stop.signal.aborted) return;
      beating = true;
      try {
        await c.heartbeat(this.id, name, token, { leaseSeconds: lease, signal: stop.signal });
      } catch (e) {
        // 409: the lease moved on. Anything else (Strata briefly down) is retried next beat:
        // an expired lease nobody took over still belongs to this token.
        if (e instanceof ConflictError) loseLease(e);
      } finally {
        beating = false;
      }
    };
    const period = opts.heartbeatMs ?? this.opts.heartbeatMs ?? Math.max(100, (lease * 1000) / 3);
    const timer = setInterval(() => void beat(), period);
    const finish = () => {
      clearInterval(timer);
      stop.abort();
    };
    const fenced = (e: unknown) => (e instanceof ConflictError ? new LeaseLostError(this.id, name, token, e) : e);

    let result: R;
    try {
      result = await fn(lost.signal, { job: this.id, step: name, fencingToken: token, attempt: claim.attempt });
    } catch (err) {
      const wasLost = lost.signal.aborted;
      finish();
      if (wasLost) throw lost.signal.reason; // fenced off: the new holder owns the step now
      const disposition = err instanceof ManualReview ? "manual_review" : "retryable";
      try {
        await c.failStep(this.id, name, token, errorText(err), disposition);
      } catch (e) {
        throw fenced(e);
      }
      throw err;
    }
    const wasLost = lost.signal.aborted;
    finish();
    if (wasLost) throw lost.signal.reason;
    try {
      await c.completeStep(this.id, name, token, result);
    } catch (e) {
      throw fenced(e);
    }
    return result;
  }

  /**
   * Performs the side effect `fn` only if the job's event log does not already show
   * `(op, params)` applied; then appends the event `{op, params, result}` (the side effect's
   * commit point, retried with one Idempotency-Key until acknowledged). Returns fn's result,
   * or the stored result when it was already applied.
   *
   * A crash between `fn` and the append cannot be seen by Strata: make such side effects
   * idempotent in the world (deterministic names) if that window matters.
   */
  async once<R>(op: string, params: unknown, fn: () => Promise<R> | R, opts: OnceOptions = {}): Promise<R> {
    const c = this.client;
    const a = await c.applied<R>(this.id, { op, params });
    if (a.applied && a.event) return a.event.result as R;
    const result = await fn();
    await c.appendEvent(this.id, {
      op,
      params,
      result,
      agent_id: this.opts.agentId,
      idempotency_key: opts.idempotencyKey,
    });
    return result;
  }
}
