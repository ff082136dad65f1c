package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// These tests attack the working tier's durability from outside (HTTP, real Postgres and
// Redis): Redis loses data (a flush) or rolls back (a failover to a replica that missed
// writes) while writes are in flight, and every write the server acknowledges must be the
// one Postgres holds.

// sessionRedisKeys are the two Redis keys of a working session (internal/working/keys.go).
func sessionRedisKeys(prefix, org, session string) []string {
	tag := prefix + "ws:{" + org + "/" + session + "}"
	return []string{tag + ":m", tag + ":t"}
}

// dropSession deletes a session's Redis keys: a FLUSHALL as far as this session is concerned.
func dropSession(t *testing.T, rc redis.UniversalClient, prefix, org, session string) {
	t.Helper()
	require.NoError(t, testenv.RedisDel(context.Background(), rc, sessionRedisKeys(prefix, org, session)))
}

// lockWaiters is the number of backends of this database waiting for a lock.
func lockWaiters(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
	return n
}

// waitLockWaiters waits until n backends of this database wait for a lock.
func waitLockWaiters(t *testing.T, c *pgx.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for lockWaiters(t, c) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d lock waiters", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdSessionRow locks the session's durable row in a transaction of its own, so that every
// write's durable half queues behind it; release commits that transaction.
func holdSessionRow(t *testing.T, owner *pgx.Conn, session string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := owner.Begin(ctx)
	require.NoError(t, err)
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM working_sessions WHERE session_id = $1 FOR UPDATE`, session).Scan(&one))
	done := false
	release = func() {
		if !done {
			done = true
			require.NoError(t, tx.Commit(ctx))
		}
	}
	t.Cleanup(func() {
		if !done {
			_ = tx.Rollback(ctx)
		}
	})
	return release
}

// durableState is the session's durable document and version.
func durableState(t *testing.T, owner *pgx.Conn, session string) (map[string]any, int64) {
	t.Helper()
	var raw string
	var v int64
	require.NoError(t, owner.QueryRow(context.Background(),
		`SELECT coalesce(state::text, 'null'), version FROM working_sessions WHERE session_id = $1`, session).Scan(&raw, &v))
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &doc))
	return doc, v
}

// modeHeaders: "trip" sends a state write as the HTTP layer's one round trip (upsert, audit
// record, COMMIT); "tx" adds an Idempotency-Key, which makes the write run on the request's
// transaction (working.Persist.Send) instead.
func modeHeaders(mode, id string) []string {
	if mode == "tx" {
		return []string{"Idempotency-Key", "arb-" + id + "-" + testenv.RandomID(8)}
	}
	return nil
}

// TestWorkingArbiterHeldWriteThenFlush: write A is held in its durable half (the test holds
// the row lock), Redis loses the session, write B is sent with the same If-Match. Only one
// of them may be acknowledged at the next version, and that one is what Postgres keeps.
func TestWorkingArbiterHeldWriteThenFlush(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, mode := range []string{"trip", "tx"} {
		for _, method := range []string{"PUT", "PATCH"} {
			t.Run(mode+"/"+method, func(t *testing.T) {
				sess := "held-" + mode + "-" + method
				path := "/v1/sessions/" + sess + "/state"
				r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "init"}})
				require.Equal(t, 201, r.Status, string(r.Body))

				release := holdSessionRow(t, owner, sess)
				base := lockWaiters(t, watch)
				results := make(chan *apptest.Response, 2)
				send := func(who string) {
					results <- s.Do(method, path, key, map[string]any{"state": map[string]any{"w": who}},
						append([]string{"If-Match", `"1"`}, modeHeaders(mode, who)...)...)
				}
				go send("A")
				waitLockWaiters(t, watch, base+1) // A's Redis half is done; its durable half waits
				dropSession(t, rc, s.Prefix, "acme", sess)
				go send("B")
				waitLockWaiters(t, watch, base+2)
				release()

				var acked []stateResp
				var statuses []int
				for range 2 {
					r := <-results
					statuses = append(statuses, r.Status)
					switch r.Status {
					case 200:
						acked = append(acked, decodeState(t, r))
					case 409:
						require.Contains(t, string(r.Body), "re-read")
					default:
						t.Fatalf("unexpected answer %d %s", r.Status, r.Body)
					}
				}
				require.Len(t, acked, 1, "statuses %v: both writes acknowledged at version %v", statuses, acked)
				require.Equal(t, int64(2), acked[0].Version)

				doc, v := durableState(t, owner, sess)
				require.Equal(t, acked[0].Version, v)
				require.Equal(t, acked[0].State["w"], doc["w"])

				dropSession(t, rc, s.Prefix, "acme", sess)
				got := decodeState(t, s.Do("GET", path, key, nil))
				require.Equal(t, int64(2), got.Version)
				require.Equal(t, acked[0].State["w"], got.State["w"], "the acknowledged document is gone")

				// The session goes on from the durable truth.
				r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "next"}}, "If-Match", `"2"`)
				require.Equal(t, 200, r.Status, string(r.Body))
				require.Equal(t, int64(3), decodeState(t, r).Version)
			})
		}
	}
}

// TestWorkingArbiterFlushStorm: writers with If-Match (re-reading and retrying on 409)
// while another loop keeps deleting the session's Redis keys. Every acknowledged version
// must be acknowledged once, the acknowledged versions must be exactly the durable
// history (none lost), and the durable state must be the last acknowledged write.
func TestWorkingArbiterFlushStorm(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)
	const sess = "storm"
	path := "/v1/sessions/" + sess + "/state"
	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "init"}})
	require.Equal(t, 201, r.Status, string(r.Body))

	const writers = 4
	stop := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	acked := map[int64][]string{} // version → documents acknowledged at it
	flushes, conflicts := 0, 0
	var failed []string // 5xx answers
	errs := make(chan error, writers+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for time.Now().Before(stop) {
			for _, k := range sessionRedisKeys(s.Prefix, "acme", sess) {
				if err := rc.Del(ctx, k).Err(); err != nil {
					errs <- err
					return
				}
			}
			mu.Lock()
			flushes++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop); n++ {
				r := s.Do("GET", path, key, nil)
				if r.Status >= 500 {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("GET %d %s", r.Status, r.Body))
					mu.Unlock()
					continue
				}
				if r.Status != 200 {
					errs <- fmt.Errorf("GET %d %s", r.Status, r.Body)
					return
				}
				doc := fmt.Sprintf("w%d-%d", w, n)
				method := "PUT"
				if n%2 == 1 {
					method = "PATCH"
				}
				hdr := []string{"If-Match", r.Header.Get("ETag")}
				if n%3 == 2 {
					hdr = append(hdr, modeHeaders("tx", doc)...)
				}
				r = s.Do(method, path, key, map[string]any{"state": map[string]any{"w": doc}}, hdr...)
				switch r.Status {
				case 200:
					var st stateResp
					if err := json.Unmarshal(r.Body, &st); err != nil {
						errs <- err
						return
					}
					if st.State["w"] != doc {
						errs <- fmt.Errorf("answered %v for %s", st.State, doc)
						return
					}
					mu.Lock()
					acked[st.Version] = append(acked[st.Version], doc)
					mu.Unlock()
				case 409:
					mu.Lock()
					conflicts++
					mu.Unlock()
				case 500, 503:
					// Asserted below, after what matters most: the outcome of a 5xx is unknown.
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s %d %s", method, r.Status, r.Body))
					mu.Unlock()
				default:
					errs <- fmt.Errorf("%s %d %s", method, r.Status, r.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	versions := make([]int64, 0, len(acked))
	for v, docs := range acked {
		require.Len(t, docs, 1, "version %d acknowledged for %d different writes: %v", v, len(docs), docs)
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	require.NotEmpty(t, versions)
	doc, v := durableState(t, owner, sess)
	last := versions[len(versions)-1]
	require.Equal(t, last, v, "the durable version is not the last acknowledged one")
	require.Equal(t, acked[last][0], doc["w"], "the durable document is not the last acknowledged write")
	require.Empty(t, failed, "a flush storm must not make requests fail")
	// Every durable version after the first was acknowledged exactly once: none was lost
	// (overwritten in Postgres by an unacknowledged write, or acknowledged without being stored).
	for i, ver := range versions {
		require.Equal(t, int64(i+2), ver, "acknowledged versions %v are not the durable history 2..%d", versions, v)
	}
	t.Logf("%d acknowledged writes, %d conflicts, %d flushes", len(versions), conflicts, flushes)

	dropSession(t, rc, s.Prefix, "acme", sess)
	got := decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, last, got.Version)
	require.Equal(t, acked[last][0], got.State["w"])
}

// snapshotSession DUMPs a session's Redis keys; rollback RESTOREs them (a failover to a
// replica that missed the writes since).
func snapshotSession(t *testing.T, rc redis.UniversalClient, prefix, org, session string) (rollback func()) {
	t.Helper()
	ctx := context.Background()
	dumps := map[string]string{}
	for _, k := range sessionRedisKeys(prefix, org, session) {
		d, err := rc.Dump(ctx, k).Result()
		if err == redis.Nil {
			continue
		}
		require.NoError(t, err)
		dumps[k] = d
	}
	require.NotEmpty(t, dumps)
	return func() {
		t.Helper()
		dropSession(t, rc, prefix, org, session)
		for k, d := range dumps {
			require.NoError(t, rc.RestoreReplace(ctx, k, time.Hour, d).Err())
		}
	}
}

// TestWorkingArbiterRolledBackRedis: Redis comes back with an older copy of the session (a
// replica that missed two writes); a write with If-Match at that older version must not be
// acknowledged, and afterwards the session reads the durable truth.
func TestWorkingArbiterRolledBackRedis(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, mode := range []string{"trip", "tx"} {
		for _, method := range []string{"PUT", "PATCH"} {
			t.Run(mode+"/"+method, func(t *testing.T) {
				sess := "rb-" + mode + "-" + method
				path := "/v1/sessions/" + sess + "/state"
				r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "v1"}})
				require.Equal(t, 201, r.Status, string(r.Body))
				rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)
				for v := 2; v <= 3; v++ {
					r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "v" + strconv.Itoa(v)}},
						"If-Match", strconv.Quote(strconv.Itoa(v-1)))
					require.Equal(t, 200, r.Status, string(r.Body))
				}
				rollback()

				r = s.Do(method, path, key, map[string]any{"state": map[string]any{"w": "stale"}},
					append([]string{"If-Match", `"1"`}, modeHeaders(mode, "stale")...)...)
				require.Equal(t, 409, r.Status, "a write on a rolled-back Redis copy was acknowledged: %s", r.Body)
				require.Contains(t, string(r.Body), "re-read")

				doc, v := durableState(t, owner, sess)
				require.Equal(t, int64(3), v)
				require.Equal(t, "v3", doc["w"])
				got := decodeState(t, s.Do("GET", path, key, nil))
				require.Equal(t, int64(3), got.Version, "after the conflict the session must read the durable truth")
				require.Equal(t, "v3", got.State["w"])

				r = s.Do(method, path, key, map[string]any{"state": map[string]any{"w": "v4"}}, "If-Match", `"3"`)
				require.Equal(t, 200, r.Status, string(r.Body))
				require.Equal(t, int64(4), decodeState(t, r).Version)
			})
		}
	}
}

// durableLog is the session's durable turn log: seq → content.
func durableLog(t *testing.T, owner *pgx.Conn, session string) map[int64]string {
	t.Helper()
	rows, err := owner.Query(context.Background(), `SELECT seq, content FROM working_turns WHERE session_id = $1`, session)
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var q int64
		var c string
		require.NoError(t, rows.Scan(&q, &c))
		out[q] = c
	}
	require.NoError(t, rows.Err())
	return out
}

type postedTurns struct {
	Seq   int64      `json:"seq"`
	Items []turnResp `json:"items"`
}

// TestWorkingArbiterTurnsHeldAppendThenFlush: append A is held in its durable half, Redis
// loses the session, append B (a single turn or a batch) follows. Both are acknowledged
// (an append has no precondition), so every acknowledged turn must be in the durable log
// under its own seq.
func TestWorkingArbiterTurnsHeldAppendThenFlush(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			sess := fmt.Sprintf("turns-held-%v", batch)
			mpath := "/v1/sessions/" + sess + "/messages"
			r := s.Do("POST", mpath, key, map[string]any{"role": "user", "content": "m1"})
			require.Equal(t, 201, r.Status, string(r.Body))

			release := holdSessionRow(t, owner, sess)
			base := lockWaiters(t, watch)
			type res struct {
				who string
				r   *apptest.Response
			}
			results := make(chan res, 2)
			body := func(who string) map[string]any {
				if batch {
					return map[string]any{"messages": []map[string]any{
						{"role": "user", "content": who + "-1"}, {"role": "assistant", "content": who + "-2"}}}
				}
				return map[string]any{"role": "user", "content": who}
			}
			go func() { results <- res{"A", s.Do("POST", mpath, key, body("A"))} }()
			waitLockWaiters(t, watch, base+1)
			dropSession(t, rc, s.Prefix, "acme", sess)
			go func() { results <- res{"B", s.Do("POST", mpath, key, body("B"))} }()
			waitLockWaiters(t, watch, base+2)
			release()

			ackd := map[int64]string{}
			for range 2 {
				x := <-results
				require.Equal(t, 201, x.r.Status, "%s: %s", x.who, x.r.Body)
				var p postedTurns
				x.r.JSON(t, &p)
				if batch {
					require.Len(t, p.Items, 2)
					for _, it := range p.Items {
						_, dup := ackd[it.Seq]
						require.False(t, dup, "seq %d acknowledged twice", it.Seq)
						ackd[it.Seq] = it.Content
					}
				} else {
					_, dup := ackd[p.Seq]
					require.False(t, dup, "seq %d acknowledged twice", p.Seq)
					ackd[p.Seq] = x.who
				}
			}
			log := durableLog(t, owner, sess)
			for q, c := range ackd {
				require.Equal(t, c, log[q], "acknowledged turn %d (%q) is not in the durable log %v", q, c, log)
			}
			require.Len(t, log, 1+len(ackd))

			// The buffer, restored from Postgres, and the next append agree with the log.
			dropSession(t, rc, s.Prefix, "acme", sess)
			buf := decodeTurns(t, s.Do("GET", mpath, key, nil))
			require.Len(t, buf.Items, len(log))
			r = s.Do("POST", mpath, key, map[string]any{"role": "user", "content": "after"})
			require.Equal(t, 201, r.Status, string(r.Body))
			var p postedTurns
			r.JSON(t, &p)
			require.Equal(t, "after", durableLog(t, owner, sess)[p.Seq])
		})
	}
}

// TestWorkingArbiterTurnsRolledBackRedis: Redis comes back with an older copy of the
// session's buffer and counter; the next append must not reuse a seq that Postgres holds.
func TestWorkingArbiterTurnsRolledBackRedis(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			sess := fmt.Sprintf("turns-rb-%v", batch)
			mpath := "/v1/sessions/" + sess + "/messages"
			require.Equal(t, 201, s.Do("POST", mpath, key, map[string]any{"role": "user", "content": "m1"}).Status)
			rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)
			require.Equal(t, 201, s.Do("POST", mpath, key, map[string]any{"role": "user", "content": "m2"}).Status)
			require.Equal(t, 201, s.Do("POST", mpath, key, map[string]any{"role": "user", "content": "m3"}).Status)
			rollback()

			var r *apptest.Response
			want := []string{"late"}
			if batch {
				want = []string{"late-1", "late-2"}
				r = s.Do("POST", mpath, key, map[string]any{"messages": []map[string]any{
					{"role": "user", "content": want[0]}, {"role": "assistant", "content": want[1]}}})
			} else {
				r = s.Do("POST", mpath, key, map[string]any{"role": "user", "content": want[0]})
			}
			require.Equal(t, 201, r.Status, string(r.Body))
			var p postedTurns
			r.JSON(t, &p)
			seqs := []int64{p.Seq}
			if batch {
				seqs = []int64{p.Items[0].Seq, p.Items[1].Seq}
			}
			log := durableLog(t, owner, sess)
			for i, q := range seqs {
				require.Equal(t, want[i], log[q], "acknowledged turn %d (%q) is not in the durable log %v", q, want[i], log)
			}
			require.Equal(t, "m2", log[2])
			require.Equal(t, "m3", log[3])
			require.Len(t, log, 3+len(want))
		})
	}
}

// TestWorkingArbiterRolledBackDelete: a DELETE with If-Match at a version the rolled-back
// Redis copy still shows, but Postgres has moved past, must not delete the newer state.
func TestWorkingArbiterRolledBackDelete(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)
	const sess = "rb-delete"
	path := "/v1/sessions/" + sess + "/state"
	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "v1"}}).Status)
	rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)
	require.Equal(t, 200, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "v2"}}, "If-Match", `"1"`).Status)
	rollback()

	r := s.Do("DELETE", path, key, nil, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, "a delete matched a version Postgres no longer holds: %d %s", r.Status, r.Body)
	doc, v := durableState(t, owner, sess)
	require.Equal(t, int64(2), v)
	require.Equal(t, "v2", doc["w"])
	got := decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, "v2", got.State["w"])
	require.Equal(t, 204, s.Do("DELETE", path, key, nil, "If-Match", `"2"`).Status)
	require.Equal(t, 404, s.Do("GET", path, key, nil).Status)
}
