// Long-term memory graph: a two-node StateGraph on StrataStore. "recall" searches the user's
// memories through config.store; "remember" writes the turn's fact there. internal/langgraphtest
// runs it twice across a Strata server restart and checks the second run recalls the first's.
//
//   tsx scripts/memory-graph.ts --user U --fact "text" --query "text"
//
// Prints "RECALLED <json: the facts found>".
import { Annotation, StateGraph, START, END, type LangGraphRunnableConfig } from "@langchain/langgraph";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { StrataStore } from "../src/index.js";

const { values: args } = parseArgs({
  options: { user: { type: "string" }, fact: { type: "string" }, query: { type: "string" } },
});
if (!args.user || !args.fact || !args.query) throw new Error("--user, --fact and --query are required");

const State = Annotation.Root({
  fact: Annotation<string>,
  query: Annotation<string>,
  recalled: Annotation<string[]>({ reducer: (_a, b) => b, default: () => [] }),
});

const graph = new StateGraph(State)
  .addNode("recall", async (s: typeof State.State, config: LangGraphRunnableConfig) => {
    const hits = await config.store!.search(["users", args.user!, "memories"], { query: s.query, limit: 10 });
    return { recalled: hits.map((h) => h.value.text as string) };
  })
  .addNode("remember", async (s: typeof State.State, config: LangGraphRunnableConfig) => {
    await config.store!.put(["users", args.user!, "memories"], randomUUID(), { text: s.fact });
    return {};
  })
  .addEdge(START, "recall")
  .addEdge("recall", "remember")
  .addEdge("remember", END)
  .compile({ store: new StrataStore({ index: { fields: ["text"] } }) });

const out = await graph.invoke({ fact: args.fact, query: args.query });
console.log("RECALLED " + JSON.stringify(out.recalled));
