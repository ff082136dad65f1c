/** One entry of a problem's `errors` list: which field was wrong, and why. */
export interface FieldError {
  /** Where the field is in the request: `body.lease_seconds`, `path.step`, `header.If-Match`, … */
  location?: string;
  message?: string;
  /** For 409s, the current state (holder, until, current_version, …). */
  value?: unknown;
}

/** An RFC 9457 problem document as Strata sends it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

/**
 * What went wrong, coarsely, so callers can branch without memorising status codes.
 * `network`: Strata did not answer (connection refused/reset, timeout) even after retries.
 */
export type ErrorKind =
  | "validation"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "conflict"
  | "precondition"
  | "too_large"
  | "rate_limited"
  | "unavailable"
  | "server"
  | "network"
  | "other";

export function kindOf(status: number): ErrorKind {
  switch (status) {
    case 0:
      return "network";
    case 400:
    case 422:
      return "validation";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 409:
      return "conflict";
    case 412:
    case 428:
      return "precondition";
    case 413:
      return "too_large";
    case 429:
      return "rate_limited";
    case 502:
    case 503:
    case 504:
      return "unavailable";
  }
  return status >= 500 ? "server" : "other";
}

/**
 * An error answer of the Strata API (an RFC 9457 problem), or no answer at all (status 0,
 * kind "network"). `status`, `detail` and the field `locations` come from the problem;
 * subclasses ({@link NotFoundError}, {@link ConflictError}, …) let you `instanceof`.
 */
export class StrataError extends Error {
  readonly kind: ErrorKind;
  /** The HTTP status; 0 when Strata never answered. */
  readonly status: number;
  readonly title: string;
  readonly detail: string;
  readonly errors: FieldError[];
  /** The problem as received (empty for network errors). */
  readonly problem: Problem;
  /** The server's X-Request-Id: quote it when reporting a problem. */
  readonly requestId?: string;
  /** Retry-After in milliseconds, when the server sent one. */
  readonly retryAfterMs?: number;
  /** The method and path of the call. */
  readonly call: string;

  constructor(init: {
    status: number;
    problem?: Problem;
    call: string;
    requestId?: string;
    retryAfterMs?: number;
    message?: string;
    cause?: unknown;
  }) {
    const p = init.problem ?? {};
    const errors = Array.isArray(p.errors) ? p.errors : [];
    const title = p.title ?? (init.status ? `HTTP ${init.status}` : "no answer");
    const detail = p.detail ?? "";
    let msg = init.message ?? `${init.call}: ${init.status ? init.status + " " : ""}${title}${detail ? ": " + detail : ""}`;
    for (const e of errors) {
      if (e.location) msg += `; ${e.location}: ${e.message ?? "invalid"}`;
      else if (e.message) msg += `; ${e.message}`;
    }
    if (init.requestId) msg += ` (request ${init.requestId})`;
    super(msg, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.kind = kindOf(init.status);
    this.status = init.status;
    this.title = title;
    this.detail = detail;
    this.errors = errors;
    this.problem = p;
    this.requestId = init.requestId;
    this.retryAfterMs = init.retryAfterMs;
    this.call = init.call;
  }

  /** The request fields the problem names (`body.lease_seconds`, `path.step`, …). */
  get locations(): string[] {
    return this.errors.map((e) => e.location).filter((l): l is string => !!l);
  }

  /** The current state a 409 reports in errors[0].value (holder, until, current_version…). */
  get conflictValue(): Record<string, unknown> | undefined {
    const v = this.errors.find((e) => e.value !== undefined && e.value !== null)?.value;
    return v && typeof v === "object" ? (v as Record<string, unknown>) : undefined;
  }
}

/** 400/422: the request was malformed; `locations` names the fields. */
export class ValidationError extends StrataError {}
/** 401/403: the API key is missing, unknown, revoked or lacks the role. */
export class AuthError extends StrataError {}
/** 404: no such resource in this key's org. */
export class NotFoundError extends StrataError {}
/** 409: stale version, lease held by someone else, stale fencing token, job finished, … */
export class ConflictError extends StrataError {}
/** 412/428: If-Match did not match or is required. */
export class PreconditionError extends StrataError {}
/** 429: rate limited even after the client's retries. */
export class RateLimitError extends StrataError {}
/** 502/503/504 or no answer at all, even after the client's retries. */
export class UnavailableError extends StrataError {}

/** Builds the most specific StrataError subclass for a status. */
export function errorFor(init: ConstructorParameters<typeof StrataError>[0]): StrataError {
  switch (kindOf(init.status)) {
    case "validation":
      return new ValidationError(init);
    case "unauthorized":
    case "forbidden":
      return new AuthError(init);
    case "not_found":
      return new NotFoundError(init);
    case "conflict":
      return new ConflictError(init);
    case "precondition":
      return new PreconditionError(init);
    case "rate_limited":
      return new RateLimitError(init);
    case "unavailable":
    case "network":
      return new UnavailableError(init);
  }
  return new StrataError(init);
}

/**
 * The step's lease moved to someone else (a heartbeat, complete or fail answered 409): this
 * worker was fenced off. Stop, resume the job, and pick up from what Strata says.
 */
export class LeaseLostError extends Error {
  constructor(
    readonly job: string,
    readonly step: string,
    readonly fencingToken: number,
    cause?: unknown,
  ) {
    super(
      `lease on step ${step} of job ${job} (token ${fencingToken}) was lost: another worker took the step over ` +
        `(or the job was finished or handed off); stop this step and resume the job`,
      cause === undefined ? undefined : { cause },
    );
    this.name = "LeaseLostError";
  }
}

/**
 * Another owner holds a live lease on the step (start answered 409 with holder/until). A
 * {@link ConflictError}; wait until `until` (an expired lease can be taken over) or do other work.
 */
export class StepBusyError extends ConflictError {
  constructor(
    readonly job: string,
    readonly step: string,
    readonly holder: string,
    readonly until: string | undefined,
    conflict: ConflictError,
  ) {
    super({
      status: conflict.status,
      problem: conflict.problem,
      call: conflict.call,
      requestId: conflict.requestId,
      cause: conflict,
      message: `step ${step} of job ${job} is held by ${holder}${until ? ` until ${until}` : ""}: wait for the lease to expire or work on another step`,
    });
  }
}

/**
 * Throw this from a step (or wrap an error with {@link manualReview}) to fail the step with
 * disposition `manual_review`: it will not be claimed again until an operator clears it.
 * Any other error fails the step as `retryable`.
 */
export class ManualReview extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ManualReview";
  }
}

/** Wraps err so that the step fails with disposition `manual_review`. */
export function manualReview(err: unknown): ManualReview {
  if (err instanceof ManualReview) return err;
  const msg = err instanceof Error ? err.message : String(err);
  return new ManualReview(msg, { cause: err });
}
