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
console.log("CONTRACT OK");
