import { describe, expect, it } from "vitest";
import {
  AuthError,
  ConflictError,
  LeaseLostError,
  ManualReview,
  manualReview,
  NotFoundError,
  StepBusyError,
  Strata,
  StrataError,
  UnavailableError,
  ValidationError,
} from "../src/index.js";
import { ADMIN_KEY, client, FaultProxy, jobId, KEY, sleep, URL_ } from "./helpers.js";

describe("client", () => {
  it("reads config from STRATA_URL / STRATA_API_KEY", () => {
    const s = new Strata();
    expect(s.url).toBe(URL_.replace(/\/+$/, ""));
    const saved = process.env.STRATA_API_KEY;
    delete process.env.STRATA_API_KEY;
    try {
      expect(() => new Strata({ url: URL_ })).toThrow(/STRATA_API_KEY/);
    } finally {
      process.env.STRATA_API_KEY = saved;
    }
  });

  it("turns problems into typed errors naming the fields", async () => {
    const s = client();
    const job = jobId("errors");
    await s.putJob(job, { goal: "errors" });
    const err = await s.startStep(job, "a", { owner: "w", leaseSeconds: 0 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    const v = err as ValidationError;
    expect(v.kind).toBe("validation");
    expect([400, 422]).toContain(v.status);
    expect(v.locations).toContain("body.lease_seconds");
    expect(v.message).toContain("body.lease_seconds");

    const nf = await s.getStep(job, "nope").catch((e: unknown) => e);
    expect(nf).toBeInstanceOf(NotFoundError);
    expect((nf as StrataError).kind).toBe("not_found");
    expect((nf as StrataError).status).toBe(404);

    const auth = await new Strata({ url: URL_, apiKey: "sk_not_a_key" }).getJob(job).catch((e: unknown) => e);
    expect(auth).toBeInstanceOf(AuthError);
    expect((auth as StrataError).status).toBe(401);

    // Nobody listening: kind "network", after bounded retries.
    const down = new Strata({ url: "http://127.0.0.1:9", apiKey: KEY, maxRetries: 2, minBackoffMs: 5, maxBackoffMs: 10 });
    const ne = await down.getJob(job).catch((e: unknown) => e);
    expect(ne).toBeInstanceOf(UnavailableError);
    expect((ne as StrataError).kind).toBe("network");
    expect((ne as StrataError).status).toBe(0);
  });

  it("job and step methods speak the documented shapes", async () => {
    const s = client();
    const job = jobId("shapes");
    const put = await s.putJob(job, { goal: "shapes", metadata: { a: 1 } });
    expect(put.created).toBe(true);
    expect(put.job.status).toBe("running");
    expect((await s.putJob(job, { goal: "shapes 2" })).created).toBe(false);

    const claim = await s.startStep(job, "a", { owner: "w1", leaseSeconds: 30, input: { tool: "t", params: { x: 1 } } });
    expect(claim.status).toBe("claimed");
    expect(claim.fencing_token).toBeGreaterThan(0);
    const hb = await s.heartbeat(job, "a", claim.fencing_token, { leaseSeconds: 30 });
    expect(hb.status).toBe("running");
    const busy = await s.startStep(job, "a", { owner: "w2" }).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(ConflictError);
    expect((busy as ConflictError).conflictValue?.holder).toBe("w1");
    await s.completeStep(job, "a", claim.fencing_token, { out: 1 });
    expect((await s.getStep(job, "a")).result).toEqual({ out: 1 });

    const ev = await s.appendEvent(job, { op: "edit", params: { n: 1 }, result: "ok", idempotency_key: "k1" });
    expect(ev.seq).toBeGreaterThan(0);
    const again = await s.appendEvent(job, { op: "edit", params: { n: 1 }, result: "ok", idempotency_key: "k1" });
    expect(again.seq).toBe(ev.seq);
    const ap = await s.applied(job, { op: "edit", params: { n: 1 } });
    expect(ap.applied).toBe(true);
    expect(ap.event?.result).toBe("ok");
    expect((await s.applied(job, { fingerprint: ap.fingerprint })).applied).toBe(true);
    expect((await s.applied(job, { op: "edit", params: { n: 2 } })).applied).toBe(false);

    const r = await s.resume(job);
    expect(r.completed_steps.map((c) => c.step_id)).toEqual(["a"]);
    expect(r.events).toHaveLength(1);
    const done = await s.completeJob(job, { outcome: { ok: true } });
    expect(done.status).toBe("completed");
  });
});

describe("job.step", () => {
  it("returns a completed step's stored result without running it again", async () => {
    const s = client();
    const id = jobId("completed");
    await s.putJob(id, { goal: "completed" });
    let runs = 0;
    const job = s.job(id, { owner: "w1" });
    const first = await job.step("cut", async (signal, ctx) => {
      runs++;
      expect(signal.aborted).toBe(false);
      expect(ctx.fencingToken).toBeGreaterThan(0);
      return { file: "cut.mp4", frames: 120 };
    });
    expect(first).toEqual({ file: "cut.mp4", frames: 120 });
    // The same worker, and another worker, get the stored result; fn never runs again.
    const again = await job.step("cut", async () => {
      runs++;
      return { file: "other" };
    });
    const other = await s.job(id, { owner: "w2" }).step("cut", () => {
      runs++;
      return { file: "other" };
    });
    expect(runs).toBe(1);
    expect(again).toEqual(first);
    expect(other).toEqual(first);
    const st = await s.getStep(id, "cut");
    expect(st.status).toBe("completed");
    expect(st.attempts).toBe(1);
  });

  it("aborts the signal when the lease is lost and refuses the stale token", async () => {
    const s = client();
    const id = jobId("lease");
    await s.putJob(id, { goal: "lease" });
    // 1 s lease, heartbeats every 2.5 s: the lease expires before the first heartbeat.
    const a = s.job(id, { owner: "worker-a", leaseSeconds: 1, heartbeatMs: 2500 });
    let tokenA = 0;
    let aborted: unknown;
    let started!: () => void;
    const claimedByA = new Promise<void>((r) => (started = r));
    const running = a.step("render", async (signal, ctx) => {
      tokenA = ctx.fencingToken;
      started();
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error("the signal never aborted")), 15000);
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          aborted = signal.reason;
          resolve();
        });
      });
      return "a's result";
    });
    const outcome = running.then(
      () => "completed",
      (e: unknown) => e,
    );
    // worker-b takes the step over once A's lease has expired.
    await Promise.race([claimedByA, outcome]);
    expect(tokenA).toBeGreaterThan(0);
    let claimB;
    for (let i = 0; ; i++) {
      try {
        claimB = await s.startStep(id, "render", { owner: "worker-b", leaseSeconds: 30 });
        break;
      } catch (e) {
        expect(e).toBeInstanceOf(ConflictError);
        if (i > 50) throw e;
        await sleep(200);
      }
    }
    expect(claimB.status).toBe("claimed");
    expect(claimB.fencing_token).toBeGreaterThan(tokenA);
    const err = await outcome;
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(aborted).toBeInstanceOf(LeaseLostError);
    // A's completion with its stale token is refused and writes nothing.
    const stale = await s.completeStep(id, "render", tokenA, "stale").catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(ConflictError);
    await s.completeStep(id, "render", claimB.fencing_token, "b's result");
    const st = await s.getStep(id, "render");
    expect(st.status).toBe("completed");
    expect(st.owner).toBe("worker-b");
    expect(st.result).toBe("b's result");
    // A live lease of another owner: step() says who holds it.
    await s.startStep(id, "next", { owner: "worker-b", leaseSeconds: 30 });
    const busy = await a.step("next", () => 1).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(StepBusyError);
    expect(busy).toBeInstanceOf(ConflictError);
    expect((busy as StepBusyError).holder).toBe("worker-b");
    expect((busy as StepBusyError).until).toBeTruthy();
    expect((busy as StepBusyError).status).toBe(409);
  });

  it("stops for a human on manualReview and runs again once cleared", async () => {
    const s = client();
    const id = jobId("manual");
    await s.putJob(id, { goal: "manual" });
    const job = s.job(id, { owner: "w1" });
    let runs = 0;
    const err = await job
      .step("crop", () => {
        runs++;
        throw manualReview(new Error("the frame is corrupt"));
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ManualReview);
    let st = await s.getStep(id, "crop");
    expect(st.status).toBe("failed");
    expect(st.disposition).toBe("manual_review");
    expect(st.error).toContain("the frame is corrupt");

    // Not claimable until an admin clears it; fn does not run.
    const blocked = await job.step("crop", () => runs++).catch((e: unknown) => e);
    expect(blocked).toBeInstanceOf(ConflictError);
    expect(runs).toBe(1);

    // The ManualReview class works as well as the helper.
    const id2 = jobId("manual2");
    await s.putJob(id2, { goal: "manual" });
    await s
      .job(id2, { owner: "w1" })
      .step("x", () => {
        throw new ManualReview("needs a human");
      })
      .catch(() => undefined);
    expect((await s.getStep(id2, "x")).disposition).toBe("manual_review");

    if (!ADMIN_KEY) return;
    const admin = new Strata({ url: URL_, apiKey: ADMIN_KEY });
    await admin.clearStep(id, "crop");
    const out = await job.step("crop", () => {
      runs++;
      return "cropped";
    });
    expect(out).toBe("cropped");
    expect(runs).toBe(2);
    st = await s.getStep(id, "crop");
    expect(st.status).toBe("completed");
  });

  it("fails a step as retryable and the next call retries it", async () => {
    const s = client();
    const id = jobId("retry");
    await s.putJob(id, { goal: "retry" });
    const job = s.job(id, { owner: "w1" });
    const attempts: number[] = [];
    const work = async (_: AbortSignal, ctx: { attempt: number; fencingToken: number }) => {
      attempts.push(ctx.fencingToken);
      if (attempts.length === 1) throw new Error("upstream timed out");
      return "ok";
    };
    const err = await job.step("fetch", work).catch((e: unknown) => e);
    expect((err as Error).message).toBe("upstream timed out");
    const st = await s.getStep(id, "fetch");
    expect(st.status).toBe("failed");
    expect(st.disposition).toBe("retryable");
    expect(st.error).toContain("upstream timed out");
    expect(await job.step("fetch", work)).toBe("ok");
    expect(attempts).toHaveLength(2);
    expect(attempts[1]).toBeGreaterThan(attempts[0]!); // a new claim, a new token
    const done = await s.getStep(id, "fetch");
    expect(done.status).toBe("completed");
    expect(done.attempts).toBe(2);
  });

  it("retries through a server outage with the same Idempotency-Key", async () => {
    const proxy = await new FaultProxy(URL_).start();
    try {
      const retries: string[] = [];
      const s = client({ url: proxy.url, onRetry: (i) => retries.push(`${i.method} ${i.path} ${i.error.status}`) });
      const id = jobId("outage");
      await s.putJob(id, { goal: "outage" });
      // complete: the first attempt reaches Strata but its answer is lost, the second finds
      // the server down (503); the third gets through.
      proxy.fail((m, p) => m === "POST" && p.endsWith("/steps/render/complete"), "lost", "503");
      // The side effect's event (no idempotency_key in the body): the first append is stored
      // but its answer lost, the second attempt's connection drops; only the header key
      // keeps the third from appending a second event.
      proxy.fail((m, p) => m === "POST" && p.endsWith("/events"), "lost", "reset");
      const job = s.job(id, { owner: "w1" });
      let runs = 0;
      const out = await job.step("render", async () => {
        runs++;
        return job.once("render.frame", { frame: 7 }, () => "frame-7.png");
      });
      expect(out).toBe("frame-7.png");
      expect(runs).toBe(1);

      const completes = proxy.seen.filter((x) => x.path.endsWith("/steps/render/complete"));
      expect(completes.map((x) => x.action)).toEqual(["lost", "503", "forwarded"]);
      expect(completes[0]!.idempotencyKey).toBeTruthy();
      const r0 = await client().resume(id);
      expect(r0.events.filter((e) => e.op === "render.frame")).toHaveLength(1);
      expect(new Set(completes.map((x) => x.idempotencyKey)).size).toBe(1);
      const appends = proxy.seen.filter((x) => x.path.endsWith("/events"));
      expect(appends.map((x) => x.action)).toEqual(["lost", "reset", "forwarded"]);
      expect(new Set(appends.map((x) => x.idempotencyKey)).size).toBe(1);
      expect(retries).toHaveLength(4);

      const direct = client();
      const st = await direct.getStep(id, "render");
      expect(st.status).toBe("completed");
      expect(st.result).toBe("frame-7.png");
      const r = await direct.resume(id);
      expect(r.events.filter((e) => e.op === "render.frame")).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });
});

