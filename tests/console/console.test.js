// The web console in a real browser: Debian's Chromium driven by playwright-core against a
// live server (internal/consoletest starts it and passes the keys).
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { chromium } from "playwright-core";
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const base = process.env.STRATA_URL;
const keys = { compliance: process.env.STRATA_COMPLIANCE_KEY, agent: process.env.STRATA_AGENT_KEY,
  admin: process.env.STRATA_ORG_ADMIN_KEY, expiring: process.env.STRATA_EXPIRING_KEY };
const shots = process.env.CONSOLE_SCREENSHOTS || "";
const run = Date.now().toString(36);

let browser;
beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"], // playwright gives each launch a fresh profile directory
  });
});
afterAll(async () => { await browser?.close(); });

async function api(method, path, key, body, headers = {}) {
  const r = await fetch(base + path, { method, headers: { Authorization: "Bearer " + key, "Content-Type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// page opens a fresh context (its own cookies) signed in with key.
async function signedIn(key, opts = {}) {
  const ctx = await browser.newContext({ acceptDownloads: true, timezoneId: "Europe/Berlin", viewport: opts.viewport || { width: 1280, height: 900 } });
  const errors = [];
  const page = await ctx.newPage();
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + "/console/login");
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/console\/(subjects|jobs)/);
  return { ctx, page, errors };
}

async function shot(page, name) {
  if (shots) await page.screenshot({ path: join(shots, name + ".png"), fullPage: false });
}

describe("console", () => {
  test("sign in, and an unknown key is refused with its field", async () => {
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    await page.goto(base + "/console/");
    await expect.poll(() => page.url()).toContain("/console/login");
    await shot(page, "login");
    await page.getByLabel("API key").fill("sk_not_a_key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page.locator(".problem").textContent()).resolves.toContain("Unknown or revoked API key");
    await expect(page.locator(".field-err").textContent()).resolves.toContain("is not a live API key");
    await page.getByLabel("API key").fill(keys.compliance);
    await page.keyboard.press("Enter"); // keyboard only
    await page.waitForURL(/\/console\/subjects/);
    await expect(page.locator("h1").textContent()).resolves.toBe("Data subjects");
    await ctx.close();
  });

  test("erase a subject end to end and read the clean receipt", async () => {
    const user = "erase-" + run;
    await api("POST", "/v1/memories", keys.agent, { text: "Prefers window seats", user_id: user, agent_id: "travel" });
    await api("PUT", "/v1/kv/prefs/seat?user_id=" + user, keys.agent, { value: "window", user_id: user });
    const { ctx, page, errors } = await signedIn(keys.compliance);
    await page.getByLabel("User id").fill(user);
    await page.getByRole("button", { name: "Find subject" }).click();
    await expect(page.locator("h1").textContent()).resolves.toBe("Data subject " + user);
    const held = await page.locator("section[aria-labelledby=held] table").first().textContent();
    expect(held).toMatch(/semantic/);
    expect(held).toMatch(/key_value|keyvalue|kv/);
    await shot(page, "subject");
    await page.getByLabel(/^Reason \(kept/).fill("ticket " + run);
    await page.getByLabel(/I confirm: erase everything/).check();
    await page.getByRole("button", { name: "Erase this subject everywhere" }).click();
    await page.waitForURL(/\/console\/erasures\/[0-9a-f-]{36}$/);
    // The page follows the erasure by itself (its script polls) until the receipt is there.
    await page.locator("#verification").waitFor({ timeout: 60_000 });
    await expect(page.locator("#erasure-status").textContent()).resolves.toBe("completed");
    await expect(page.locator("#verification").textContent()).resolves.toContain("Clean");
    const receipt = await page.locator("section[aria-labelledby=rc] table").first().textContent();
    expect(receipt).toMatch(/memor/);
    // Times are shown in the viewer's zone, UTC on hover.
    const t = page.locator("time").first();
    expect(await t.getAttribute("title")).toMatch(/UTC$/);
    expect(await t.textContent()).not.toMatch(/UTC$/);
    await shot(page, "erasure-receipt");
    // The list flags nothing overdue for a fresh request, and links the receipt.
    await page.getByRole("link", { name: "Erasures", exact: true }).click();
    await expect(page.locator("table").textContent()).resolves.toContain("completed");
    await shot(page, "erasures");
    // The audit record of the request says it came from the console.
    const audit = await api("GET", "/v1/audit?action=create-erasure", keys.compliance);
    expect(audit.items.at(-1).details.via).toBe("console");
    expect(errors).toEqual([]);
    await ctx.close();
  });

  test("download and open an export", async () => {
    const user = "export-" + run;
    await api("POST", "/v1/memories", keys.agent, { text: "Allergic to peanuts", user_id: user });
    const { ctx, page } = await signedIn(keys.compliance);
    await page.goto(base + "/console/subjects?user_id=" + user);
    const [dl] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: /Download export/ }).click()]);
    expect(dl.suggestedFilename()).toBe(`strata-export-${user}.ndjson`);
    const lines = readFileSync(await dl.path(), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ type: "export", user_id: user });
    expect(lines.some((l) => l.data && JSON.stringify(l.data).includes("Allergic to peanuts"))).toBe(true);
    expect(lines.at(-1).type).toBe("summary");
    await ctx.close();
  });

  test("restrict and lift", async () => {
    const user = "restrict-" + run;
    const { ctx, page } = await signedIn(keys.compliance);
    await page.goto(base + "/console/subjects?user_id=" + user);
    await expect(page.locator("#restriction-state").textContent()).resolves.toBe("Not restricted");
    await page.locator("#restrict-reason").fill("accuracy contested");
    await page.getByRole("button", { name: "Restrict" }).click();
    await expect(page.locator("#restriction-state").textContent()).resolves.toContain("Restricted since");
    expect((await api("GET", "/v1/gdpr/restrictions/" + user, keys.compliance)).restricted).toBe(true);
    await page.getByRole("button", { name: "Lift restriction" }).click();
    await expect(page.locator("#restriction-state").textContent()).resolves.toBe("Not restricted");
    expect((await api("GET", "/v1/gdpr/restrictions/" + user, keys.compliance)).restricted).toBe(false);
    // The audit page finds the subject's records.
    await page.goto(base + "/console/audit?user_id=" + user);
    const rows = await page.locator("tbody tr").allTextContents();
    expect(rows.some((r) => r.includes("restrict-subject") && r.includes("console"))).toBe(true);
    expect(rows.some((r) => r.includes("unrestrict-subject"))).toBe(true);
    await shot(page, "audit");
    await page.goto(base + "/console/audit/verify");
    await expect(page.locator("#chain").textContent()).resolves.toBe("The chain verifies");
    await ctx.close();
  });

  test("find a stalled job (its worker killed) and read the failing step's input and error", async () => {
    const job = "report-" + run;
    const worker = spawn(process.execPath, [join(import.meta.dirname, "worker.mjs"), base, keys.agent, job], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise((resolve, reject) => {
      worker.stdout.on("data", (b) => { if (String(b).includes("backing off")) resolve(); });
      worker.on("exit", (code) => reject(new Error("worker exited early: " + code)));
    });
    worker.removeAllListeners("exit");
    worker.kill("SIGKILL");
    const { ctx, page } = await signedIn(keys.agent);
    // The job stalls STRATA_STALLED_AFTER after its last progress: reload until it is listed.
    const row = page.locator("#stalled tbody tr", { hasText: job });
    await expect.poll(async () => { await page.goto(base + "/console/jobs"); return row.count(); },
      { timeout: 30_000, intervals: [500] }).toBe(1);
    expect(await row.textContent()).toContain("summarise");
    expect(await row.textContent()).toContain("upstream 503: model overloaded");
    await shot(page, "jobs");
    await row.getByRole("link", { name: job }).click();
    const step = page.locator("#step-summarise");
    await expect(step.locator(".step-input").textContent()).resolves.toContain("q3-report.pdf");
    await expect(step.locator(".step-error").textContent()).resolves.toContain("upstream 503: model overloaded");
    await expect(step.textContent()).resolves.toContain("worker-1");
    // Every attempt is on the timeline: the failing one with its holder, fencing token, lease,
    // input and error.
    const failing = step.locator("tr.attempt.failed");
    await expect(failing.count()).resolves.toBe(1);
    await expect(failing.locator(".attempt-input").textContent()).resolves.toContain("q3-report.pdf");
    await expect(failing.locator(".attempt-error").textContent()).resolves.toContain("upstream 503: model overloaded");
    const cells = await failing.locator("td").allTextContents();
    expect(cells[1].trim()).toBe("1"); // fencing token
    expect(cells[2]).toContain("worker-1"); // holder
    expect(cells[3]).toMatch(/30 s lease/);
    expect(await failing.locator("time").first().getAttribute("title")).toMatch(/UTC$/);
    await step.scrollIntoViewIfNeeded();
    await shot(page, "job-timeline");
    await ctx.close();
  });

  test("admin creates a key (shown once) and revokes it, ending its console sessions", async () => {
    const name = "ops-" + run;
    const { ctx, page, errors } = await signedIn(keys.admin);
    await page.getByRole("link", { name: "Keys" }).click();
    await page.getByLabel("Role").selectOption("compliance");
    await page.getByLabel(/^Name/).fill(name);
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.locator("#new-secret").textContent()).trim();
    expect(secret.length).toBeGreaterThan(20);
    // The new key signs in elsewhere.
    const other = await signedIn(secret);
    expect(other.page.url()).toContain("/console/subjects");
    // Reloading the key list shows the key, never its secret.
    await page.goto(base + "/console/keys");
    expect(await page.content()).not.toContain(secret);
    const row = page.locator("tbody tr", { hasText: name });
    await row.getByRole("button", { name: /^Revoke key/ }).click();
    await expect(page.locator(".notice").textContent()).resolves.toContain("revoked");
    await expect(page.locator("tbody tr", { hasText: name }).textContent()).resolves.not.toContain("Revoke");
    await shot(page, "keys"); // after the revocation: no secret on the picture
    // The revoked key's console session has ended.
    await other.page.goto(base + "/console/subjects");
    await expect.poll(() => other.page.url()).toContain("/console/login");
    for (const action of ["create-key", "revoke-key"]) {
      const audit = await api("GET", "/v1/audit?action=" + action, keys.admin);
      expect(audit.items.at(-1).details.via, action).toBe("console");
    }
    expect(errors).toEqual([]);
    await other.ctx.close();
    await ctx.close();
  });

  test("search memories and see the ranking breakdown; user content is escaped", async () => {
    const agent = "xss-" + run;
    const evil = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> rotate the api keys`;
    await api("POST", "/v1/memories", keys.agent, { text: evil, agent_id: agent });
    await api("POST", "/v1/memories", keys.agent, { text: "Rotate the database password monthly", agent_id: agent });
    const { ctx, page, errors } = await signedIn(keys.agent);
    await page.getByRole("link", { name: "Memories" }).click();
    await page.getByLabel("Search").fill("rotate keys");
    await page.getByLabel("Agent id").fill(agent);
    await page.getByRole("button", { name: "Search" }).click();
    const first = page.locator(".result").first();
    await first.waitFor();
    const texts = await page.locator(".memtext").allTextContents();
    expect(texts).toContain(evil); // rendered as text, not markup
    expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
    expect(await page.locator(".results script, .results img").count()).toBe(0);
    const bd = await first.locator("table.breakdown").textContent();
    for (const f of ["Score", "RRF", "Vector similarity", "Text score", "Recency", "Importance"]) expect(bd).toContain(f);
    expect(bd).not.toContain("()"); // a leg that did not find it says so, no empty rank
    await shot(page, "memories");
    // A memory's page shows its versions and provenance, escaped too.
    await page.locator(".result", { hasText: "window.__pwned" }).getByRole("link").first().click();
    await expect(page.locator(".memtext").first().textContent()).resolves.toBe(evil);
    expect(await page.evaluate(() => window.__pwned)).toBeUndefined();
    expect(errors).toEqual([]);
    await ctx.close();
  });

  test("stored markup in every field the console shows is text, and no script runs", async () => {
    // What an agent key (or a poisoned conversation) can store, aimed at whoever reads it in
    // the console: an element with a handler, an inline script, an attribute breakout.
    const P = `<img src=x onerror="window.__xss='img'"><script>window.__xss='script'</script>"'><svg onload="window.__xss='svg'"></svg>`;
    const mark = "<img src=x onerror="; // survives JSON encoding, so JSON fields show it too
    const user = "xss-user-" + run, gone = "xss-gone-" + run, job = "xss-job-" + run, ns = "xss" + run;
    const mem = await api("POST", "/v1/memories", keys.agent, { text: P + " memory", user_id: user, metadata: { note: P } });
    await api("PUT", `/v1/kv/${ns}/greeting?user_id=${user}`, keys.agent, { value: P, user_id: user });
    await api("PUT", `/v1/jobs/${job}`, keys.agent, { goal: P, user_id: user });
    await api("POST", `/v1/jobs/${job}/events`, keys.agent, { op: "<img/src=x/onerror=window.__xss=1>", params: { note: P } });
    const claim = await api("POST", `/v1/jobs/${job}/steps/render/start`, keys.agent, { owner: "w1", input: { tool: P.slice(0, 200), params: { q: P } } });
    await api("POST", `/v1/jobs/${job}/steps/render/fail`, keys.agent, { fencing_token: claim.fencing_token, error: P, disposition: "retryable" });
    await api("POST", `/v1/jobs/${job}/steps/render/start`, keys.agent, { owner: "w2", input: { params: { q: P } } });
    await api("PUT", `/v1/jobs/${job}/checkpoint`, keys.agent, { current_step: P.slice(0, 200), next_action: P, state: { v: P } });
    await api("PUT", `/v1/jobs/${job}/checkpoint`, keys.agent, { current_step: "two", next_action: P, state: { v: P + "2" } }, { "If-Match": '"1"' });
    await api("POST", `/v1/admin/keys`, keys.admin, { role: "agent", name: P.slice(0, 200) });
    await api("POST", "/v1/memories", keys.agent, { text: "to be erased", user_id: gone });
    const erasure = await api("POST", "/v1/gdpr/erasures", keys.compliance, { user_id: gone, reason: P });

    const { ctx, page, errors } = await signedIn(keys.admin);
    await ctx.addInitScript(() => {
      window.__csp = [];
      document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
    });
    const pages = [
      [`/console/memories?query=${encodeURIComponent("img memory")}&user_id=${user}`, true],
      [`/console/memories/${mem.id}`, true],
      [`/console/kv?namespace=${ns}&user_id=${user}`, true],
      [`/console/jobs`, true],
      [`/console/jobs/${job}?from=1&to=2`, true],
      [`/console/subjects?user_id=${user}`, false],
      [`/console/erasures`, false],
      [`/console/erasures/${erasure.id}`, true],
      [`/console/audit?user_id=${user}`, false],
      [`/console/keys`, true],
      [`/console/quarantines`, false],
      // Reflected: the payload in the query string of every form the console has.
      [`/console/memories?query=${encodeURIComponent(P)}&agent_id=${encodeURIComponent(P)}`, true],
      [`/console/subjects?user_id=${encodeURIComponent(P)}`, true],
      [`/console/audit?action=${encodeURIComponent(P)}&since=${encodeURIComponent(P)}`, true],
      [`/console/kv?namespace=${encodeURIComponent(P)}`, true],
      [`/console/jobs/${encodeURIComponent(P)}`, false],
    ];
    for (const [path, shown] of pages) {
      const resp = await page.goto(base + path);
      expect(resp.headers()["content-security-policy"], path).toContain("script-src 'self'");
      if (path.startsWith("/console/erasures/")) await page.locator("#verification").waitFor({ timeout: 60_000 });
      expect(await page.evaluate(() => window.__xss), path).toBeUndefined();
      expect(await page.evaluate(() => window.__csp), path).toEqual([]);
      // Not one element or handler came from stored or submitted text.
      expect(await page.locator('img, svg, [onerror], [onload], script:not([src])').count(), path).toBe(0);
      expect(await page.locator("script").count(), path).toBe(1); // console.js, nothing else
      if (shown) {
        // Shown as text: on the page, or as a form field's value when it was submitted.
        const text = await page.locator("main").innerText();
        const inForm = await page.evaluate((p) => [...document.querySelectorAll("input")].some((i) => i.value === p), P);
        expect(text.includes(mark) || inForm, path).toBe(true);
      }
    }
    // The API's own answers are never a page a browser would run: nothing sniffed, nothing allowed.
    const raw = await fetch(base + `/v1/memories/${mem.id}`, { headers: { Authorization: "Bearer " + keys.agent } });
    expect(raw.headers.get("x-content-type-options")).toBe("nosniff");
    expect(raw.headers.get("content-security-policy")).toContain("default-src 'none'");
    const jobText = await page.goto(base + `/console/jobs/${job}?from=1&to=2`).then(() => page.locator("main").innerText());
    expect(jobText).toContain(P); // the goal, as the agent wrote it
    expect(await page.locator(".attempt-error").first().innerText()).toContain(P); // the failed attempt's error
    await page.goto(base + `/console/memories/${mem.id}`);
    expect(await page.locator(".memtext").first().textContent()).toBe(P + " memory");
    // The reflected payloads are refused (422, 404): those loads fail, nothing else does.
    expect(errors.filter((e) => !/status of (404|422)/.test(e))).toEqual([]);
    await ctx.close();
  });

  test("a form posted without its CSRF token is refused", async () => {
    const user = "csrf-" + run;
    const { ctx, page } = await signedIn(keys.compliance);
    await page.goto(base + "/console/subjects?user_id=" + user);
    await page.locator("form[action='/console/subjects/restrict'] input[name=csrf]").evaluate((el) => el.remove());
    await page.getByRole("button", { name: "Restrict" }).click();
    await expect(page.locator(".problem").textContent()).resolves.toContain("security token");
    expect((await api("GET", "/v1/gdpr/restrictions/" + user, keys.compliance)).restricted).toBe(false);
    await ctx.close();
  });

  test("an agent key gets no GDPR pages", async () => {
    const { ctx, page } = await signedIn(keys.agent);
    expect(await page.getByRole("link", { name: "Subjects" }).count()).toBe(0);
    expect(await page.getByRole("link", { name: "Erasures" }).count()).toBe(0);
    const r = await page.goto(base + "/console/subjects?user_id=someone");
    expect(r.status()).toBe(403);
    await expect(page.locator(".problem").textContent()).resolves.toContain("needs a compliance key");
    const r2 = await page.goto(base + "/console/erasures");
    expect(r2.status()).toBe(403);
    await ctx.close();
  });

  test("an expired session is sent to sign-in", async () => {
    const { ctx, page } = await signedIn(keys.expiring);
    // Age the session past the idle limit, as 31 quiet minutes would.
    execFileSync("psql", [process.env.STRATA_DB_URL, "-qtAc",
      "UPDATE console_sessions SET last_seen_at = now() - interval '31 minutes' WHERE org_id = 'console-expiring'"]);
    await page.goto(base + "/console/erasures");
    await expect.poll(() => page.url()).toContain("/console/login");
    expect(page.url()).toContain("next=%2Fconsole%2Ferasures");
    await expect(page.locator(".notice").textContent()).resolves.toContain("session has ended");
    await ctx.close();
  });

  test("a compliance officer alone: nothing held, the memories themselves, a confirmed erasure, a plain receipt", async () => {
    const nobody = "nobody-" + run, user = "officer-" + run;
    const m = await api("POST", "/v1/memories", keys.agent, { text: "Lives at Rua Augusta 12", user_id: user, agent_id: "crm" });
    await api("PUT", `/v1/kv/prefs/lang?user_id=${user}`, keys.agent, { value: "pt", user_id: user });
    const { ctx, page, errors } = await signedIn(keys.compliance);
    // An unknown subject: nothing held, and the lookup explains the one audit record it writes.
    await page.goto(base + "/console/subjects?user_id=" + nobody);
    await expect(page.locator("#nothing-held").textContent()).resolves.toContain("Nothing held");
    expect(await page.locator("#lookup-note").textContent()).toMatch(/audited.*pseudonym/s);
    const trail = await api("GET", "/v1/audit?user_id=" + nobody, keys.compliance);
    expect(trail.items.map((a) => a.action)).toEqual(["export-subject"]); // the lookup's record, nothing else
    expect(JSON.stringify(trail)).not.toContain(nobody);
    // A known subject: the memories themselves, with the ids rectification takes.
    await page.goto(base + "/console/subjects?user_id=" + user);
    expect(await page.locator("table.memories").textContent()).toContain("Lives at Rua Augusta 12");
    expect(await page.locator("code.memory-id").allTextContents()).toContain(m.id);
    expect(await page.locator("section[aria-labelledby=held]").textContent()).toContain("prefs/lang");
    // Erasure without the confirmation is refused by the server too (the browser's check removed).
    await page.getByLabel(/^Reason \(kept/).fill("ticket " + run);
    await page.locator("input[name=confirm]").evaluate((el) => el.removeAttribute("required"));
    await page.getByRole("button", { name: "Erase this subject everywhere" }).click();
    await expect(page.locator(".problem").textContent()).resolves.toContain("Confirm the erasure");
    expect((await api("GET", "/v1/gdpr/erasures?user_id=" + user, keys.compliance)).items).toHaveLength(0);
    await page.goto(base + "/console/subjects?user_id=" + user);
    await page.getByLabel(/^Reason \(kept/).fill("ticket " + run);
    await page.getByLabel(/I confirm: erase everything/).check();
    await page.getByRole("button", { name: "Erase this subject everywhere" }).click();
    await page.waitForURL(/\/console\/erasures\/[0-9a-f-]{36}$/);
    await page.locator("#verification").waitFor({ timeout: 60_000 });
    await page.reload();
    // The receipt in plain words: tier, what was removed, verified; counters folded away.
    const rows = await page.locator("table.receipt tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent.trim())));
    expect(rows).toContainEqual(["Memories", expect.stringMatching(/^1 memory\b/), "nothing left"]);
    expect(rows).toContainEqual(["Preferences (key-value)", expect.stringMatching(/^1 preference\b/), "nothing left"]);
    expect(JSON.stringify(rows)).not.toMatch(/redis_keys|scope_indexes|idempotency/);
    expect(await page.locator("details summary").textContent()).toContain("Internal counters");
    expect(await page.locator("#kept-note").textContent()).toMatch(/audit log keeps its records.*pseudonym/s);
    // The audit log, newest first, says how each record came in.
    await page.goto(base + "/console/audit");
    const seqs = await page.locator("tbody tr td:first-child").allTextContents();
    const at = await page.locator("tbody tr td:nth-child(2) time").evaluateAll((ts) => ts.map((t) => t.getAttribute("datetime")));
    expect(at.length).toBeGreaterThan(2);
    expect([...at].sort().reverse()).toEqual(at);
    const via = await page.locator("tbody tr td.via").allTextContents();
    expect(via.every((v) => v.trim() !== "")).toBe(true);
    expect(via).toContain("console");
    expect(via).toContain("API");
    expect(seqs.length).toBe(at.length);
    expect(errors.filter((e) => !e.includes("status of 422"))).toEqual([]); // the unconfirmed erasure's answer

    await ctx.close();
  });

  test("usable at 390 px: no horizontal scroll of the page, navigation reachable", async () => {
    const { ctx, page } = await signedIn(keys.admin, { viewport: { width: 390, height: 844 } });
    for (const p of ["/console/jobs", "/console/subjects?user_id=someone", "/console/erasures", "/console/audit",
      "/console/memories?query=x", "/console/kv?namespace=prefs", "/console/policies", "/console/quarantines", "/console/keys"]) {
      await page.goto(base + p);
      const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
      expect(over, p).toBeLessThanOrEqual(0);
      // Every table fits the screen, or scrolls inside its own box.
      const wide = await page.evaluate(() => [...document.querySelectorAll("main table")].filter((t) => {
        const box = (t.closest(".scroll") || t).getBoundingClientRect();
        return box.right > window.innerWidth + 1;
      }).length);
      expect(wide, p).toBe(0);
      // Every control is labelled, every button says what it does.
      const unlabelled = await page.evaluate(() => [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
        .filter((e) => e.labels.length === 0 && !e.getAttribute("aria-label")).map((e) => e.name));
      expect(unlabelled, p).toEqual([]);
      const mute = await page.evaluate(() => [...document.querySelectorAll("button")].filter((b) => !b.textContent.trim()).length);
      expect(mute, p).toBe(0);
    }
    await page.goto(base + "/console/policies");
    await page.getByRole("button", { name: "Preview eviction" }).click();
    await expect(page.locator("#preview").textContent()).resolves.toContain("{");
    await shot(page, "mobile-policies");
    // The tab has the console's icon (no 404 for it).
    const icon = await page.locator("link[rel=icon]").getAttribute("href");
    expect((await page.request.get(base + icon)).status()).toBe(200);
    await ctx.close();
  });
});
