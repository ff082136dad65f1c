import { randomUUID } from "node:crypto";

/** Connection options shared by the Strata adapters. */
export interface StrataHTTPOptions {
  /** Strata's base URL. Default: $STRATA_URL, else http://localhost:8080. */
  url?: string;
  /** An agent API key. Default: $STRATA_API_KEY. */
  apiKey?: string;
  /** Attempts per call when Strata is unreachable or answers 5xx/429 (default 6). */
  maxAttempts?: number;
  /** Per-request timeout in ms (default 30000). */
  timeoutMs?: number;
  /** fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

/** An error answer of the Strata API (RFC 9457 problem). */
export class StrataHTTPError extends Error {
  constructor(
    readonly status: number,
    readonly problem: unknown,
    message: string,
  ) {
    super(message);
    this.name = "StrataError";
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const backoff = (attempt: number) => Math.min(2000, 50 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);

/**
 * Strata's REST API with retries: a call that gets no answer (refused, reset, timed out) or a
 * 5xx/429 (or 409 with Retry-After: the same Idempotency-Key still in flight) is retried with
 * backoff, and every write carries one Idempotency-Key for all its attempts.
 */
export class StrataHTTP {
  readonly url: string;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;

  constructor(
    private readonly opts: StrataHTTPOptions,
    who: string,
  ) {
    this.url = (opts.url ?? process.env.STRATA_URL ?? "http://localhost:8080").replace(/\/+$/, "");
    const key = opts.apiKey ?? process.env.STRATA_API_KEY;
    if (!key) throw new Error(`${who} needs an API key: pass apiKey or set STRATA_API_KEY`);
    this.apiKey = key;
    this.fetchImpl = opts.fetch ?? fetch;
  }

  async request(
    method: string,
    path: string,
    body?: unknown,
    opts: { notFound?: boolean; read?: boolean } = {},
  ): Promise<any> {
    const attempts = Math.max(1, this.opts.maxAttempts ?? 6);
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}` };
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    if (method !== "GET" && !opts.read) headers["Idempotency-Key"] = randomUUID(); // one per call, the same on every retry
    let lastErr: unknown;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      let res: Response;
      try {
        res = await this.fetchImpl(this.url + path, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.opts.timeoutMs ?? 30000),
        });
      } catch (e) {
        lastErr = e;
        if (attempt < attempts) await sleep(backoff(attempt));
        continue;
      }
      if (res.status === 404 && opts.notFound) {
        await res.body?.cancel();
        return undefined;
      }
      const text = await res.text();
      if (res.ok) return text ? JSON.parse(text) : undefined;
      const retryAfter = res.headers.get("Retry-After");
      const transient = res.status >= 500 || res.status === 429 || (res.status === 409 && retryAfter !== null);
      let problem: any = text;
      try {
        problem = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      const err = new StrataHTTPError(res.status, problem, `Strata ${method} ${path}: ${res.status} ${problem?.detail ?? problem?.title ?? text}`);
      if (!transient) throw err;
      lastErr = err;
      if (attempt < attempts) await sleep(Math.max(backoff(attempt), Number(retryAfter ?? 0) * 1000));
    }
    throw lastErr;
  }
}
