import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { client, jobId, KEY, URL_ } from "./helpers.js";

const WORKER = join(dirname(fileURLToPath(import.meta.url)), "crash-worker.mjs");
const PHASES = ["enter", "effect", "done"] as const;
type Point = { k: number; phase: (typeof PHASES)[number] };
const order = (p: Point) => p.k * 10 + PHASES.indexOf(p.phase);

/** One worker run; with a target it is SIGKILLed when it announces that point. */
function runWorker(args: string[], target?: Point): Promise<{ killed: boolean; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER, ...args], {
      env: { ...process.env, STRATA_URL: URL_, STRATA_API_KEY: KEY },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    let killed = false;
    const timer = setTimeout(() => child.kill("SIGKILL"), 30000);
    child.stderr.on("data", (d) => (err += d));
    createInterface({ input: child.stdout }).on("line", (line) => {
      out += line + "\n";
      const m = /^AT (\d+) (\w+)$/.exec(line);
      if (!m) return;
      if (target && Number(m[1]) === target.k && m[2] === target.phase) {
        killed = child.kill("SIGKILL");
      } else {
        child.stdin.write("go\n");
      }
    });
    child.stdin.on("error", () => undefined); // writes racing the kill
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (signal === "SIGKILL" && killed) resolve({ killed: true, out, err });
      else if (code === 0) resolve({ killed: false, out, err });
      else reject(new Error(`worker exited with ${code ?? signal}:\n${out}\n${err}`));
    });
  });
}

const lines = (path: string) => (existsSync(path) ? readFileSync(path, "utf8").split("\n").filter(Boolean) : []);

it("SIGKILLed workers: every side effect exactly once, no completed step re-run", async () => {
  const dir = mkdtempSync(join(tmpdir(), "strata-ts-crash-"));
  const job = jobId("crash");
  const ledger = join(dir, "ledger");
  const runs = join(dir, "runs");
  const rnd = (n: number) => Math.floor(Math.random() * n);
  // Random kill points in step order, always including one between a side effect and its
  // step's completion and one right after a completion.
  const targets = new Map<number, Point>();
  const add = (p: Point) => targets.set(order(p), p);
  add({ k: 1 + rnd(10), phase: "effect" });
  add({ k: 1 + rnd(10), phase: "done" });
  while (targets.size < 6) add({ k: 1 + rnd(10), phase: PHASES[rnd(3)]! });
  const plan = [...targets.values()].sort((a, b) => order(a) - order(b));

  const killedAt: Point[] = [];
  let final = "";
  for (let run = 0; run <= plan.length; run++) {
    const target = plan[run];
    const r = await runWorker([job, ledger, runs], target);
    if (target) {
      expect(r.killed, `run ${run} should have been killed at ${JSON.stringify(target)}:\n${r.out}\n${r.err}`).toBe(true);
      killedAt.push(target);
    } else {
      expect(r.killed).toBe(false);
      final = r.out;
    }
  }
  expect(final).toContain("FINAL");
  expect(killedAt.length).toBeGreaterThanOrEqual(5);
  expect(killedAt.some((p) => p.phase === "effect")).toBe(true);

  // Each side effect exactly once.
  const effects = lines(ledger);
  expect(effects.sort()).toEqual(Array.from({ length: 10 }, (_, i) => `effect ${i + 1}`).sort());
  // A step ran again only when a kill cut it short (enter/effect); never after completing.
  const ran = lines(runs);
  for (let k = 1; k <= 10; k++) {
    const cut = killedAt.filter((p) => p.k === k && p.phase !== "done").length;
    expect(ran.filter((l) => l === `run ${k}`).length, `runs of step ${k} (killed in it ${cut}x)`).toBe(1 + cut);
  }
  // Strata agrees: ten completed steps, ten events, the job done.
  const r = await client().resume(job, { events: 50 });
  expect(r.job.status).toBe("completed");
  expect(r.completed_steps).toHaveLength(10);
  expect(r.events.filter((e) => e.op === "ledger.write")).toHaveLength(10);
  console.log(`crash test: ${killedAt.length} SIGKILLs at ${killedAt.map((p) => `s${p.k}/${p.phase}`).join(", ")}; 10 side effects, each once`);
}, 60000);