describe("retries", () => {
  it("honours Retry-After within the backoff bound and gives up after maxRetries", async () => {
    const proxy = await new FaultProxy(URL_).start();
    try {
      proxy.retryAfter = "1";
      const id = jobId("retry-after");
      await client().putJob(id, { goal: "retry-after" });
      const delays: number[] = [];
      const get = (p: string) => p === `/v1/jobs/${id}`;
      proxy.fail((m, p) => m === "GET" && get(p), "429", "503");
      const s = client({ url: proxy.url, maxBackoffMs: 5000, onRetry: (i) => delays.push(i.delayMs) });
      const t0 = Date.now();
      expect((await s.getJob(id)).job_id).toBe(id);
      expect(delays).toEqual([1000, 1000]);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(1900);

      // Capped by maxBackoffMs; after maxRetries the last error is thrown, typed.
      delays.length = 0;
      proxy.fail((m, p) => m === "GET" && get(p), "503", "503", "503");
      const capped = client({ url: proxy.url, maxRetries: 2, maxBackoffMs: 50, onRetry: (i) => delays.push(i.delayMs) });
      const err = await capped.getJob(id).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnavailableError);
      expect((err as StrataError).retryAfterMs).toBe(1000);
      expect(delays).toEqual([50, 50]);
      expect(proxy.seen.filter((x) => get(x.path))).toHaveLength(6); // 2 failed + 1 ok, then 3 failed
    } finally {
      await proxy.close();
    }
  });
});

describe("job.once", () => {
  it("skips an op the log already shows applied", async () => {
    const s = client();
    const id = jobId("once");
    await s.putJob(id, { goal: "once" });
    const job = s.job(id, { owner: "w1", agentId: "agent-7" });
    let sent = 0;
    const send = () => {
      sent++;
      return { message_id: "m-1" };
    };
    expect(await job.once("email.send", { to: "ops", template: "done" }, send)).toEqual({ message_id: "m-1" });
    // The same op and params again (a re-run after a crash): not performed, stored result back.
    expect(await job.once("email.send", { template: "done", to: "ops" }, send)).toEqual({ message_id: "m-1" });
    expect(sent).toBe(1);
    // Other params are another op.
    await job.once("email.send", { to: "ops", template: "failed" }, send);
    expect(sent).toBe(2);
    const r = await s.resume(id);
    expect(r.events).toHaveLength(2);
    expect(r.events[0]!.agent_id).toBe("agent-7");
  });
});
