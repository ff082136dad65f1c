// A conversation on StrataSession with a fake model (no network). internal/openaiagentstest
// runs it, SIGKILLs it, and runs it again in a new process on the same session.
//
//   tsx scripts/chat.ts --session S [--memory] --say "a" --say "b" ... [--hang]
//
// The fake model answers "heard: <every user message in its input, in order>", so a reply
// shows exactly which earlier turns the SDK gave the model. Prints "REPLY <text>" per turn and,
// with --hang, "HANGING" and then waits to be killed. --memory runs on the SDK's MemorySession.
import { Agent, MemorySession, Runner, Usage, setTracingDisabled, type Model, type ModelProvider } from "@openai/agents";
import { parseArgs } from "node:util";
import { StrataSession } from "../src/index.js";

const { values: args } = parseArgs({
  options: {
    session: { type: "string" },
    say: { type: "string", multiple: true, default: [] },
    hang: { type: "boolean", default: false },
    memory: { type: "boolean", default: false },
  },
});
setTracingDisabled(true);

const textOf = (item: any): string =>
  typeof item.content === "string" ? item.content : (item.content ?? []).map((c: any) => c.text ?? "").join("");

export const fakeModel: Model = {
  async getResponse(request) {
    const input = typeof request.input === "string" ? [{ role: "user", content: request.input }] : request.input;
    const heard = input.filter((i: any) => i.role === "user").map(textOf);
    return {
      usage: new Usage(),
      output: [
        {
          type: "message",
          role: "assistant",
          status: "completed",
          content: [{ type: "output_text", text: "heard: " + JSON.stringify(heard) }],
        } as any,
      ],
    };
  },
  getStreamedResponse() {
    throw new Error("not streamed");
  },
};
const provider: ModelProvider = { getModel: () => fakeModel };
const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
const agent = new Agent({ name: "assistant", instructions: "Answer briefly.", model: "fake" });
const session = args.memory ? new MemorySession() : new StrataSession({ sessionId: args.session!, userId: "u-chat" });

for (const say of args.say!) {
  const res = await runner.run(agent, say, { session });
  console.log("REPLY " + res.finalOutput);
}
if (args.hang) {
  console.log("HANGING");
  await new Promise(() => setInterval(() => {}, 1000));
}
