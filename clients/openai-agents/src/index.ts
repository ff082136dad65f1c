import type { AgentInputItem, Session } from "@openai/agents";
import { StrataHTTP, StrataHTTPError, type StrataHTTPOptions } from "./http.js";

export { StrataHTTPError as StrataError };

/** Options of {@link StrataSession}. */
export interface StrataSessionOptions extends StrataHTTPOptions {
  /** The Strata session id (1-200 of A-Z a-z 0-9 . _ : -). */
  sessionId: string;
  /** The conversation's data subject (Strata user_id: erasure and export find it). */
  userId?: string;
  /** Recorded with every turn. */
  agentId?: string;
}

interface WireTurn {
  seq: number;
  role: string;
  content: string;
  metadata?: { openai_agents_item?: AgentInputItem; openai_agents_pop?: boolean };
}

const SESSION_ID = /^[A-Za-z0-9._:-]{1,200}$/;
const ROLES = new Set(["user", "assistant", "system"]);

/** The turn role and readable text of an item (what context assembly and extraction see). */
function toTurn(item: AgentInputItem): { role: string; content: string } {
  const it = item as any;
  const role = it.role === "developer" ? "system" : ROLES.has(it.role) ? it.role : "tool";
  let content: string;
  if (typeof it.content === "string") content = it.content;
  else if (Array.isArray(it.content))
    content = it.content.map((c: any) => c.text ?? c.refusal ?? c.transcript ?? "").filter(Boolean).join("\n");
  else content = "";
  if (!content) content = JSON.stringify(item);
  return { role, content };
}

/**
 * An OpenAI Agents SDK Session on Strata's session turn buffer: every item is a turn of the
 * Strata session (role + readable text, so context assembly and extraction see the
 * conversation), with the exact item JSON in the turn's metadata, so getItems answers exactly
 * what was added. The history is read from the session's durable log, so it survives a process
 * kill and a server restart.
 *
 * ```ts
 * const session = new StrataSession({ sessionId: "chat-42", apiKey: process.env.STRATA_API_KEY });
 * await run(agent, "Hello", { session });
 * ```
 */
export class StrataSession implements Session {
  private readonly http: StrataHTTP;
  private readonly sessionId: string;

  constructor(private readonly opts: StrataSessionOptions) {
    if (!SESSION_ID.test(opts.sessionId)) throw new Error("sessionId must be 1-200 of A-Z a-z 0-9 . _ : -");
    this.sessionId = opts.sessionId;
    this.http = new StrataHTTP(opts, "StrataSession");
  }

  private get path() {
    return `/v1/sessions/${encodeURIComponent(this.sessionId)}`;
  }

  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  /** Every item with its turn seq, oldest first. */
  private async live(): Promise<{ seq: number; item: AgentInputItem }[]> {
    const out: { seq: number; item: AgentInputItem }[] = [];
    let after = "0";
    for (;;) {
      const page: { items: WireTurn[]; next_cursor?: string } | undefined = await this.http.request(
        "GET",
        `${this.path}/messages?after_seq=${after}&limit=1000`,
        undefined,
        { notFound: true },
      );
      for (const t of page?.items ?? []) {
        if (t.metadata?.openai_agents_item !== undefined) out.push({ seq: t.seq, item: t.metadata.openai_agents_item });
      }
      if (!page?.next_cursor) return out;
      after = page.next_cursor;
    }
  }

  async getItems(limit?: number): Promise<AgentInputItem[]> {
    const items = (await this.live()).map((x) => x.item);
    return limit === undefined ? items : limit <= 0 ? [] : items.slice(-limit);
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    const scope = { ...(this.opts.userId ? { user_id: this.opts.userId } : {}), ...(this.opts.agentId ? { agent_id: this.opts.agentId } : {}) };
    for (let i = 0; i < items.length; i += 100) {
      const messages = items.slice(i, i + 100).map((item) => ({ ...toTurn(item), metadata: { openai_agents_item: item } }));
      await this.http.request("POST", `${this.path}/messages`, { messages, ...scope });
    }
  }

  async popItem(): Promise<AgentInputItem | undefined> {
    // POST /v1/sessions/{s}/messages/pop removes the newest turn from the buffer and the durable
    // log and answers it; the request's one Idempotency-Key makes a retried pop a single pop.
    const t: WireTurn | undefined = await this.http.request("POST", `${this.path}/messages/pop`, undefined, { notFound: true });
    return t?.metadata?.openai_agents_item;
  }

  async clearSession(): Promise<void> {
    // Removes the state, the turn buffer and the durable turn log (DELETE /v1/sessions/{s}/state).
    await this.http.request("DELETE", `${this.path}/state`, undefined, { notFound: true });
  }
}
