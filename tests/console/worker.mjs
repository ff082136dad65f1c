// A job worker the browser test runs as its own process and SIGKILLs: it fetches, tries to
// summarise (the model fails, retryable), and dies while it backs off before retrying, so
// the job is left running with a failed step and nobody working on it: stalled.
const [base, key, job] = process.argv.slice(2);
async function api(method, path, body) {
  const r = await fetch(base + path, { method, headers: { Authorization: "Bearer " + key, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
const jp = "/v1/jobs/" + encodeURIComponent(job);
await api("PUT", jp, { goal: "Summarise the Q3 report for the board", owner: "worker-1", agent_id: "analyst" });
let c = await api("POST", jp + "/steps/fetch/start", { owner: "worker-1", lease_seconds: 30, input: { tool: "http.get", params: { url: "https://intranet/q3.pdf" } } });
await api("POST", jp + "/steps/fetch/complete", { fencing_token: c.fencing_token, result: { bytes: 48213 } });
c = await api("POST", jp + "/steps/summarise/start", { owner: "worker-1", lease_seconds: 30, input: { tool: "llm.summarise", model: "m-large", params: { doc: "q3-report.pdf", words: 200 } } });
await api("POST", jp + "/steps/summarise/fail", { fencing_token: c.fencing_token, error: "upstream 503: model overloaded", disposition: "retryable" });
console.log("backing off");
setInterval(() => {}, 60_000); // backing off before the retry: SIGKILLed here
