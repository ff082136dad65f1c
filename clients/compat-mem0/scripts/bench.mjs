// The Mem0 call path against Strata's own: the same writes and searches made through the
// mem0ai MemoryClient (→ /mem0 → in-process /v1) and with fetch straight to /v1, interleaved
// in rounds, one client at a time. Prints one JSON line: ops/s and p50/p99 of each side.
// Run by `go test -run '^$' -bench BenchmarkMem0CallPath ./internal/mem0/`.
import { MemoryClient } from "mem0ai";

const url = process.env.STRATA_URL, key = process.env.STRATA_API_KEY;
const n = Number(process.env.BENCH_N || 200), rounds = Number(process.env.BENCH_ROUNDS || 3);
const client = new MemoryClient({ apiKey: key, host: `${url}/mem0` });
const v1 = (path, body) => fetch(url + path, { method: "POST", body: JSON.stringify(body),
  headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" } }).then(async (r) => {
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
});
const sides = {
  "mem0-add": (i, u) => client.add([{ role: "user", content: `note ${i} about topic ${i % 17} for ${u}` }], { user_id: u, infer: false }),
  "v1-add": (i, u) => v1("/v1/memories", { text: `note ${i} about topic ${i % 17} for ${u}`, user_id: u, trust: "user_stated", metadata: { role: "user" } }),
  "mem0-search": (i, u) => client.search(`topic ${i % 17}`, { filters: { user_id: u }, topK: 10 }),
  "v1-search": (i, u) => v1("/v1/memories/search", { query: `topic ${i % 17}`, user_id: u, top_k: 10 }),
};
const lat = Object.fromEntries(Object.keys(sides).map((k) => [k, []]));
const time = Object.fromEntries(Object.keys(sides).map((k) => [k, 0]));
for (let r = 0; r < rounds; r++) {
  for (const name of ["mem0-add", "v1-add", "mem0-search", "v1-search"]) {
    const u = `${name.split("-")[0]}-r${r}`; // each side its own user: same scope sizes
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const s = performance.now();
      await sides[name](i + r * n, u);
      lat[name].push(performance.now() - s);
    }
    time[name] += performance.now() - t0;
  }
}
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const out = {};
for (const k of Object.keys(sides)) out[k] = { ops: (n * rounds) / (time[k] / 1000), p50: q(lat[k], 0.5), p99: q(lat[k], 0.99) };
console.log(JSON.stringify(out));
