package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkContextSummarySection: POST /v1/context for a session and a job that have rolling
// summaries against the same call for a session and job of the same size without: the cost
// of the summary section (two more statements in the first round trip, their lines packed).
//
//	go test -run '^$' -bench BenchmarkContextSummarySection -benchtime 300x ./internal/httpapi/
func BenchmarkContextSummarySection(b *testing.B) {
	// The dispatcher runs once at start (nothing to do) and then not within the run: the
	// summaries of the "with" pair are written as the worker writes them (400 tokens each).
	s := apptest.Start(b, apptest.NoAutoConsolidation(), apptest.Env("STRATA_TURN_BUFFER", "20"),
		apptest.Env("STRATA_SUMMARY_POLL", "1h"))
	key := s.NewKey("acme", "agent")
	seed := func(session, job string) {
		for p := 0; p < 2; p++ {
			var msgs []map[string]any
			for i := 1; i <= 100; i++ {
				msgs = append(msgs, map[string]any{"role": []string{"user", "assistant"}[i%2],
					"content": fmt.Sprintf("Turn %d: export reel %d in 4K with warm teal grade and captions.", i, i%17)})
			}
			r := s.Do("POST", "/v1/sessions/"+session+"/messages", key, map[string]any{"messages": msgs, "user_id": "u1"})
			require.Equal(b, 201, r.Status)
		}
		r := s.Do("PUT", "/v1/jobs/"+job, key, map[string]any{"goal": "promo", "user_id": "u1"})
		require.Contains(b, []int{200, 201}, r.Status)
		evs := make([]map[string]any, 500)
		for i := range evs {
			evs[i] = map[string]any{"op": fmt.Sprintf("clip%d.trim", i%23), "params": map[string]any{"in": i % 60, "out": i%60 + 4}}
		}
		r = s.Do("POST", "/v1/jobs/"+job+"/events", key, evs)
		require.Contains(b, []int{200, 201}, r.Status, string(r.Body))
	}
	seed("with-s", "with-j")
	seed("without-s", "without-j")
	owner := testenv.OwnerConn(b, s.DBURL)
	var lines []string
	for i := 0; i < 20; i++ {
		lines = append(lines, fmt.Sprintf("user: Export reel %d in 4K with the warm teal grade and burned-in captions.", i))
	}
	text := strings.Join(lines, "\n")
	for _, sub := range [][2]string{{"session", "with-s"}, {"job", "with-j"}} {
		_, err := owner.Exec(context.Background(), `INSERT INTO summaries (org_id, subject_kind, subject_id, version, user_id,
			from_seq, added_from, to_seq, items, text, tokens, summarizer, created_at)
			VALUES ('acme', $1, $2, 1, 'u1', 1, 1, 180, 180, $3, 400, 'extractive', now())`, sub[0], sub[1], text)
		require.NoError(b, err)
	}
	require.Equal(b, 200, s.Do("GET", "/v1/jobs/with-j/summary", key, nil).Status)
	require.Equal(b, 404, s.Do("GET", "/v1/jobs/without-j/summary", key, nil).Status)
	// Warm both paths first (plans, codecs), then alternate so drift hits both alike.
	cases := []struct{ name, session, job string }{{"without", "without-s", "without-j"}, {"with_summaries", "with-s", "with-j"}}
	for _, c := range cases {
		for range 50 {
			s.Do("POST", "/v1/context", key, map[string]any{"user_id": "u1", "session_id": c.session, "job_id": c.job, "max_tokens": 2000})
		}
	}
	for _, c := range append(cases, cases...) {
		b.Run(c.name, func(b *testing.B) {
			body := map[string]any{"user_id": "u1", "session_id": c.session, "job_id": c.job, "max_tokens": 2000}
			for b.Loop() {
				r := s.Do("POST", "/v1/context", key, body)
				if r.Status != 200 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
	}
}
