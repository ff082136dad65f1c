// The Session contract, the same calls on the SDK's MemorySession and on StrataSession, every
// answer compared (deep equality: getItems answers exactly the items added). Prints
// "CONTRACT OK". internal/openaiagentstest runs it.
import { MemorySession, type AgentInputItem } from "@openai/agents";
import { deepStrictEqual } from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { StrataSession } from "../src/index.js";

const mem = new MemorySession();
const strata = new StrataSession({ sessionId: "contract-" + randomUUID() });
const both = async <T>(f: (s: any) => Promise<T>, what: string) => {
  const a = await f(mem);
  const b = await f(strata);
  deepStrictEqual(b, a, what);
  return b;
};

const items: AgentInputItem[] = [
  { role: "user", content: "hi" },
  { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "hello" }] } as any,
  { type: "function_call", callId: "c1", name: "lookup", arguments: '{"q":"x","a":1}', status: "completed" } as any,
  { type: "function_call_result", callId: "c1", name: "lookup", status: "completed", output: { type: "text", text: "42" } } as any,
  { role: "system", content: "be brief" },
  { role: "user", content: [{ type: "input_text", text: "ünïcode ✓" }] } as any,
];

await both((s) => s.getItems(), "empty");
await both((s) => s.popItem(), "pop on empty");
await both((s) => s.addItems(items.slice(0, 4)), "add");
await both((s) => s.addItems(items.slice(4)), "add more");
await both((s) => s.getItems(), "all");
for (const n of [1, 2, 6, 10]) await both((s) => s.getItems(n), `limit ${n}`);
await both((s) => s.popItem(), "pop");
await both((s) => s.popItem(), "pop again");
await both((s) => s.getItems(), "after pops");
await both((s) => s.addItems([{ role: "user", content: "after pop" }]), "add after pop");
await both((s) => s.getItems(2), "limit after pop");
await both((s) => s.clearSession(), "clear");
await both((s) => s.getItems(), "after clear");
await both((s) => s.addItems([{ role: "user", content: "fresh" }]), "add after clear");
await both((s) => s.getItems(), "fresh");

// A write whose answer was lost is retried with the same Idempotency-Key and applies once.
const keys: string[] = [];
const lossy: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  const key = (init?.headers as Record<string, string>)["Idempotency-Key"];
  if (key !== undefined && !keys.includes(key)) {
    keys.push(key);
    await res.body?.cancel();
    throw new TypeError("fetch failed (answer lost)");
  }
  return res;
};
const retried = new StrataSession({ sessionId: "retry-" + randomUUID(), fetch: lossy });
await retried.addItems([{ role: "user", content: "once" }]);
deepStrictEqual(await retried.getItems(), [{ role: "user", content: "once" }], "the retried add applied once");
deepStrictEqual(keys.length, 1);
// Errors: a bad key is a StrataError with the API's status, not retried.
const bad = new StrataSession({ sessionId: "x", apiKey: "sk_wrong" });
await bad.getItems().then(
  () => { throw new Error("a bad key was accepted"); },
  (e) => deepStrictEqual([e.name, e.status], ["StrataError", 401]),
);
console.log("CONTRACT OK");
