import {
  BaseStore,
  InvalidNamespaceError,
  getTextAtPath,
  tokenizePath,
  validateNamespace,
  type GetOperation,
  type Item,
  type ListNamespacesOperation,
  type MatchCondition,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";
import { StrataHTTP, type StrataHTTPOptions } from "./http.js";

/** Options of {@link StrataStore}. */
export interface StrataStoreOptions extends StrataHTTPOptions {
  /**
   * The Strata key-value namespace holding every item of this store (default "langgraph.store").
   * Two stores with different names are independent.
   */
  name?: string;
  /** The data subject of the items (Strata user_id): stored at user level, erased with the user. */
  userId?: string;
  /**
   * Semantic index: which fields of a value are embedded (by Strata's embedder) for
   * search({query}). Default ["$"] (the whole value as JSON), as InMemoryStore with an index.
   * false: no index (a query then ranks nothing, as InMemoryStore without embeddings).
   */
  index?: { fields?: string[] } | false;
}

interface StoredValue {
  /** The value as JSON text: Postgres' jsonb would reorder its keys. */
  json: string;
  /** Strata memory ids holding the item's indexed texts. */
  mids?: string[];
}

interface Listing {
  items: Item[];
  entries: Map<string, KVEntry>;
}

interface KVEntry {
  key: string;
  value: StoredValue;
  created_at: string;
  updated_at: string;
}

// ---- key encoding ----------------------------------------------------------------------------
// A LangGraph item (namespace tuple, key) is one Strata key: each namespace label and the key
// as base64url (A-Z a-z 0-9 - _), labels joined by ".", then ":" and the key. Neither separator
// is a base64url character, so the encoding is reversible for any strings; a Strata key is at
// most 200 characters (about 150 bytes of labels and key together).
const enc = (s: string) => Buffer.from(s, "utf8").toString("base64url");
const dec = (s: string) => Buffer.from(s, "base64url").toString("utf8");

/** The Strata key of an item. */
export function itemToKey(namespace: string[], key: string): string {
  const k = namespace.map(enc).join(".") + ":" + enc(key);
  if (k.length > 200 || k.length === 0 || k === ":") {
    throw new InvalidNamespaceError(
      `namespace and key are too long for Strata (${k.length} encoded characters, at most 200)`,
    );
  }
  return k;
}

/** The item (namespace tuple, key) of a Strata key: inverse of {@link itemToKey}. */
export function keyToItem(k: string): { namespace: string[]; key: string } {
  const i = k.lastIndexOf(":");
  const ns = k.slice(0, i);
  return { namespace: ns === "" ? [] : ns.split(".").map(dec), key: dec(k.slice(i + 1)) };
}

// InMemoryStore's filter semantics (utils.compareValues is not exported by the package).
function compareValues(itemValue: any, filterValue: any): boolean {
  const ops = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"];
  if (typeof filterValue === "object" && filterValue !== null && Object.keys(filterValue).every((k) => ops.includes(k))) {
    return Object.keys(filterValue).every((op) => {
      const v = filterValue[op];
      switch (op) {
        case "$eq": return itemValue === v;
        case "$ne": return itemValue !== v;
        case "$gt": return Number(itemValue) > Number(v);
        case "$gte": return Number(itemValue) >= Number(v);
        case "$lt": return Number(itemValue) < Number(v);
        case "$lte": return Number(itemValue) <= Number(v);
        case "$in": return Array.isArray(v) ? v.includes(itemValue) : false;
        case "$nin": return Array.isArray(v) ? !v.includes(itemValue) : true;
        default: return false;
      }
    });
  }
  return itemValue === filterValue;
}

function doesMatch(c: MatchCondition, ns: string[]): boolean {
  if (c.path.length > ns.length) return false;
  const off = c.matchType === "prefix" ? 0 : ns.length - c.path.length;
  return c.path.every((p, i) => p === "*" || ns[off + i] === p);
}

/**
 * LangGraph's long-term memory store (BaseStore) on Strata. Items live in Strata's key-value
 * memory (one KV namespace per store, see {@link itemToKey}); the indexed text of each item is
 * a Strata semantic memory (kind "langgraph_item"), so search({query}) is ranked by Strata's
 * hybrid vector + full-text search. Filters, prefixes, listNamespaces, offset and limit behave
 * as InMemoryStore's.
 *
 * ```ts
 * const store = new StrataStore({ url: process.env.STRATA_URL, apiKey: process.env.STRATA_API_KEY });
 * const graph = builder.compile({ checkpointer, store });
 * ```
 */
export class StrataStore extends BaseStore {
  readonly name: string;
  private readonly http: StrataHTTP;
  private readonly opts: StrataStoreOptions;
  private readonly fields: [string, string[]][] | undefined;

  constructor(options: StrataStoreOptions = {}) {
    super();
    this.opts = options;
    this.http = new StrataHTTP(options, "StrataStore");
    this.name = options.name ?? "langgraph.store";
    this.fields =
      options.index === false ? undefined : (options.index?.fields ?? ["$"]).map((p) => [p, p === "$" ? [p] : tokenizePath(p)]);
  }

  private scope(): Record<string, string> {
    return this.opts.userId ? { user_id: this.opts.userId } : {};
  }
  private scopeQuery(): string {
    return this.opts.userId ? `user_id=${encodeURIComponent(this.opts.userId)}` : "";
  }
  private kvPath(k?: string): string {
    return `/v1/kv/${encodeURIComponent(this.name)}` + (k === undefined ? "" : `/${encodeURIComponent(k)}`);
  }

  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const results: any[] = new Array(operations.length).fill(null);
    // Reads see the state before the batch's writes (as InMemoryStore, which applies puts last);
    // of several puts to one item the last wins.
    const puts = new Map<string, PutOperation>();
    // One listing of the store serves every search and listNamespaces of the batch.
    let all: Promise<Listing> | undefined;
    const everything = () => (all ??= this.listAll());
    for (let i = 0; i < operations.length; i++) {
      const op = operations[i] as Operation;
      if ("namespace" in op) validateNamespace(op.namespace, { allowReservedRoot: true });
      if ("value" in op) puts.set(itemToKey(op.namespace, op.key), op);
    }
    await Promise.all(
      operations.map(async (o, i) => {
        const op = o as Operation;
        if ("value" in op) return;
        if ("namespacePrefix" in op) results[i] = await this.searchOp(op, await everything());
        else if ("key" in op) results[i] = await this.getOp(op);
        else if ("matchConditions" in op || "limit" in op) results[i] = this.listNamespacesOp(op, await everything());
      }),
    );
    for (const [k, op] of puts) await this.putOp(k, op);
    return results as OperationResults<Op>;
  }

  private toItem(e: KVEntry): Item {
    const { namespace, key } = keyToItem(e.key);
    return { namespace, key, value: JSON.parse(e.value.json), createdAt: new Date(e.created_at), updatedAt: new Date(e.updated_at) };
  }

  private async getOp(op: GetOperation): Promise<Item | null> {
    const q = this.scopeQuery();
    const e: KVEntry | undefined = await this.http.request(
      "GET",
      `${this.kvPath(itemToKey(op.namespace, op.key))}?exact=true${q ? "&" + q : ""}`,
      undefined,
      { notFound: true },
    );
    return e ? this.toItem(e) : null;
  }

  /** Every live entry of the store, in key order (with the raw stored values). */
  private async listEntries(): Promise<KVEntry[]> {
    const out: KVEntry[] = [];
    let cursor: string | undefined;
    do {
      const q = new URLSearchParams({ limit: "1000" });
      if (this.opts.userId) q.set("user_id", this.opts.userId);
      if (cursor) q.set("cursor", cursor);
      const page: { items: KVEntry[]; next_cursor?: string } = await this.http.request("GET", `${this.kvPath()}?${q}`);
      out.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor);
    return out;
  }

  private async listAll(): Promise<Listing> {
    const es = await this.listEntries();
    return { items: es.map((e) => this.toItem(e)), entries: new Map(es.map((e) => [e.key, e])) };
  }

  private async searchOp(op: SearchOperation, listing: Listing): Promise<SearchItem[]> {
    const all = listing.items;
    if (op.namespacePrefix.length > 0) validateNamespace(op.namespacePrefix, { allowReservedRoot: true });
    const prefix = op.namespacePrefix;
    let candidates = all.filter((it) => prefix.every((p, i) => it.namespace[i] === p));
    if (op.filter) {
      const f = op.filter;
      candidates = candidates.filter((it) => Object.entries(f).every(([k, v]) => compareValues(it.value[k], v)));
    }
    const offset = op.offset ?? 0;
    const limit = op.limit ?? 10;
    if (!op.query || !this.fields) return candidates.slice(offset, offset + limit).map((it) => ({ ...it, score: undefined }));
    // Rank the candidates by Strata's search over the store's memories: a candidate's score is
    // the best of its indexed texts; candidates without an indexed text follow, unscored.
    const byMid = new Map<string, Item[]>();
    for (const it of candidates) {
      for (const mid of listing.entries.get(itemToKey(it.namespace, it.key))?.value.mids ?? []) {
        byMid.set(mid, [...(byMid.get(mid) ?? []), it]);
      }
    }
    const scored: [number, Item][] = [];
    if (byMid.size > 0) {
      const res: { items: { memory: { id: string }; score: { score: number } }[] } = await this.http.request(
        "POST",
        "/v1/memories/search",
        { query: op.query, kinds: ["langgraph_item"], metadata: { langgraph_store: this.name }, top_k: 100, ...this.scope() },
        { read: true },
      );
      for (const r of res.items) for (const it of byMid.get(r.memory.id) ?? []) scored.push([r.score.score, it]);
    }
    const seen = new Set<string>();
    const kept: SearchItem[] = [];
    for (const [score, it] of scored) {
      const k = itemToKey(it.namespace, it.key);
      if (seen.has(k)) continue;
      seen.add(k);
      kept.push({ ...it, score });
    }
    for (const it of candidates) {
      const k = itemToKey(it.namespace, it.key);
      if (!seen.has(k)) kept.push({ ...it, score: undefined });
    }
    return kept.slice(offset, offset + limit);
  }

  private listNamespacesOp(op: ListNamespacesOperation, { items: all }: Listing): string[][] {
    const seen = new Map<string, string[]>();
    for (const it of all) seen.set(it.namespace.join("\u0000"), it.namespace);
    let nss = [...seen.values()];
    if (op.matchConditions?.length) nss = nss.filter((ns) => op.matchConditions!.every((c) => doesMatch(c, ns)));
    if (op.maxDepth !== undefined) {
      const cut = new Map<string, string[]>();
      for (const ns of nss) cut.set(ns.slice(0, op.maxDepth).join("\u0000"), ns.slice(0, op.maxDepth));
      nss = [...cut.values()];
    }
    nss.sort((a, b) => a.join(":").localeCompare(b.join(":")));
    return nss.slice(op.offset ?? 0, (op.offset ?? 0) + (op.limit ?? nss.length));
  }

  private texts(op: PutOperation): string[] {
    if (!this.fields || op.index === false || op.value === null) return [];
    const paths = op.index === undefined || op.index === null ? this.fields : op.index.map((p) => [p, tokenizePath(p)] as [string, string[]]);
    const out = new Set<string>();
    for (const [path, toks] of paths) for (const t of getTextAtPath(op.value, path)) if (t.trim()) out.add(t);
    return [...out];
  }

  private async putOp(k: string, op: PutOperation): Promise<void> {
    if (op.value === null) {
      const q = this.scopeQuery();
      await this.http.request("DELETE", `${this.kvPath(k)}${q ? "?" + q : ""}`, undefined, { notFound: true });
      return;
    }
    const mids = await Promise.all(
      this.texts(op).map(async (text) => {
        const m: { id: string } = await this.http.request("POST", "/v1/memories", {
          text: text.slice(0, 16384),
          kind: "langgraph_item",
          metadata: { langgraph_store: this.name },
          ...this.scope(),
        });
        return m.id;
      }),
    );
    const stored: StoredValue = { json: JSON.stringify(op.value), ...(mids.length ? { mids } : {}) };
    await this.http.request("PUT", this.kvPath(k), { value: stored, ...this.scope() });
  }
}
