import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Strata, type StrataOptions } from "../src/index.js";

export const URL_ = process.env.STRATA_URL ?? "";
export const KEY = process.env.STRATA_API_KEY ?? "";
export const ADMIN_KEY = process.env.STRATA_ADMIN_KEY ?? "";
if (!URL_ || !KEY) {
  throw new Error("set STRATA_URL and STRATA_API_KEY (an agent key) to run these tests; go test ./internal/typescripttest does");
}

/** A job id no other test uses. */
export const jobId = (name: string) => `ts-${name}-${randomBytes(5).toString("hex")}`;

/** A client with fast retries (the tests' backoffs stay in milliseconds). */
export const client = (opts: StrataOptions = {}) =>
  new Strata({ url: URL_, apiKey: KEY, minBackoffMs: 20, maxBackoffMs: 200, ...opts });

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What a {@link FaultProxy} saw of one request. */
export interface Seen {
  method: string;
  path: string;
  idempotencyKey?: string;
  /** What the proxy did: forwarded, "503" (answered 503 itself), "lost" (forwarded, then answered 503), "reset". */
  action: "forwarded" | "503" | "429" | "lost" | "reset";
}

/**
 * A local HTTP proxy in front of Strata that can fail requests: for a request matching a rule,
 * the rule's actions are used up in order (one per matching request), then requests pass.
 * "503" / "429": answer that status + Retry-After (retryAfter, default "0") without forwarding
 * (the server was down / rate limited);
 * "lost": forward, then answer 503 (the server applied it but the answer never arrived);
 * "reset": destroy the connection without answering.
 */
export class FaultProxy {
  readonly seen: Seen[] = [];
  private server: http.Server;
  url = "";
  /** The Retry-After header of the proxy's own 503/429 answers. */
  retryAfter = "0";
  private rules: { match: (m: string, p: string) => boolean; actions: Seen["action"][] }[] = [];

  constructor(private readonly upstream: string) {
    this.server = http.createServer((req, res) => void this.handle(req, res));
  }

  fail(match: (method: string, path: string) => boolean, ...actions: Seen["action"][]) {
    this.rules.push({ match, actions });
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const method = req.method ?? "GET";
    const path = req.url ?? "/";
    const rule = this.rules.find((r) => r.actions.length > 0 && r.match(method, path.split("?")[0]!));
    const action = rule?.actions.shift() ?? "forwarded";
    const key = req.headers["idempotency-key"];
    this.seen.push({ method, path, idempotencyKey: typeof key === "string" ? key : undefined, action });
    if (action === "reset") {
      req.socket.destroy();
      return;
    }
    if (action === "503" || action === "429") {
      const status = Number(action);
      res.writeHead(status, { "Content-Type": "application/problem+json", "Retry-After": this.retryAfter });
      res.end(JSON.stringify({ title: status === 503 ? "Service Unavailable" : "Too Many Requests", status, detail: "proxy: " + action }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (typeof v === "string" && !["host", "connection", "content-length"].includes(k)) headers[k] = v;
    }
    const up = await fetch(this.upstream + path, {
      method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    const body = Buffer.from(await up.arrayBuffer());
    if (action === "lost") {
      res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "0" });
      res.end(JSON.stringify({ title: "Service Unavailable", status: 503, detail: "proxy: answer lost" }));
      return;
    }
    const out: Record<string, string> = {};
    up.headers.forEach((v, k) => {
      if (!["content-length", "content-encoding", "transfer-encoding", "connection"].includes(k)) out[k] = v;
    });
    res.writeHead(up.status, out);
    res.end(body);
  }
}
