package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// These tests attack the other side of "Postgres is the arbiter": ordinary contention, with
// no Redis loss at all, must not be answered 409. Redis orders the writes (v2 for A, v3 for
// B built on A's document), but their durable halves may reach Postgres in either order.

// holdDurableVersion makes the durable half of the session's write that claims version v
// wait (a trigger on working_sessions takes an advisory lock the test holds) until release
// is called; other writes pass. This puts a later write's upsert ahead of an earlier one's
// deterministically, as a slow connection or scheduler would.
func holdDurableVersion(t *testing.T, owner *pgx.Conn, session string, v int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	lockKey := int64(0x5a7a) + v
	name := fmt.Sprintf("hold_%s_%d", strings.NewReplacer("-", "_").Replace(session), v)
	_, err := owner.Exec(ctx, `CREATE OR REPLACE FUNCTION test_hold_version() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.session_id = TG_ARGV[0] AND NEW.version = TG_ARGV[1]::bigint THEN
				PERFORM pg_advisory_xact_lock(TG_ARGV[2]::bigint);
			END IF;
			RETURN NEW;
		END $$`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON working_sessions FOR EACH ROW
		EXECUTE FUNCTION test_hold_version('%s', '%d', '%d')`, name, session, v, lockKey))
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey)
	require.NoError(t, err)
	done := false
	release = func() {
		if !done {
			done = true
			_, err := owner.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockKey)
			require.NoError(t, err)
			_, err = owner.Exec(ctx, `DROP TRIGGER `+name+` ON working_sessions`)
			require.NoError(t, err)
		}
	}
	t.Cleanup(release)
	return release
}

// TestWorkingLineageOutOfOrderDurableHalves: write A gets v2 in Redis, and its durable half
// is held; write B, built on A's document (a PATCH without If-Match re-reads it, a PUT with
// If-Match 2 saw it), gets v3, and its upsert reaches Postgres first. Nothing was lost, so
// both must be acknowledged, and the durable state is B's (which contains A's change).
func TestWorkingLineageOutOfOrderDurableHalves(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, mode := range []string{"trip", "tx"} {
		for _, method := range []string{"PUT", "PATCH"} {
			t.Run(mode+"/"+method, func(t *testing.T) {
				sess := "ooo-" + mode + "-" + method
				path := "/v1/sessions/" + sess + "/state"
				r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"init": "1"}})
				require.Equal(t, 201, r.Status, string(r.Body))

				release := holdDurableVersion(t, owner, sess, 2)
				base := lockWaiters(t, watch)
				resA := make(chan *apptest.Response, 1)
				go func() {
					if method == "PUT" {
						resA <- s.Do("PUT", path, key, map[string]any{"state": map[string]any{"init": "1", "a": "A"}},
							append([]string{"If-Match", `"1"`}, modeHeaders(mode, "A")...)...)
					} else {
						resA <- s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"a": "A"}}, modeHeaders(mode, "A")...)
					}
				}()
				waitLockWaiters(t, watch, base+1) // A is at v2 in Redis; its durable half waits

				var rB *apptest.Response
				if method == "PUT" {
					seen := decodeState(t, s.Do("GET", path, key, nil))
					require.Equal(t, int64(2), seen.Version)
					rB = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"init": "1", "a": seen.State["a"], "b": "B"}},
						append([]string{"If-Match", `"2"`}, modeHeaders(mode, "B")...)...)
				} else {
					rB = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": "B"}}, modeHeaders(mode, "B")...)
				}
				release()
				rA := <-resA
				require.Equal(t, 200, rB.Status, "B (v3, built on A) reached Postgres first and was refused: %s", rB.Body)
				require.Equal(t, 200, rA.Status, "A (v2, an ancestor of the durable v3) was refused: %s", rA.Body)
				stA, stB := decodeState(t, rA), decodeState(t, rB)
				require.Equal(t, int64(2), stA.Version)
				require.Equal(t, int64(3), stB.Version)
				require.Equal(t, "A", stB.State["a"])
				require.Equal(t, "B", stB.State["b"])

				doc, v := durableState(t, owner, sess)
				require.Equal(t, int64(3), v, "A's late upsert moved the durable version")
				require.Equal(t, map[string]any{"init": "1", "a": "A", "b": "B"}, doc)
				got := decodeState(t, s.Do("GET", path, key, nil))
				require.Equal(t, int64(3), got.Version)
				require.Equal(t, doc, got.State)
				dropSession(t, rc, s.Prefix, "acme", sess)
				got = decodeState(t, s.Do("GET", path, key, nil))
				require.Equal(t, int64(3), got.Version)
				require.Equal(t, doc, got.State)

				r = s.Do(method, path, key, map[string]any{"state": map[string]any{"init": "1", "c": "C"}}, "If-Match", `"3"`)
				require.Equal(t, 200, r.Status, string(r.Body))
				require.Equal(t, int64(4), decodeState(t, r).Version)
			})
		}
	}
}

// TestWorkingLineageConcurrentPatches: writers PATCH different fields of one session
// without If-Match (no Redis loss). PATCH without If-Match absorbs concurrency, so no answer
// may be a conflict and every field must be in the final document.
func TestWorkingLineageConcurrentPatches(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	const sess = "patchers"
	path := "/v1/sessions/" + sess + "/state"
	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"init": "1"}})
	require.Equal(t, 201, r.Status, string(r.Body))

	const writers, each = 6, 12
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				field := fmt.Sprintf("w%d-%d", w, n)
				var hdr []string
				if n%3 == 2 {
					hdr = modeHeaders("tx", field)
				}
				r := s.Do("PATCH", path, key, map[string]any{"state": map[string]any{field: n}}, hdr...)
				if r.Status != 200 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s: %d %s", field, r.Status, r.Body))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, bad, "PATCH without If-Match answered other than 200")
	doc, v := durableState(t, owner, sess)
	require.Equal(t, int64(1+writers*each), v)
	for w := range writers {
		for n := range each {
			require.Contains(t, doc, fmt.Sprintf("w%d-%d", w, n))
		}
	}
	got := decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, doc, got.State)
}

// TestWorkingLineageConcurrentIfMatch: writers GET, then PUT or PATCH with If-Match, and
// retry on 409 (no Redis loss). A 409 may only be a genuine version mismatch (the one Redis
// answers, naming the current version); every acknowledged version is acknowledged once,
// and they are exactly the durable history.
func TestWorkingLineageConcurrentIfMatch(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	const sess = "ifmatchers"
	path := "/v1/sessions/" + sess + "/state"
	r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"w": "init"}})
	require.Equal(t, 201, r.Status, string(r.Body))

	const writers = 4
	stop := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	acked := map[int64][]string{}
	var bad []string
	mismatches := 0
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop); n++ {
				g := s.Do("GET", path, key, nil)
				if g.Status != 200 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("GET %d %s", g.Status, g.Body))
					mu.Unlock()
					return
				}
				doc := fmt.Sprintf("w%d-%d", w, n)
				method := "PUT"
				if n%2 == 1 {
					method = "PATCH"
				}
				hdr := []string{"If-Match", g.Header.Get("ETag")}
				if n%3 == 2 {
					hdr = append(hdr, modeHeaders("tx", doc)...)
				}
				r := s.Do(method, path, key, map[string]any{"state": map[string]any{"w": doc}}, hdr...)
				mu.Lock()
				switch {
				case r.Status == 200:
					var st stateResp
					if err := json.Unmarshal(r.Body, &st); err != nil || st.State["w"] != doc {
						bad = append(bad, fmt.Sprintf("answered %s for %s", r.Body, doc))
					}
					acked[st.Version] = append(acked[st.Version], doc)
				case r.Status == 409 && strings.Contains(string(r.Body), "since the version in If-Match"):
					mismatches++
				default:
					bad = append(bad, fmt.Sprintf("%s %s: %d %s", method, doc, r.Status, r.Body))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, bad, "answers other than 200 or a genuine version mismatch")
	versions := make([]int64, 0, len(acked))
	for v, docs := range acked {
		require.Len(t, docs, 1, "version %d acknowledged for %v", v, docs)
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for i, v := range versions {
		require.Equal(t, int64(i+2), v, "acknowledged versions %v are not the durable history", versions)
	}
	doc, v := durableState(t, owner, sess)
	last := versions[len(versions)-1]
	require.Equal(t, last, v)
	require.Equal(t, acked[last][0], doc["w"])
	t.Logf("%d acknowledged writes, %d genuine mismatches", len(versions), mismatches)
}

// TestWorkingLineageDivergedAncestors: Redis rolled back to v1 while Postgres holds an
// acknowledged v2 (X). Three PATCHes build v2, v3, v4 on the stale copy, and v4's upsert
// arrives first. Its version is ahead of the row's, but its lineage does not contain the
// durable v2: applying it would overwrite X with a document never built on it. All three
// must be refused, and X stays.
func TestWorkingLineageDivergedAncestors(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)
	const sess = "diverged"
	path := "/v1/sessions/" + sess + "/state"
	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"init": "1"}}).Status)
	rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)
	r := s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"x": "X"}}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	rollback()

	release2 := holdDurableVersion(t, owner, sess, 2)
	release3 := holdDurableVersion(t, owner, sess, 3)
	base := lockWaiters(t, watch)
	results := make(chan *apptest.Response, 2)
	for i, f := range []string{"b", "c"} {
		go func() {
			results <- s.Do("PATCH", path, key, map[string]any{"state": map[string]any{f: f}})
		}()
		waitLockWaiters(t, watch, base+i+1)
	}
	rD := s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"d": "d"}})
	release2()
	release3()
	require.Equal(t, 409, rD.Status, "v4, built on a copy without the durable v2, was acknowledged: %s", rD.Body)
	for range 2 {
		r := <-results
		require.Equal(t, 409, r.Status, "a write on the rolled-back copy was acknowledged: %s", r.Body)
	}
	doc, v := durableState(t, owner, sess)
	require.Equal(t, int64(2), v)
	require.Equal(t, map[string]any{"init": "1", "x": "X"}, doc)
	got := decodeState(t, s.Do("GET", path, key, nil))
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, doc, got.State)
	r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"e": "e"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, int64(3), decodeState(t, r).Version)
}

// TestWorkingLineagePreviousRelease: rows the previous release wrote (no lineage, or a
// lineage that does not name the row's version because that release bumped the version
// without touching it) keep working: the next write is held to the strict rule.
func TestWorkingLineagePreviousRelease(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)
	ctx := context.Background()

	for _, how := range []string{"null", "stale"} {
		t.Run(how, func(t *testing.T) {
			sess := "prev-" + how
			path := "/v1/sessions/" + sess + "/state"
			require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"a": "1"}}).Status)
			require.Equal(t, 200, s.Do("PUT", path, key, map[string]any{"state": map[string]any{"a": "2"}}).Status)
			dropSession(t, rc, s.Prefix, "acme", sess)
			if how == "null" {
				_, err := owner.Exec(ctx, `UPDATE working_sessions SET write_lineage = NULL WHERE session_id = $1`, sess)
				require.NoError(t, err)
			} else { // the previous release's upsert: version and state, lineage untouched
				_, err := owner.Exec(ctx, `UPDATE working_sessions SET version = version + 1, state = '{"a": "3"}'
					WHERE session_id = $1`, sess)
				require.NoError(t, err)
			}
			_, want := durableState(t, owner, sess)
			r := s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": "B"}})
			require.Equal(t, 200, r.Status, string(r.Body))
			require.Equal(t, want+1, decodeState(t, r).Version)
			r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"c": "C"}}, "If-Match", strconv.Quote(strconv.FormatInt(want+1, 10)))
			require.Equal(t, 200, r.Status, string(r.Body))
			doc, v := durableState(t, owner, sess)
			require.Equal(t, want+2, v)
			require.Equal(t, map[string]any{"c": "C"}, doc)
		})
	}
}

// TestWorkingLineageAfterTurns: a session created by a message (its durable row at version
// 0, no lineage) gets two concurrent first state writes whose durable halves arrive out of
// order; both are acknowledged.
func TestWorkingLineageAfterTurns(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	const sess = "turns-first"
	path := "/v1/sessions/" + sess + "/state"
	r := s.Do("POST", "/v1/sessions/"+sess+"/messages", key, map[string]any{"role": "user", "content": "hi"})
	require.Equal(t, 201, r.Status, string(r.Body))

	release := holdDurableVersion(t, owner, sess, 1)
	base := lockWaiters(t, watch)
	resA := make(chan *apptest.Response, 1)
	go func() { resA <- s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"a": "A"}}) }()
	waitLockWaiters(t, watch, base+1)
	rB := s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": "B"}})
	release()
	rA := <-resA
	require.Equal(t, 200, rB.Status, string(rB.Body))
	require.Contains(t, []int{200, 201}, rA.Status, string(rA.Body))
	doc, v := durableState(t, owner, sess)
	require.Equal(t, int64(2), v)
	require.Equal(t, map[string]any{"a": "A", "b": "B"}, doc)
}
