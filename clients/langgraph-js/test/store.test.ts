// StrataStore against LangGraph's InMemoryStore: the same operations on both, every answer
// compared. internal/langgraphtest runs it from `go test` (STRATA_URL, STRATA_ADMIN_KEY).
//
// How answers are compared: get answers (namespace, key, value) exactly; listNamespaces
// exactly (both sort); searches without a query as the set of (namespace, key, value), and
// with a limit below the number of matches by size and membership (InMemoryStore answers in
// insertion order, Strata in key order); searches with a query as sets when every match fits
// in the limit (the ranking comes from different embeddings: InMemoryStore's here is a toy
// bag-of-words, Strata's its own), and the top hit exactly where the query repeats one item's
// text word for word. One difference is by design: InMemoryStore keeps listing a namespace after
// its last item is deleted; Strata does not (the comparison drops those from InMemoryStore's).
import { InMemoryStore, type Item } from "@langchain/langgraph-checkpoint";
import { randomUUID } from "node:crypto";
import { StrataStore, itemToKey, keyToItem } from "../src/index.js";

const url = process.env.STRATA_URL;
const adminKey = process.env.STRATA_ADMIN_KEY;
if (!url || !adminKey) throw new Error("set STRATA_URL and STRATA_ADMIN_KEY");

async function agentKey(org: string): Promise<string> {
  const res = await fetch(`${url}/v1/admin/keys`, {
    method: "POST",
    headers: { Authorization: `Bearer ${adminKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ org_id: org, role: "agent" }),
  });
  if (res.status !== 201) throw new Error(`creating an agent key: ${res.status} ${await res.text()}`);
  return (await res.json()).key;
}

// A deterministic toy embedder for InMemoryStore (hashed bag of words).
const embed = (t: string) => {
  const v = new Array(64).fill(0);
  for (const w of t.toLowerCase().match(/[a-z0-9]+/g) ?? []) {
    let h = 0;
    for (const c of w) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    v[h % 64] += 1;
  }
  return v;
};
const embeddings = {
  embedDocuments: async (ts: string[]) => ts.map(embed),
  embedQuery: async (t: string) => embed(t),
} as any;

const norm = (it: Item | null) => (it ? { namespace: it.namespace, key: it.key, value: it.value } : null);
const set = (xs: Item[]) => xs.map((x) => JSON.stringify(norm(x))).sort();

describe("StrataStore", () => {
  let strata: StrataStore;
  let mem: InMemoryStore;
  beforeAll(async () => {
    strata = new StrataStore({ url, apiKey: await agentKey(`lg-store-${randomUUID()}`), index: { fields: ["text"] } });
    mem = new InMemoryStore({ index: { dims: 64, embeddings, fields: ["text"] } });
  });

  const both = async <T>(f: (s: any) => Promise<T>): Promise<[T, T]> => [await f(mem), await f(strata)];

  it("encodes namespaces and keys reversibly", () => {
    for (const [ns, k] of [
      [["a", "b"], "k"],
      [["üñí.cøde:", "with space/slash"], ""],
      [[], "x"],
      [["a:b"], "c.d"],
    ] as [string[], string][]) {
      const enc = itemToKey(ns, k);
      expect(enc).toMatch(/^[A-Za-z0-9._:-]{1,200}$/);
      expect(keyToItem(enc)).toEqual({ namespace: ns, key: k });
    }
    expect(() => itemToKey(["x".repeat(200)], "k")).toThrow(/too long/);
  });

  it("answers every operation as InMemoryStore does", async () => {
    const docs: [string[], string, Record<string, any>][] = [
      [["users", "u1", "memories"], "m1", { text: "likes dark roast coffee in the morning", kind: "pref", n: 1 }],
      [["users", "u1", "memories"], "m2", { text: "works on video editing pipelines", kind: "fact", n: 2 }],
      [["users", "u1", "prefs"], "theme", { text: "prefers a dark theme", kind: "pref", n: 3 }],
      [["users", "u2", "memories"], "m1", { text: "allergic to peanuts", kind: "fact", n: 4 }],
      [["docs"], "d1", { text: "python tutorial for beginners", kind: "doc", n: 5 }],
      [["docs", "guides"], "d2", { text: "typescript guide to generics", kind: "doc", n: 6 }],
      [["users", "u2", "memories"], "noindex", { other: "no text field", kind: "fact", n: 7 }],
    ];
    for (const [ns, k, v] of docs) await both((s) => s.put(ns, k, v));

    // get: hits, misses, an update, a delete.
    for (const [ns, k] of docs) {
      const [a, b] = await both((s) => s.get(ns, k));
      expect(norm(b)).toEqual(norm(a));
    }
    let [a, b]: [any, any] = await both((s) => s.get(["users", "u1", "memories"], "nope"));
    expect(b).toBeNull();
    expect(a).toBeNull();
    await both((s) => s.put(["users", "u1", "memories"], "m2", { text: "works on colour grading", kind: "fact", n: 22 }));
    [a, b] = await both((s) => s.get(["users", "u1", "memories"], "m2"));
    expect(norm(b)).toEqual(norm(a));
    expect(b.updatedAt.getTime()).toBeGreaterThanOrEqual(b.createdAt.getTime());
    await both((s) => s.delete(["docs", "guides"], "d2"));
    [a, b] = await both((s) => s.get(["docs", "guides"], "d2"));
    expect(b).toBeNull();
    expect(a).toBeNull();

    // search without a query: prefixes, filters with each operator, offset/limit.
    const searches: [string[], any][] = [
      [[], {}],
      [["users"], {}],
      [["users", "u1"], {}],
      [["users", "u1", "memories"], {}],
      [["users"], { filter: { kind: "fact" } }],
      [["users"], { filter: { n: { $gt: 2 } } }],
      [["users"], { filter: { n: { $gte: 3, $lt: 7 } } }],
      [[], { filter: { kind: { $in: ["doc", "pref"] } } }],
      [[], { filter: { kind: { $nin: ["doc"] } } }],
      [[], { filter: { kind: { $ne: "fact" }, n: { $lte: 5 } } }],
      [["nothing"], {}],
      [["use"], {}], // a label prefix is not a namespace prefix
    ];
    for (const [prefix, opts] of searches) {
      const [x, y] = await both((s) => s.search(prefix, opts));
      expect(set(y), JSON.stringify([prefix, opts])).toEqual(set(x));
      expect(y.every((i: any) => i.score === undefined)).toBe(true);
    }
    const [all] = await both((s) => s.search([], { limit: 100 }));
    for (const [limit, offset] of [[2, 0], [2, 2], [3, 5]]) {
      const [x, y] = await both((s) => s.search([], { limit, offset }));
      expect(y.length).toBe(x.length);
      for (const it of y) expect(set(all)).toContain(JSON.stringify(norm(it)));
    }
    // The pages of Strata's order partition the whole answer.
    const pages = [...(await strata.search([], { limit: 3, offset: 0 })), ...(await strata.search([], { limit: 3, offset: 3 }))];
    expect(set(pages)).toEqual(set(all));

    // search with a query: the same set when everything fits; an exact text ranks first.
    for (const [prefix, opts] of [
      [["users"], { query: "coffee" }],
      [[], { query: "dark", filter: { kind: "pref" } }],
      [["users", "u2"], { query: "peanut allergy" }],
    ] as [string[], any][]) {
      const [x, y] = await both((s) => s.search(prefix, opts));
      expect(set(y)).toEqual(set(x));
    }
    const [x, y] = await both((s) => s.search(["users"], { query: "allergic to peanuts" }));
    expect(norm(y[0])).toEqual(norm(x[0]));
    expect(y[0].score).toBeGreaterThan(0);
    // The item without the indexed field comes back unscored, after the scored ones.
    const u2 = await strata.search(["users", "u2"], { query: "allergic to peanuts" });
    expect(u2.map((i) => [i.key, i.score === undefined])).toEqual([["m1", false], ["noindex", true]]);

    const liveNow = [...(mem as any).data.entries()].filter(([, m]: any) => m.size > 0).map(([k]: any) => k.split(":"));
    const holdsItems = (ns: string[]) => liveNow.some((l: string[]) => ns.every((x, i) => l[i] === x));
    {
      // The one documented difference: InMemoryStore still lists a namespace whose last item
      // was deleted (its map stays); Strata lists the namespaces that hold items.
      const [p, q] = await both((s) => s.listNamespaces({}));
      expect(p).toContainEqual(["docs", "guides"]);
      expect(q).toEqual(p.filter(holdsItems));
    }
    // With d2 back, the namespaces agree exactly, paginated too.
    await both((s) => s.put(["docs", "guides"], "d2", { text: "typescript guide to generics", kind: "doc", n: 6 }));
    // listNamespaces: prefix, suffix, wildcards, maxDepth, offset/limit.
    for (const opts of [
      {},
      { prefix: ["users"] },
      { prefix: ["users", "*", "memories"] },
      { suffix: ["memories"] },
      { prefix: ["users"], suffix: ["prefs"] },
      { maxDepth: 1 },
      { maxDepth: 2, prefix: ["users"] },
      { limit: 2, offset: 1 },
    ]) {
      const [p, q] = await both((s) => s.listNamespaces(opts));
      expect(q, JSON.stringify(opts)).toEqual(p);
    }

    // batch: mixed operations; reads see the state before the batch's puts.
    const ops = [
      { namespace: ["batch"], key: "b1", value: { text: "one", n: 1 } },
      { namespace: ["docs"], key: "d1" },
      { namespacePrefix: ["users", "u1"], limit: 10 },
      { matchConditions: [{ matchType: "prefix", path: ["users"] }], limit: 10, offset: 0 },
      { namespace: ["batch"], key: "b1" },
    ];
    const [r1, r2] = await both((s) => s.batch(ops as any));
    expect(r2[0]).toBeNull();
    expect(norm(r2[1])).toEqual(norm(r1[1]));
    expect(set(r2[2])).toEqual(set(r1[2]));
    expect(r2[3]).toEqual(r1[3]);
    expect(norm(r2[4])).toEqual(norm(r1[4]));
    const [g1, g2] = await both((s) => s.get(["batch"], "b1"));
    expect(norm(g2)).toEqual(norm(g1));

    // Errors as InMemoryStore raises them.
    for (const bad of [[""], ["langgraph"], ["a.b", ""]]) {
      await expect(mem.put(bad, "k", { a: 1 })).rejects.toThrow();
      await expect(strata.put(bad, "k", { a: 1 })).rejects.toThrow();
    }
  });

  it("retries a write whose answer was lost with the same Idempotency-Key", async () => {
    // Every first attempt reaches the server and its answer is dropped (as a timeout after
    // the commit would); the retry carries the same key, so the write applies once.
    const seen = new Map<string, string[]>();
    const lossy: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      const key = (init?.headers as Record<string, string>)["Idempotency-Key"];
      if (key === undefined) return res;
      const tries = seen.get(key) ?? [];
      tries.push(String(input));
      seen.set(key, tries);
      if (tries.length === 1) {
        await res.body?.cancel();
        throw new TypeError("fetch failed (answer lost)");
      }
      return res;
    };
    const key = await agentKey(`lg-store-${randomUUID()}`);
    const s = new StrataStore({ url, apiKey: key, fetch: lossy, index: { fields: ["text"] } });
    await s.put(["retry"], "k", { text: "written once" });
    await s.put(["retry"], "k2", { text: "another" });
    expect(seen.size).toBe(4); // two PUTs and two memories, each with its own key...
    for (const tries of seen.values()) expect(tries.length).toBe(2); // ...sent twice
    expect((await s.get(["retry"], "k"))?.value).toEqual({ text: "written once" });
    const hist = await fetch(`${url}/v1/kv/langgraph.store/${itemToKey(["retry"], "k")}/history`, {
      headers: { Authorization: `Bearer ${key}` },
    });
    expect((await hist.json()).items.length).toBe(1); // one version: the retry replayed
    const hits = await s.search(["retry"], { query: "written once" });
    expect(hits[0].key).toBe("k");
    // A 4xx is not retried and surfaces as the API's problem.
    const bad = new StrataStore({ url, apiKey: "sk_wrong" });
    await expect(bad.get(["x"], "y")).rejects.toMatchObject({ name: "StrataError", status: 401 });
  });

  it("keeps one org's items from another", async () => {
    const other = new StrataStore({ url, apiKey: await agentKey(`lg-store-${randomUUID()}`) });
    await strata.put(["iso"], "secret", { text: "only mine" });
    expect(await other.get(["iso"], "secret")).toBeNull();
    expect(await other.search(["iso"], { query: "only mine" })).toEqual([]);
  });
});
