import { describe, expect, it } from "vitest";
import { NotFoundError, Strata, StrataError, ValidationError } from "../src/index.js";
import { ADMIN_KEY, client, jobId, URL_ } from "./helpers.js";

describe("graph", () => {
  it("resolves entities, adds relations, reads them as of a time, walks, merges and deletes", async () => {
    const s = client();
    const user = jobId("graph-user");
    const ana = await s.resolveEntity({ name: "Ana Silva", aliases: ["Ana"], type: "person", user_id: user });
    expect(ana.created).toBe(true);
    expect((await s.resolveEntity({ name: "ana", user_id: user })).id).toBe(ana.id);
    const lisbon = await s.resolveEntity({ name: "Lisbon store", user_id: user });
    const porto = await s.resolveEntity({ name: "Porto store", user_id: user });

    const first = await s.addRelation({ subject_id: ana.id, predicate: "works at", object_id: lisbon.id, functional: true,
      valid_from: "2026-01-01T00:00:00Z", user_id: user });
    expect(first.created).toBe(true);
    expect(first.relation.predicate).toBe("works_at");
    const second = await s.addRelation({ subject_id: ana.id, predicate: "works_at", object_id: porto.id, functional: true,
      valid_from: "2026-06-01T00:00:00Z", user_id: user });
    expect(second.closed).toEqual([first.relation.id]);

    const hits = await s.searchEntities("Ana", { user_id: user });
    expect(hits[0].entity.id).toBe(ana.id);
    expect(hits[0].exact).toBe(true);
    expect((await s.entity(ana.id)).relations.map((r) => r.object_id)).toEqual([porto.id]);
    expect((await s.entity(ana.id, { asOf: "2026-03-01T00:00:00Z" })).relations.map((r) => r.object_id)).toEqual([lisbon.id]);
    expect((await s.neighbors(ana.id, { depth: 2 })).map((n) => n.entity.id)).toEqual([porto.id]);
    const page = await s.entityHistory(ana.id, { limit: 1 });
    expect(page.items).toHaveLength(1);
    expect(page.next_cursor).toBeTruthy();
    expect((await s.entityHistory(ana.id, { limit: 1, cursor: page.next_cursor })).items).toHaveLength(1);

    const bad = await s.neighbors(ana.id, { depth: 9 }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(ValidationError);
    expect((bad as ValidationError).locations).toContain("query.depth");

    const dup = await s.resolveEntity({ name: "A. Silva", user_id: user });
    const denied = await s.mergeEntity(dup.id, ana.id).catch((e: unknown) => e);
    expect((denied as StrataError).status).toBe(403);
    if (ADMIN_KEY) {
      const admin = new Strata({ url: URL_, apiKey: ADMIN_KEY });
      expect((await admin.mergeEntity(dup.id, ana.id)).survivor.aliases).toContain("A. Silva");
      const split = await admin.splitEntity(ana.id, { name: "A. Silva (other)", aliases: ["A. Silva"] });
      expect(split.new.id).not.toBe(ana.id);
    }

    expect((await s.deleteEntity(porto.id)).entities).toBe(1);
    expect(await s.entity(porto.id).catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
  });
});
