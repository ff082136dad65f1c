// LangGraph's own checkpointer conformance suite, in library mode, against a live Strata
// server. internal/langgraphtest runs it from `go test`. (The CLI of
// @langchain/langgraph-checkpoint-validation 1.1.1 is broken, hence validate() under vitest.)
//
// Env: STRATA_URL and STRATA_ADMIN_KEY. Like the suite's PostgresSaver setup, which gives every
// checkpointer a fresh database, every checkpointer here gets a fresh org (tenant) with its own
// agent key, so list() across threads sees only what that checkpointer wrote.
import { validate, deltaChannelHistoryTests } from "@langchain/langgraph-checkpoint-validation";
import { randomUUID } from "node:crypto";
import { StrataSaver } from "../src/index.js";

const url = process.env.STRATA_URL;
const adminKey = process.env.STRATA_ADMIN_KEY;
if (!url || !adminKey) {
  throw new Error("set STRATA_URL and STRATA_ADMIN_KEY (a running Strata server and its admin key)");
}

async function agentKey(org: string): Promise<string> {
  const res = await fetch(`${url}/v1/admin/keys`, {
    method: "POST",
    headers: { Authorization: `Bearer ${adminKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ org_id: org, role: "agent" }),
  });
  if (res.status !== 201) throw new Error(`creating an agent key: ${res.status} ${await res.text()}`);
  return (await res.json()).key;
}

const initializer = {
  checkpointerName: "StrataSaver",
  createCheckpointer: async () => new StrataSaver({ url, apiKey: await agentKey(`lg-conf-${randomUUID()}`) }),
  destroyCheckpointer: async (saver: StrataSaver) => {
    const threads = new Set<string>();
    for await (const t of saver.list({})) threads.add(t.config.configurable?.thread_id);
    for (const id of threads) await saver.deleteThread(id);
  },
};

validate(initializer);

// Opt-in in the package (not part of validate()); LangGraph's own savers run it too.
describe("StrataSaver (opt-in)", () => {
  deltaChannelHistoryTests(initializer);
});
