package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// routeAllocWords is the load test's vocabulary (internal/loadtest/workload.go).
var routeAllocWords = strings.Fields(`colour grade reframe caption export render cut trim audio loudness subtitle brand palette
	font lower-third intro outro transition title b-roll interview timeline proxy codec bitrate vertical square
	client prefers warm tones avoid jump cuts keep logo visible music ducking voiceover approved draft final`)

func routeAllocSentence(r *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = routeAllocWords[r.IntN(len(routeAllocWords))]
	}
	return strings.Join(w, " ")
}

// BenchmarkRouteAllocs counts the allocations (and bytes) of one request on each of the
// load test's five hottest routes (issue 42 item 5), through the real server in-process
// (apptest.Start: app.RunWith on real Postgres and Redis, its caches on as in the soak) over
// loopback HTTP with keep-alive. allocs/op counts every goroutine of the process: the
// server's (the event append's group commit too) and the test's HTTP client. The routes
// are the five with the largest weight × per-request cost in the soak (DefaultMix weights;
// costs from docs/bench/soak-profile.txt): state.get (weight 20, the most frequent),
// event.append (15, a committed write), context (10, the costliest: every tier read plus
// token packing — regexp2 token counting was 12 % of the soak's objects), resume (10, the
// job's checkpoint, steps and events) and memory.search (10, scanMemory/scanHit were 25 %
// of the soak's objects). kv.get and state.patch are as frequent as the last three but
// cheaper (one Redis read; one Redis script + write-through); step.start/complete are rarer.
//
// The data and the requests are shaped like the load test's: an agent with 4 jobs (a
// checkpoint, 20 events, 5 completed steps each), a session state, a preferences entry and
// 25 memories for its user; queries are the load test's 5- and 6-word sentences, drawn
// from a fixed seed per iteration so both trees see the same requests. allocs/op is
// deterministic to within a few allocations, so before/after needs no quiet machine:
//
//	go test -run '^$' -bench BenchmarkRouteAllocs -benchtime 2000x -count 3 ./internal/httpapi/
//
// Each op includes the client side (building the request, net/http's client and transport:
// the same in every tree) and a share of the server's background work (small: its pollers
// run about once a second).
func BenchmarkRouteAllocs(b *testing.B) {
	// The real server (app.RunWith): its key and restriction caches are on, as in the soak
	// (app.NewServer leaves them off: every request would ask Postgres).
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"), apptest.NoAutoConsolidation(),
		// Rolling summaries (a 2 s poll) and the access counts' flush (every 1 s) are work per
		// second, not per request: off, so the counts do not depend on how long the run takes.
		apptest.Env("STRATA_SUMMARY_POLL", "1h"), apptest.Env("STRATA_ACCESS_FLUSH", "1h"))
	bearer := "Bearer " + s.NewKey("bench", "agent")
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	call := func(tb testing.TB, method, path string, body []byte, hdr ...string) []byte {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, s.URL+path, rd)
		req.Header.Set("Authorization", bearer)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			tb.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}

	// The load test's setupAgent for one agent, and its memories for the agent's user.
	const agentID, user, session = "agent-0", "user-0", "lt-session-0"
	jobs := []string{"lt-job-0-0", "lt-job-0-1", "lt-job-0-2", "lt-job-0-3"}
	for _, job := range jobs {
		call(b, "PUT", "/v1/jobs/"+job, fmt.Appendf(nil, `{"goal":"edit the launch video for %s","user_id":%q,"agent_id":%q}`, user, user, agentID))
		call(b, "PUT", "/v1/jobs/"+job+"/checkpoint", fmt.Appendf(nil,
			`{"goal":"edit the launch video","current_step":"colour","done":["setup-0","setup-1","setup-2","setup-3","setup-4"],"pending":["export"],"next_action":"grade the second scene","state":{"scene":2,"lut":"kodak","notes":%q}}`,
			strings.Repeat("n", 200)), "If-Match", "*")
		var events []string
		for e := range 20 {
			events = append(events, fmt.Sprintf(`{"op":"video.crop","params":{"frame":%d,"x":10,"y":20},"agent_id":%q}`, e, agentID))
		}
		call(b, "POST", "/v1/jobs/"+job+"/events", []byte("["+strings.Join(events, ",")+"]"))
		for s := range 5 {
			step := fmt.Sprintf("/v1/jobs/%s/steps/setup-%d", job, s)
			w := call(b, "POST", step+"/start", fmt.Appendf(nil, `{"owner":%q}`, agentID))
			var cl struct {
				Token int64 `json:"fencing_token"`
			}
			require.NoError(b, json.Unmarshal(w, &cl))
			call(b, "POST", step+"/complete", fmt.Appendf(nil, `{"fencing_token":%d,"result":{"uri":"s3://bucket/%s/setup-%d"}}`, cl.Token, job, s))
		}
	}
	call(b, "PUT", "/v1/sessions/"+session+"/state", fmt.Appendf(nil,
		`{"state":{"scene":1,"step":"colour","params":{"lut":"kodak","strength":0.7}},"user_id":%q,"agent_id":%q}`, user, agentID))
	call(b, "PUT", "/v1/kv/prefs/style", fmt.Appendf(nil, `{"value":{"palette":["#112233","#445566"],"font":"Inter"},"user_id":%q}`, user))
	for n := range 25 {
		r := rand.New(rand.NewPCG(uint64(n*8), 7))
		call(b, "POST", "/v1/memories", fmt.Appendf(nil, `{"text":%q,"kind":"fact","user_id":%q,"agent_id":%q,"importance":0.5}`,
			fmt.Sprintf("memory %d: %s", n*8, routeAllocSentence(r, 12)), user, agentID))
	}

	// Each route's request for iteration i (the load test's targeter, with a seeded rand).
	routes := []struct {
		name string
		req  func(i int) (method, path string, body []byte)
	}{
		{"state.get", func(int) (string, string, []byte) { return "GET", "/v1/sessions/" + session + "/state", nil }},
		{"event.append", func(i int) (string, string, []byte) {
			return "POST", "/v1/jobs/" + jobs[i%len(jobs)] + "/events",
				fmt.Appendf(nil, `{"op":"video.crop","params":{"frame":%d,"x":10,"y":20,"w":1280,"h":720},"agent_id":%q}`, i%100000, agentID)
		}},
		{"context", func(i int) (string, string, []byte) {
			return "POST", "/v1/context", fmt.Appendf(nil,
				`{"job_id":%q,"session_id":%q,"user_id":%q,"agent_id":%q,"query":%q,"max_tokens":2000,"kv_namespaces":["prefs"]}`,
				jobs[i%len(jobs)], session, user, agentID, routeAllocSentence(rand.New(rand.NewPCG(uint64(i), 1)), 6))
		}},
		{"resume", func(i int) (string, string, []byte) { return "GET", "/v1/jobs/" + jobs[i%len(jobs)] + "/resume", nil }},
		{"memory.search", func(i int) (string, string, []byte) {
			return "POST", "/v1/memories/search", fmt.Appendf(nil, `{"query":%q,"user_id":%q,"agent_id":%q,"top_k":10}`,
				routeAllocSentence(rand.New(rand.NewPCG(uint64(i), 2)), 5), user, agentID)
		}},
	}
	for _, rt := range routes {
		b.Run(rt.name, func(b *testing.B) {
			// A few warm-up calls fill the caches every long-running server has warm (key,
			// prepared statements, pools).
			for i := range 20 {
				m, p, body := rt.req(1_000_000 + i)
				call(b, m, p, body)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m, p, body := rt.req(i)
				call(b, m, p, body)
			}
		})
	}
}
