// StrataSession vs the SDK's MemorySession: per turn, what the Runner does with a session
// (getItems, then addItems of the user item and the model's reply), sequentially, in one run.
// Prints turns/s of each and the ratio.
//
//   STRATA_URL=... STRATA_API_KEY=... npx tsx scripts/bench.ts --turns 200
import { MemorySession, type Session } from "@openai/agents";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { StrataSession } from "../src/index.js";

const { values } = parseArgs({ options: { turns: { type: "string", default: "200" } } });
const turns = Number(values.turns);

async function loop(s: Session): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < turns; i++) {
    await s.getItems(20);
    await s.addItems([
      { role: "user", content: `question ${i}` },
      { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: `answer ${i}` }] } as any,
    ]);
  }
  return turns / ((performance.now() - t0) / 1000);
}

const mem = await loop(new MemorySession());
const strata = await loop(new StrataSession({ sessionId: "bench-" + randomUUID() }));
console.log(JSON.stringify({ turns, memory_turns_s: Math.round(mem), strata_turns_s: Math.round(strata), ratio: +(strata / mem).toFixed(5) }));
