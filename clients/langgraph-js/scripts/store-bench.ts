// StrataStore vs InMemoryStore: the same loop of put + get + filtered search (+ a query search
// every 10th round) on both, one after the other, in one run. Prints ops/s of each and the ratio.
//
//   STRATA_URL=... STRATA_API_KEY=... npx tsx scripts/store-bench.ts --rounds 200
import { InMemoryStore } from "@langchain/langgraph-checkpoint";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { StrataStore } from "../src/index.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "200" } } });
const rounds = Number(values.rounds);
const embed = (t: string) => {
  const v = new Array(64).fill(0);
  for (const w of t.split(/\W+/)) v[[...w].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 0) % 64] += 1;
  return v;
};
const embeddings = { embedDocuments: async (ts: string[]) => ts.map(embed), embedQuery: async (t: string) => embed(t) } as any;

async function loop(store: any): Promise<number> {
  const ns = ["bench", randomUUID(), "memories"];
  let ops = 0;
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) {
    await store.put(ns, `k${i}`, { text: `memory number ${i} about topic ${i % 7}`, topic: i % 7 });
    await store.get(ns, `k${i}`);
    await store.search(ns, { filter: { topic: i % 7 }, limit: 5 });
    ops += 3;
    if (i % 10 === 0) {
      await store.search(ns, { query: `topic ${i % 7}`, limit: 5 });
      ops++;
    }
  }
  return ops / ((performance.now() - t0) / 1000);
}

const mem = await loop(new InMemoryStore({ index: { dims: 64, embeddings, fields: ["text"] } }));
const strata = await loop(new StrataStore({ name: "bench." + randomUUID().slice(0, 8), index: { fields: ["text"] } }));
console.log(JSON.stringify({ rounds, inmemory_ops_s: Math.round(mem), strata_ops_s: Math.round(strata), ratio: +(strata / mem).toFixed(5) }));
