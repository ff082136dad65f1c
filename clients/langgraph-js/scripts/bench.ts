// Side-by-side checkpointer benchmark: put+get pairs per second and latency percentiles for
// @langchain/langgraph-checkpoint-postgres's PostgresSaver and StrataSaver, on the same
// Postgres server, at a given concurrency. Each worker owns a thread and loops: put the next
// checkpoint (3 channels, one ~1 KB message list that grows by one message per step and
// two small channels, of which one changes per step) and getTuple the latest.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/lg_bench STRATA_URL=http://127.0.0.1:8080 \
//   STRATA_API_KEY=sk_... npx tsx scripts/bench.ts --concurrency 8 --seconds 20 --saver both
//
// --no-idempotency-keys runs StrataSaver without Idempotency-Key headers.
//
// --rounds N interleaves the savers N times in this one process (each saver created once and
// kept warm: its connections, pool and JIT), the order flipped every round (Strata, Postgres;
// Postgres, Strata; ...); each run prints one JSON line with its round. --warmup is the first
// run's unmeasured lead-in, --round-warmup every later run's.
//
// PostgresSaver gets its own database (DATABASE_URL; setup() creates its tables). The Strata
// server must use the same Postgres server.
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { emptyCheckpoint, uuid6, type BaseCheckpointSaver, type Checkpoint } from "@langchain/langgraph-checkpoint";
import { parseArgs } from "node:util";
import { StrataSaver } from "../src/index.js";

const { values: args } = parseArgs({
  options: {
    concurrency: { type: "string", default: "8" },
    seconds: { type: "string", default: "20" },
    warmup: { type: "string", default: "3" },
    saver: { type: "string", default: "both" },
    rounds: { type: "string", default: "1" },
    "round-warmup": { type: "string", default: "1" },
    "no-idempotency-keys": { type: "boolean", default: false },
  },
});
const concurrency = Number(args.concurrency);
const seconds = Number(args.seconds);
const warmup = Number(args.warmup);
const roundWarmup = Number(args["round-warmup"]);

async function worker(saver: BaseCheckpointSaver, thread: string, until: number, from: number, lat: number[]) {
  const config = { configurable: { thread_id: thread, checkpoint_ns: "" } };
  let parent: string | undefined;
  let cp: Checkpoint = emptyCheckpoint();
  const messages: string[] = [];
  for (let step = 0; Date.now() < until; step++) {
    messages.push(`message ${step}: ` + "lorem ipsum dolor sit amet ".repeat(3));
    if (messages.length > 10) messages.shift();
    const versions = { ...cp.channel_versions };
    const newVersions: Record<string, number> = { messages: step + 1 };
    newVersions[step % 2 === 0 ? "counter" : "route"] = step + 1;
    Object.assign(versions, newVersions);
    cp = {
      v: 4,
      id: uuid6(-1),
      ts: new Date().toISOString(),
      channel_values: { messages: [...messages], counter: step, route: `node-${step % 5}` },
      channel_versions: versions,
      versions_seen: { agent: { messages: step } },
    };
    const t0 = performance.now();
    const next = await saver.put(
      { configurable: { ...config.configurable, checkpoint_id: parent } },
      cp,
      { source: "loop", step, parents: {} },
      newVersions,
    );
    const got = await saver.getTuple({ configurable: { thread_id: thread, checkpoint_ns: "" } });
    const t1 = performance.now();
    if (got?.checkpoint.id !== cp.id) throw new Error(`read ${got?.checkpoint.id}, wrote ${cp.id}`);
    parent = next.configurable?.checkpoint_id;
    if (Date.now() >= from) lat.push(t1 - t0);
  }
}

function pct(sorted: number[], p: number) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function run(name: string, saver: BaseCheckpointSaver, round: number, lead: number) {
  const start = Date.now();
  const from = start + lead * 1000;
  const until = from + seconds * 1000;
  const lat: number[] = [];
  const run = `${name}-${Date.now()}`;
  await Promise.all(Array.from({ length: concurrency }, (_, i) => worker(saver, `bench-${run}-${i}`, until, from, lat)));
  lat.sort((a, b) => a - b);
  const r = {
    saver: name,
    round,
    concurrency,
    pairs: lat.length,
    pairs_per_s: Math.round(lat.length / seconds),
    p50_ms: +pct(lat, 50).toFixed(2),
    p95_ms: +pct(lat, 95).toFixed(2),
    p99_ms: +pct(lat, 99).toFixed(2),
  };
  console.log(JSON.stringify(r));
  return r;
}

const which = args.saver === "both" ? ["strata", "postgres"] : [args.saver!];
const savers: Record<string, [string, BaseCheckpointSaver]> = {};
let pgSaver: PostgresSaver | undefined;
for (const name of which) {
  if (name === "postgres") {
    if (!process.env.DATABASE_URL) throw new Error("set DATABASE_URL for PostgresSaver");
    pgSaver = PostgresSaver.fromConnString(process.env.DATABASE_URL);
    await pgSaver.setup();
    savers[name] = ["PostgresSaver", pgSaver];
  } else {
    const keys = !args["no-idempotency-keys"];
    savers[name] = [keys ? "StrataSaver" : "StrataSaver (idempotencyKeys: false)", new StrataSaver({ idempotencyKeys: keys })];
  }
}
const warmed = new Set<string>();
for (let round = 1; round <= Number(args.rounds); round++) {
  const order = round % 2 === 1 ? which : [...which].reverse();
  for (const name of order) {
    await run(savers[name][0], savers[name][1], round, warmed.has(name) ? roundWarmup : warmup);
    warmed.add(name);
  }
}
await pgSaver?.end();
