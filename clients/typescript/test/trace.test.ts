import { expect, test } from "vitest";
import { Strata } from "../src/index.js";

// The propagate option puts the caller's trace context on every request (here a stand-in
// for OpenTelemetry's propagation.inject); without it, no traceparent is sent.
test("propagate adds the caller's traceparent to each request", async () => {
  const seen: (string | null)[] = [];
  const fakeFetch = (async (_url: string | URL | Request, init?: RequestInit) => {
    seen.push(new Headers(init?.headers).get("traceparent"));
    return new Response(JSON.stringify({ session_id: "s1", state: {}, version: 1 }), {
      status: 200,
      headers: { "Content-Type": "application/json" },
    });
  }) as typeof fetch;
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const traced = new Strata({ url: "http://strata.invalid", apiKey: "sk_test", fetch: fakeFetch,
    propagate: (h) => { h["traceparent"] = tp; } });
  await traced.request("GET", "/v1/sessions/s1/state");
  await traced.request("PUT", "/v1/sessions/s1/state", { body: { state: {} } });
  const plain = new Strata({ url: "http://strata.invalid", apiKey: "sk_test", fetch: fakeFetch });
  await plain.request("GET", "/v1/sessions/s1/state");
  expect(seen).toEqual([tp, tp, null]);
});
