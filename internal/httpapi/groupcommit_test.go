package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// groupStats reads the group commit histogram: how many groups were written and how many
// requests they held, and the fallbacks by reason.
func groupStats(t *testing.T, s *apptest.Server) (groups, members int, fallbacks map[string]int) {
	t.Helper()
	r := s.Do("GET", "/metrics", "", nil)
	require.Equal(t, 200, r.Status)
	body := string(r.Body)
	num := func(re string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		f, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return int(f)
	}
	groups = num(`(?m)^strata_group_commit_size_count (\S+)$`)
	members = num(`(?m)^strata_group_commit_size_sum (\S+)$`)
	fallbacks = map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^strata_group_commit_fallbacks_total\{reason="([a-z_]+)"\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		fallbacks[m[1]] = int(n)
	}
	return groups, members, fallbacks
}

// Concurrent appends are written in groups, and every guarantee of a single append holds:
// gap-free seqs per job, each acknowledged event stored once at the seq its response gave,
// one audit record per request, Idempotency-Key replays answer the stored response.
func TestGroupCommitConcurrentAppends(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("acme", "agent")
	const writers, each = 24, 30
	type acked struct {
		job string
		seq int64
		m   string
	}
	var mu sync.Mutex
	var all []acked
	replays := map[string]string{} // Idempotency-Key → body
	errs := make(chan string, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				job := fmt.Sprintf("shared-%d", i%3) // contended jobs
				if w%2 == 0 {
					job = fmt.Sprintf("own-%d", w) // and jobs of their own
				}
				m := fmt.Sprintf("w%d-i%d", w, i)
				var body any = map[string]any{"op": "render", "params": map[string]any{"m": m}, "agent_id": "a"}
				if i%4 == 3 { // an array of two
					body = []map[string]any{{"op": "render", "params": map[string]any{"m": m}}, {"op": "render", "params": map[string]any{"m": m + "-b"}}}
				}
				var hdr []string
				if i%2 == 1 {
					hdr = []string{"Idempotency-Key", "k-" + m}
				}
				r := s.Do("POST", "/v1/jobs/"+job+"/events", key, body, hdr...)
				if r.Status != 201 {
					errs <- fmt.Sprintf("%s: %d %s", m, r.Status, r.Body)
					return
				}
				var evs []epEvent
				if i%4 == 3 {
					var l epList
					if err := json.Unmarshal(r.Body, &l); err != nil || len(l.Items) != 2 || l.Items[1].Seq != l.Items[0].Seq+1 {
						errs <- "bad array response " + string(r.Body)
						return
					}
					evs = l.Items
				} else {
					var e epEvent
					if err := json.Unmarshal(r.Body, &e); err != nil {
						errs <- "bad response " + string(r.Body)
						return
					}
					evs = []epEvent{e}
				}
				mu.Lock()
				for _, e := range evs {
					var p struct{ M string }
					_ = json.Unmarshal(e.Params, &p)
					all = append(all, acked{e.JobID, e.Seq, p.M})
				}
				if len(hdr) > 0 {
					replays[hdr[1]] = job + "\x00" + string(r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		require.Fail(t, e)
	}
	groups, members, fb := groupStats(t, s)
	t.Logf("%d requests in %d groups (fallbacks %v)", members, groups, fb)
	require.Less(t, groups, members, "some appends were written together")

	// Every acknowledged event is stored once, at its seq; per job, seqs are 1..n.
	db := testenv.OwnerConn(t, s.DBURL)
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT job_id, seq, params->>'m' FROM episodic_events WHERE org_id = 'acme' ORDER BY job_id, seq`)
	require.NoError(t, err)
	stored := map[acked]bool{}
	last := map[string]int64{}
	for rows.Next() {
		var a acked
		require.NoError(t, rows.Scan(&a.job, &a.seq, &a.m))
		require.Equal(t, last[a.job]+1, a.seq, "seqs of %s are gap-free", a.job)
		last[a.job] = a.seq
		stored[a] = true
	}
	require.NoError(t, rows.Err())
	require.Len(t, stored, len(all))
	for _, a := range all {
		require.True(t, stored[a], "acknowledged %v is stored", a)
	}
	// One audit record per request, naming the job.
	var audits int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = 'acme' AND action = 'append-events'`).Scan(&audits))
	require.Equal(t, writers*each, audits)

	// A retry with the key replays the stored response and appends nothing.
	n := 0
	for k, v := range replays {
		if n++; n > 5 {
			break
		}
		job, body, _ := cut0(v)
		var req any
		var e epEvent
		var l epList
		if json.Unmarshal([]byte(body), &e) == nil && e.Seq > 0 {
			req = map[string]any{"op": "render", "params": map[string]any{"m": mOf(t, e.Params)}, "agent_id": "a"}
		}
		if json.Unmarshal([]byte(body), &l) == nil && len(l.Items) == 2 {
			m := mOf(t, l.Items[0].Params)
			req = []map[string]any{{"op": "render", "params": map[string]any{"m": m}}, {"op": "render", "params": map[string]any{"m": m + "-b"}}}
		}
		r := s.Do("POST", "/v1/jobs/"+job+"/events", key, req, "Idempotency-Key", k)
		require.Equal(t, 201, r.Status, string(r.Body))
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
		require.Equal(t, body, string(r.Body))
	}
	var count int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM episodic_events WHERE org_id = 'acme'`).Scan(&count))
	require.Equal(t, len(all), count)
}

func cut0(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == 0 {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func mOf(t *testing.T, params json.RawMessage) string {
	var p struct{ M string }
	require.NoError(t, json.Unmarshal(params, &p))
	return p.M
}

// A grouped append answers exactly what the single-request path answers: status, headers,
// body; an Idempotency-Key reused with another body is refused the same way.
func TestGroupCommitSameAnswer(t *testing.T) {
	t.Parallel()
	on := apptest.Start(t)
	off := apptest.Start(t, apptest.Env("STRATA_GROUP_COMMIT", "false"))
	for n, body := range []string{
		`{"op":"video.crop","params":{"w":1280,"label":"<b>&</b>"},"result":{"ok":true},"agent_id":"ed","user_id":"u1","session_id":"s1"}`,
		`[{"op":"a","params":{"x":1}},{"op":"b","result":[1,2]}]`,
	} {
		var answers [2]*apptest.Response
		path, ikey := fmt.Sprintf("/v1/jobs/same-%d/events", n), fmt.Sprintf("same-%d", n)
		for i, s := range []*apptest.Server{on, off} {
			key := s.NewKey("acme", "agent")
			r := s.Do("POST", path, key, body, "Idempotency-Key", ikey)
			require.Equal(t, 201, r.Status, string(r.Body))
			answers[i] = r
			// The replay and a mismatch.
			again := s.Do("POST", path, key, body, "Idempotency-Key", ikey)
			require.Equal(t, string(r.Body), string(again.Body))
			require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
			bad := s.Do("POST", path, key, `{"op":"other"}`, "Idempotency-Key", ikey)
			require.Equal(t, 422, bad.Status, string(bad.Body))
		}
		norm := func(b []byte) string {
			return regexp.MustCompile(`"created_at":"[^"]+"`).ReplaceAllString(string(b), `"created_at":"T"`)
		}
		require.Equal(t, norm(answers[1].Body), norm(answers[0].Body))
		for _, h := range []string{"Content-Type", "Etag", "Location", "Link"} {
			require.Equal(t, answers[1].Header.Get(h), answers[0].Header.Get(h), h)
		}
		groups, _, _ := groupStats(t, on)
		require.Positive(t, groups, "the append went through group commit")
	}
}

