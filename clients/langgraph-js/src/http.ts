import { randomUUID } from "node:crypto";
import http from "node:http";
import https from "node:https";

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
  /**
   * fetch implementation. Default: Node's own http client on a keep-alive connection pool,
   * which costs about half the CPU of the global fetch per call (docs/benchmarks.md).
   */
  fetch?: typeof fetch;
}

/** What a transport answers: the status, the Retry-After header and the body. */
export interface Answer {
  status: number;
  retryAfter: string | null;
  text: string;
}

/** One HTTP exchange; a rejection means no answer arrived (refused, reset, timed out). */
export type Send = (method: string, url: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number) => Promise<Answer>;

/** A transport over a fetch implementation (tests pass one that loses answers). */
export function fetchSend(fetchImpl: typeof fetch): Send {
  return async (method, url, headers, body, timeoutMs) => {
    const res = await fetchImpl(url, { method, headers, body, signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, retryAfter: res.headers.get("Retry-After"), text: await res.text() };
  };
}

const agents = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };

/** The default transport: node:http(s) with keep-alive connections. */
export const nodeSend: Send = (method, url, headers, body, timeoutMs) =>
  new Promise((resolve, reject) => {
    const tls = url.startsWith("https:");
    const hdrs: Record<string, string | number> = { ...headers };
    if (body !== undefined) hdrs["Content-Length"] = Buffer.byteLength(body);
    const req = (tls ? https : http).request(url, { method, headers: hdrs, agent: tls ? agents.https : agents.http }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const ra = res.headers["retry-after"];
        resolve({ status: res.statusCode ?? 0, retryAfter: (Array.isArray(ra) ? ra[0] : ra) ?? null, text: Buffer.concat(chunks).toString("utf8") });
      });
      res.on("error", reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });

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
  private readonly send: Send;

  constructor(
    private readonly opts: StrataHTTPOptions,
    who: string,
  ) {
    this.url = (opts.url ?? process.env.STRATA_URL ?? "http://localhost:8080").replace(/\/+$/, "");
    const key = opts.apiKey ?? process.env.STRATA_API_KEY;
    if (!key) throw new Error(`${who} needs an API key: pass apiKey or set STRATA_API_KEY`);
    this.apiKey = key;
    this.send = opts.fetch ? fetchSend(opts.fetch) : nodeSend;
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
      let res: Answer;
      try {
        res = await this.send(method, this.url + path, headers, payload, this.opts.timeoutMs ?? 30000);
      } catch (e) {
        lastErr = e;
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
      const err = new StrataHTTPError(res.status, problem, `Strata ${method} ${path}: ${res.status} ${problem?.detail ?? problem?.title ?? text}`);
      if (!transient) throw err;
      lastErr = err;
      if (attempt < attempts) await sleep(Math.max(backoff(attempt), Number(retryAfter ?? 0) * 1000));
    }
    throw lastErr;
  }
}
