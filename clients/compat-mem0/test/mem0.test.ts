// The mem0ai package's MemoryClient, unchanged, pointed at Strata: the one-line switch is
// `host: STRATA_URL + "/mem0"` and a Strata API key. Every documented call is made and its
// answer asserted against what Strata stored (read back through Strata's own /v1 API).
import { describe, expect, it } from "vitest";
import { MemoryClient, MemoryNotFoundError, AuthenticationError, ValidationError } from "mem0ai";

const url = process.env.STRATA_URL!;
const key = process.env.STRATA_API_KEY!;
const other = process.env.STRATA_OTHER_KEY!;
const host = `${url}/mem0`;
const run = Math.random().toString(36).slice(2, 8); // isolates reruns against one server

async function v1(path: string, init: RequestInit = {}, k = key): Promise<any> {
  const r = await fetch(url + path, { ...init, headers: { Authorization: `Bearer ${k}`, "Content-Type": "application/json" } });
  return { status: r.status, body: await r.json() };
}

describe("mem0ai MemoryClient against Strata", () => {
  const client = new MemoryClient({ apiKey: key, host });
  const user = `alice-${run}`;

  it("adds messages without inference as memories in the user's and run's scope", async () => {
    const events = await client.add(
      [
        { role: "user", content: "I prefer window seats on long flights." },
        { role: "assistant", content: "Noted: window seats." },
      ],
      { user_id: user, run_id: `trip-${run}`, metadata: { topic: "travel" }, infer: false },
    );
    expect(events).toHaveLength(2);
    expect(events.map((e: any) => e.event)).toEqual(["ADD", "ADD"]);
    expect((events[0] as any).data.memory).toBe("I prefer window seats on long flights.");
    // Stored as Strata memories: the user's, in session trip-<run>, with the role in metadata.
    const m = await v1(`/v1/memories/${events[0].id}`);
    expect(m.status).toBe(200);
    expect(m.body.user_id).toBe(user);
    expect(m.body.session_id).toBe(`trip-${run}`);
    expect(m.body.metadata).toMatchObject({ topic: "travel", role: "user" });
    expect(m.body.trust).toBe("user_stated");
    // The same message again is one memory (Strata deduplicates): NOOP, same id.
    const again = await client.add([{ role: "user", content: "I prefer window seats on long flights." }], {
      user_id: user, run_id: `trip-${run}`, infer: false,
    });
    expect(again[0].event).toBe("NOOP");
    expect(again[0].id).toBe(events[0].id);
  });

  it("searches with filters and answers Mem0's result shape", async () => {
    await client.add([{ role: "user", content: "My daughter is allergic to peanuts." }], { user_id: user, infer: false });
    await client.add([{ role: "user", content: "Bob likes jazz." }], { user_id: `bob-${run}`, infer: false });
    const res = await client.search("peanut allergy", { filters: { user_id: user }, topK: 5 });
    expect(res.results.length).toBeGreaterThan(0);
    const top: any = res.results[0];
    expect(top.memory).toBe("My daughter is allergic to peanuts.");
    expect(top.userId).toBe(user);
    expect(typeof top.score).toBe("number");
    expect(top.hash).toMatch(/^[0-9a-f]{32}$/);
    // Another user's memories never answer this user's search.
    for (const r of res.results as any[]) expect(r.userId).toBe(user);
    // AND of entity filters; a filter Strata cannot express is refused, naming it.
    const and = await client.search("window seat", { filters: { AND: [{ user_id: user }, { run_id: `trip-${run}` }] } });
    expect(and.results.map((r: any) => r.memory)).toContain("I prefer window seats on long flights.");
    await expect(client.search("x", { filters: { OR: [{ user_id: user }] } })).rejects.toBeInstanceOf(ValidationError);
  });

  it("lists with getAll, pages, gets one memory", async () => {
    const all = await client.getAll({ filters: { user_id: user } });
    expect(all.count).toBe(3);
    expect(all.results).toHaveLength(3);
    const page = await client.getAll({ filters: { user_id: user }, page: 2, pageSize: 2 });
    expect(page.count).toBe(3);
    expect(page.results).toHaveLength(1);
    expect(page.previous).toContain("page=1");
    expect(page.next).toBeNull();
    const one: any = await client.get(all.results[0].id);
    expect(one.id).toBe(all.results[0].id);
    expect(one.memory).toBe(all.results[0].memory);
  });

  it("updates keep the id; history lists the versions", async () => {
    const [e] = await client.add([{ role: "user", content: "I live in Lisbon." }], { user_id: user, infer: false });
    await client.update(e.id, { text: "I live in Porto." });
    const got: any = await client.get(e.id);
    expect(got.id).toBe(e.id);
    expect(got.memory).toBe("I live in Porto.");
    const h: any[] = await client.history(e.id);
    expect(h.map((x) => x.event)).toEqual(["ADD", "UPDATE"]);
    expect(h[1].oldMemory).toBe("I live in Lisbon.");
    expect(h[1].newMemory).toBe("I live in Porto.");
    expect(h[1].memoryId).toBe(e.id);
    // Strata keeps both versions: the old one is superseded, not overwritten.
    const versions = await v1(`/v1/memories/${e.id}/history`);
    expect(versions.body.items).toHaveLength(2);
    expect(versions.body.items[0].valid_to).toBeTruthy();
  });

  it("deletes one memory, then a missing memory is MemoryNotFoundError", async () => {
    const [e] = await client.add([{ role: "user", content: "Temporary note." }], { user_id: user, infer: false });
    const del = await client.delete(e.id);
    expect(del.message).toMatch(/deleted/i);
    await expect(client.get(e.id)).rejects.toBeInstanceOf(MemoryNotFoundError);
    await expect(client.get("00000000-0000-4000-8000-000000000000")).rejects.toBeInstanceOf(MemoryNotFoundError);
    await expect(client.update("00000000-0000-4000-8000-000000000000", { text: "x" })).rejects.toBeInstanceOf(MemoryNotFoundError);
  });

  it("another org's key sees none of it", async () => {
    if (!other) throw new Error("STRATA_OTHER_KEY must be an agent key of a second org (go test ./internal/mem0 sets it)");
    const stranger = new MemoryClient({ apiKey: other, host });
    // The other org holds an org-level memory of its own (a job summary is one): a user
    // filter must not answer it, nor anything of this org.
    expect((await v1("/v1/memories", { method: "POST", body: JSON.stringify({ text: "Peanut-free catering policy" }) }, other)).status).toBe(201);
    const all = await client.getAll({ filters: { user_id: user } });
    expect(all.count).toBeGreaterThan(0);
    const ours = new Set(all.results.map((m: any) => m.id));
    for (const m of all.results as any[]) {
      await expect(stranger.get(m.id)).rejects.toBeInstanceOf(MemoryNotFoundError);
      await expect(stranger.history(m.id)).rejects.toBeInstanceOf(MemoryNotFoundError);
      await expect(stranger.update(m.id, { text: "overwritten" })).rejects.toBeInstanceOf(MemoryNotFoundError);
      await expect(stranger.delete(m.id)).rejects.toBeInstanceOf(MemoryNotFoundError);
    }
    const theirs = await stranger.getAll({ filters: { user_id: user } });
    expect(theirs.count).toBe(0);
    const found = await stranger.search("peanut", { filters: { user_id: user } });
    expect(found.results).toHaveLength(0);
    for (const r of (await stranger.search("peanut", { filters: { user_id: user }, topK: 50 })).results as any[]) expect(ours.has(r.id)).toBe(false);
    expect((await client.getAll({ filters: { user_id: user } })).count).toBe(all.count); // nothing of ours changed
  });

  it("a bad key is AuthenticationError", async () => {
    const bad = new MemoryClient({ apiKey: "sk_not_a_key", host });
    await expect(bad.add([{ role: "user", content: "x" }], { user_id: user, infer: false })).rejects.toBeInstanceOf(AuthenticationError);
    await expect(bad.search("x", { filters: { user_id: user } })).rejects.toBeInstanceOf(AuthenticationError);
  });

  it("refuses app_id (no such Strata scope) and an add without an entity", async () => {
    await expect(client.add([{ role: "user", content: "x" }], { app_id: "app", infer: false } as any)).rejects.toBeInstanceOf(ValidationError);
    await expect(client.add([{ role: "user", content: "x" }], { infer: false })).rejects.toBeInstanceOf(ValidationError);
  });

  it("batch update, batch delete and deleteAll", async () => {
    const u = `carol-${run}`;
    const a = await client.add([{ role: "user", content: "Carol drinks tea." }], { user_id: u, infer: false });
    const b = await client.add([{ role: "user", content: "Carol runs on Sundays." }], { user_id: u, infer: false });
    await client.batchUpdate([{ memoryId: a[0].id, text: "Carol drinks green tea." }]);
    expect(((await client.get(a[0].id)) as any).memory).toBe("Carol drinks green tea.");
    await client.batchDelete([b[0].id]);
    await expect(client.get(b[0].id)).rejects.toBeInstanceOf(MemoryNotFoundError);
    await client.add([{ role: "user", content: "Carol has a cat." }], { user_id: u, infer: false });
    expect((await client.getAll({ filters: { user_id: u } })).count).toBe(2);
    await client.deleteAll({ user_id: u });
    expect((await client.getAll({ filters: { user_id: u } })).count).toBe(0);
    await client.add([{ role: "user", content: "Carol is back." }], { user_id: u, infer: false });
    await client.deleteUsers({ userId: u });
    expect((await client.getAll({ filters: { user_id: u } })).count).toBe(0);
  });

  it.runIf(process.env.STRATA_EXTRACTION === "1")("infer: true extracts facts and answers ADD, UPDATE and DELETE events", async () => {
    const u = `dana-${run}`;
    const added = await client.add([{ role: "user", content: "I live in Lisbon and please call me Dee." }], { user_id: u });
    const facts = added.filter((e: any) => !String(e.id).startsWith("preferences/"));
    expect(facts.map((e: any) => [e.event, e.memory])).toEqual([["ADD", "Lives in Lisbon"]]);
    expect(added.map((e: any) => e.id)).toContain("preferences/name");
    const stored = await v1(`/v1/memories/${facts[0].id}`);
    expect(stored.body.trust).toBe("extracted");
    const pref = await v1(`/v1/kv/preferences/name?user_id=${u}`);
    expect(pref.body.value).toBe("Dee");

    const updated = await client.add([{ role: "user", content: "I moved to Porto last month." }], { user_id: u });
    expect(updated.map((e: any) => [e.event, e.memory])).toEqual([["UPDATE", "Lives in Porto"]]);
    expect(updated[0].id).toBe(facts[0].id); // the same Mem0 id across versions
    expect(((await client.get(facts[0].id)) as any).memory).toBe("Lives in Porto");

    const deleted = await client.add([{ role: "user", content: "Forget where I live." }], { user_id: u });
    expect(deleted.map((e: any) => e.event)).toEqual(["DELETE"]);
    await expect(client.get(facts[0].id)).rejects.toBeInstanceOf(MemoryNotFoundError);
    const h: any[] = await client.history(facts[0].id);
    expect(h.map((x) => x.newMemory)).toEqual(["Lives in Lisbon", "Lives in Porto"]);
  });
});
