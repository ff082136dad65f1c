// Crash test graph: five nodes in a row (n1 → … → n5) on StrataSaver. Each node records its
// side effect in a ledger file before it does its work, so the ledger shows every execution,
// including the ones a crash cut short. internal/langgraphtest drives it:
//
//   tsx scripts/crash.ts --thread T --durability sync|async --ledger FILE [--hang-in n3 | --kill-in n3]
//
// --hang-in NODE: print "ENTER NODE" and block there (the Go test SIGKILLs the process).
// --kill-in NODE: SIGKILL itself on entering NODE (before the event loop runs again, so the
//                 moment is exact).
// When the thread already has a checkpoint the run resumes it (invoke(null)); otherwise it starts.
// Prints "RESUMED <n>" or "STARTED", "ENTER <node>" per node, and "FINAL <json>" with the state.
import { Annotation, StateGraph, START, END } from "@langchain/langgraph";
import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { StrataSaver } from "../src/index.js";

const { values: args } = parseArgs({
  options: {
    thread: { type: "string" },
    durability: { type: "string", default: "sync" },
    ledger: { type: "string" },
    "hang-in": { type: "string" },
    "kill-in": { type: "string" },
  },
});
if (!args.thread || !args.ledger) throw new Error("--thread and --ledger are required");
const durability = args.durability as "sync" | "async" | "exit";

const State = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

const nodes = ["n1", "n2", "n3", "n4", "n5"];
const builder = new StateGraph(State);
for (const name of nodes) {
  builder.addNode(name, async (state: typeof State.State) => {
    appendFileSync(args.ledger!, name + "\n");
    process.stdout.write(`ENTER ${name} seen=${state.log.length}\n`);
    if (args["kill-in"] === name) process.kill(process.pid, "SIGKILL");
    if (args["hang-in"] === name) await new Promise(() => {});
    return { log: [name] };
  });
}
(builder as any).addEdge(START, nodes[0]);
for (let i = 1; i < nodes.length; i++) (builder as any).addEdge(nodes[i - 1], nodes[i]);
(builder as any).addEdge(nodes[nodes.length - 1], END);

const checkpointer = new StrataSaver(); // STRATA_URL, STRATA_API_KEY
const graph = builder.compile({ checkpointer });
const config = { configurable: { thread_id: args.thread } };

const existing = await checkpointer.getTuple(config);
let input: { log: string[] } | null = { log: [] };
if (existing) {
  input = null;
  process.stdout.write(`RESUMED ${JSON.stringify((existing.checkpoint.channel_values as any).log ?? [])}\n`);
} else {
  process.stdout.write("STARTED\n");
}
const out = await graph.invoke(input, { ...config, durability });
process.stdout.write(`FINAL ${JSON.stringify(out.log)}\n`);