// A group that cannot finish (a row lock held past the group's lock timeout) rolls back
// as a whole and every member is written on the single-request path: no request fails,
// nothing is written twice, seqs stay gap-free.
func TestGroupCommitFallsBackWhole(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("POST", "/v1/jobs/held/events", key, map[string]any{"op": "first"}).Status)
	// Another transaction holds the job's counter row for a while.
	db := testenv.OwnerConn(t, s.DBURL)
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM episodic_jobs WHERE org_id = 'acme' AND job_id = 'held' FOR UPDATE`)
	require.NoError(t, err)
	released := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond) // kept: the row lock must outlast the server's real group lock timeout
		_ = tx.Commit(ctx)
		close(released)
	}()
	const n = 12
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := fmt.Sprintf("free-%d", i)
			if i%3 == 0 {
				job = "held"
			}
			statuses[i] = s.Do("POST", "/v1/jobs/"+job+"/events", key, map[string]any{"op": "x", "params": map[string]any{"i": i}},
				"Idempotency-Key", fmt.Sprintf("fb-%d", i)).Status
		}()
	}
	wg.Wait()
	<-released
	for i, st := range statuses {
		require.Equal(t, 201, st, "request %d", i)
	}
	_, _, fb := groupStats(t, s)
	require.Positive(t, fb["statement"], "a group waited past its lock timeout and fell back: %v", fb)
	var events, held, maxSeq int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE job_id = 'held'),
		max(seq) FILTER (WHERE job_id = 'held') FROM episodic_events WHERE org_id = 'acme'`).Scan(&events, &held, &maxSeq))
	require.Equal(t, n+1, events, "each request wrote its event once")
	require.Equal(t, held, maxSeq, "gap-free")
	var audits, records int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = 'acme' AND action = 'append-events'`).Scan(&audits))
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE org_id = 'acme' AND response_status = 201`).Scan(&records))
	require.Equal(t, n+1, audits)
	require.Equal(t, n, records)
}

// Groups are per org: two orgs appending to jobs with the same ids at once each see only
// their own events, and their audit records name their own keys.
func TestGroupCommitOrgs(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_RATE_LIMIT", "0"))
	keys := map[string]string{"acme": s.NewKey("acme", "agent"), "globex": s.NewKey("globex", "agent")}
	var wg sync.WaitGroup
	for org, key := range keys {
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					r := s.Do("POST", "/v1/jobs/j/events", key, map[string]any{"op": org, "params": map[string]any{"w": w, "i": i}})
					if r.Status != 201 {
						t.Errorf("%s: %d %s", org, r.Status, r.Body)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for org, key := range keys {
		r := s.Do("GET", "/v1/jobs/j/events?limit=1000", key, nil)
		require.Equal(t, 200, r.Status)
		var l epList
		r.JSON(t, &l)
		require.Len(t, l.Items, 80)
		for i, e := range l.Items {
			require.Equal(t, org, e.Op, "only %s's events", org)
			require.Equal(t, int64(i+1), e.Seq)
		}
	}
	var mixed int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log a JOIN api_keys k ON k.id = a.actor_key_id WHERE a.action = 'append-events' AND k.org_id <> a.org_id`).Scan(&mixed))
	require.Zero(t, mixed)
}
