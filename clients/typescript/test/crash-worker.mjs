// The crash test's worker: runs a 10-step job with the built package (dist/). Each step writes
// one side effect to an fsync'd ledger through job.once(). At every interesting point it
// prints "AT <step> <phase>" and waits for a line on stdin, so the test can SIGKILL it exactly
// there:
//   enter  - inside the step, before its side effect
//   effect - the side effect is done and its event appended, the step is not completed yet
//   done   - the step is completed
// Usage: node crash-worker.mjs <job> <ledger> <runs>   (STRATA_URL, STRATA_API_KEY)
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { createInterface } from "node:readline";
import { Strata } from "../dist/index.js";

const [job, ledger, runs] = process.argv.slice(2);
const STEPS = 10;

function appendSynced(path, line) {
  const fd = openSync(path, "a");
  try {
    writeSync(fd, line + "\n");
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

const waiting = [];
createInterface({ input: process.stdin }).on("line", () => waiting.shift()?.());
const at = (k, phase) =>
  new Promise((resolve) => {
    waiting.push(resolve);
    process.stdout.write(`AT ${k} ${phase}\n`);
  });

const strata = new Strata({ minBackoffMs: 20, maxBackoffMs: 500 });
await strata.putJob(job, { goal: "crash test: ten steps, one ledger line each" });
// A stable owner: a restarted worker reclaims its own lease at once.
const j = strata.job(job, { owner: "crash-worker", leaseSeconds: 30 });
for (let k = 1; k <= STEPS; k++) {
  const out = await j.step(`s${k}`, async () => {
    appendSynced(runs, `run ${k}`);
    await at(k, "enter");
    const line = await j.once("ledger.write", { step: k }, () => {
      appendSynced(ledger, `effect ${k}`);
      return `line-${k}`;
    });
    await at(k, "effect");
    return { k, line };
  });
  if (out.k !== k) throw new Error(`step s${k} answered ${JSON.stringify(out)}`);
  await at(k, "done");
}
await strata.completeJob(job, { outcome: { steps: STEPS } });
process.stdout.write("FINAL\n");
process.exit(0);
