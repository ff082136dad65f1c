// Strata's memory write and search against the mem0ai package's open-source Memory (the
// peer a user would run instead), through this one harness, one operation at a time,
// interleaved in rounds (issue 26 item 6). Both sides:
//   - store in the same Postgres server (mem0: its pgvector store with an HNSW index, in a
//     database of its own; Strata: its memories table);
//   - embed with the same fake OpenAI-compatible server (EMBED_URL, Strata's lexical vectors
//     of 384 dims), so each pays the same embedding cost;
//   - write without an LLM (mem0: add(..., {infer: false}); Strata: POST /v1/memories) and
//     search a user's memories for the 10 best (mem0: search(q, {filters: {user_id}, topK:
//     10}); Strata: POST /v1/memories/search).
// mem0 runs with disableHistory (its SQLite history would only add work to its side).
// Both sides stay warm across the rounds (one Memory and its pg pool, one keep-alive agent);
// each round runs both sides' adds, then both sides' searches, which side goes first flipped
// every round (issue 42 item 6). Prints one JSON line per round: {"round": r, and for each of
// mem0-add, strata-add, mem0-search, strata-search its ops/s, p50 and p99 in ms}. Run by
// `go test -run '^$' -bench BenchmarkMem0Peer ./internal/mem0/`.
import http from "node:http";
import { Memory } from "mem0ai/oss";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (go test -bench BenchmarkMem0Peer ./internal/mem0/ sets it)`);
  return v;
};
const url = env("STRATA_URL"), key = env("STRATA_API_KEY"), pgURL = env("MEM0_PG_URL"), embedURL = env("EMBED_URL");
// BENCH_N adds per side per round (default 500; 200 before 2026-12-06's third session, whose
// p99 was the second-worst of 200 samples; they also grow the data both sides search);
// BENCH_SEARCH_N searches per side per round (default 1000; they change no data: more of them
// only steady each round's p50 and p99).
const n = Number(process.env.BENCH_N || 500), nSearch = Number(process.env.BENCH_SEARCH_N || 1000);
const rounds = Number(process.env.BENCH_ROUNDS || 3);
const users = 10; // each side spreads its writes over 10 users; searches hit the same scopes

const memory = new Memory({
  version: "v1.1",
  embedder: { provider: "openai", config: { apiKey: "sk-bench", baseURL: embedURL, model: "bench-embed" } },
  vectorStore: {
    provider: "pgvector",
    config: { connectionString: pgURL, collectionName: "memories", embeddingModelDims: 384, hnsw: true },
  },
  llm: { provider: "openai", config: { apiKey: "sk-bench", baseURL: embedURL, model: "unused-with-infer-false" } },
  disableHistory: true,
});

// Strata's side talks HTTP the way Strata's own JS clients do (clients/langgraph-js/src/http.ts):
// node:http on keep-alive connections, which costs about half the CPU of the global fetch.
const agent = new http.Agent({ keepAlive: true });
const v1 = (path, body) =>
  new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = http.request(url + path, {
      method: "POST", agent,
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) },
    }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        if (res.statusCode < 200 || res.statusCode >= 300) reject(new Error(`${path}: ${res.statusCode} ${text}`));
        else resolve(JSON.parse(text));
      });
    });
    req.on("error", reject);
    req.end(payload);
  });
const text = (side, i) => `${side} note ${i}: shot s${i}q graded with lut v${i * 7}k for channel c${i % 17}m`;
const query = (i) => `graded lut for channel c${i % 17}m`;
const sides = {
  "mem0-add": async (i) => {
    const r = await memory.add([{ role: "user", content: text("mem0", i) }], { userId: `u${i % users}`, infer: false });
    if (!r?.results?.length) throw new Error(`mem0 add returned ${JSON.stringify(r)}`);
  },
  "strata-add": (i) => v1("/v1/memories", { text: text("strata", i), user_id: `u${i % users}` }),
  "mem0-search": async (i) => {
    const r = await memory.search(query(i), { filters: { user_id: `u${i % users}` }, topK: 10 });
    if (!r?.results?.length) throw new Error(`mem0 search found nothing: ${JSON.stringify(r)}`);
  },
  "strata-search": async (i) => {
    const r = await v1("/v1/memories/search", { query: query(i), user_id: `u${i % users}`, top_k: 10 });
    if (!r?.items?.length) throw new Error(`strata search found nothing: ${JSON.stringify(r)}`);
  },
};
// Warm both (connections, mem0's table and index creation, plans, the JIT).
for (let i = 0; i < 20; i++) for (const name of Object.keys(sides)) await sides[name](1e6 + i);

const q = (a, p) => {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
for (let r = 0; r < rounds; r++) {
  // Alternate which side goes first, round by round.
  const order = r % 2 === 0 ? ["mem0", "strata"] : ["strata", "mem0"];
  const out = { round: r + 1 };
  for (const op of ["add", "search"]) {
    for (const side of order) {
      const name = `${side}-${op}`;
      const count = op === "add" ? n : nSearch;
      const lat = [];
      const t0 = performance.now();
      for (let i = 0; i < count; i++) {
        const s = performance.now();
        await sides[name](i + r * count);
        lat.push(performance.now() - s);
      }
      out[name] = { ops: count / ((performance.now() - t0) / 1000), p50: q(lat, 0.5), p99: q(lat, 0.99) };
    }
  }
  console.log(JSON.stringify(out));
}
process.exit(0); // mem0's pg client keeps the event loop alive
