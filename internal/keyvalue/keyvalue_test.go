package keyvalue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

type env struct {
	s     *Store
	pool  *pgxpool.Pool
	dsn   string
	rdb   redis.UniversalClient
	clk   *testenv.Clock
	loads atomic.Int64
}

func newEnv(t *testing.T, rdb redis.UniversalClient, prefix string) *env {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	if rdb == nil {
		rdb, prefix = testenv.Redis(t)
	}
	e := &env{pool: pool, dsn: dsn, rdb: rdb, clk: testenv.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))}
	e.s = New(pool, rdb, Options{Prefix: prefix, Now: e.clk.Now, MaxValueBytes: 1024, CacheTimeout: 2 * time.Second})
	e.s.hooks.load = func() { e.loads.Add(1) }
	return e
}

// tx runs fn as one committed unit of work for org, like an HTTP request does.
func (e *env) tx(t *testing.T, org string, fn func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error) error {
	t.Helper()
	ctx := context.Background()
	sess := pg.NewSession(e.pool, org)
	tx, err := sess.Tx(ctx)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx, sess.AfterCommit); err != nil {
		sess.Rollback(ctx)
		return err
	}
	return sess.Commit(ctx)
}

func (e *env) put(t *testing.T, sc strata.Scope, ns, key, value string, mods ...func(*WriteInput)) (KVEntry, bool, error) {
	t.Helper()
	var out KVEntry
	var created bool
	err := e.tx(t, sc.OrgID, func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		in := WriteInput{Namespace: ns, Key: key, Scope: sc, Value: json.RawMessage(value), Actor: "key_test"}
		for _, m := range mods {
			m(&in)
		}
		var err error
		out, created, err = e.s.Put(ctx, tx, ac, in)
		return err
	})
	return out, created, err
}

func (e *env) mustPut(t *testing.T, sc strata.Scope, ns, key, value string, mods ...func(*WriteInput)) KVEntry {
	t.Helper()
	out, _, err := e.put(t, sc, ns, key, value, mods...)
	require.NoError(t, err)
	return out
}

func (e *env) get(t *testing.T, sc strata.Scope, ns, key string, exact bool) (KVEntry, error) {
	t.Helper()
	return e.s.Get(context.Background(), ns, key, sc, exact)
}

func ifMatch(v int64) func(*WriteInput) { return func(in *WriteInput) { in.IfMatch = &v } }

func scope(org, user, agent, session string) strata.Scope {
	return strata.Scope{OrgID: org, UserID: user, AgentID: agent, SessionID: session}
}

func TestKVResolutionAcrossLevels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	e.mustPut(t, scope("acme", "", "", ""), "prefs", "style", `"org"`)
	e.mustPut(t, scope("acme", "u1", "", ""), "prefs", "style", `"user"`)
	e.mustPut(t, scope("acme", "u1", "a1", ""), "prefs", "style", `"agent"`)
	sess := e.mustPut(t, scope("acme", "u1", "a1", "s1"), "prefs", "style", `{"level":"session"}`)
	require.Equal(t, LevelSession, sess.Level)
	require.Equal(t, "u1", sess.UserID, "the less specific ids are recorded")

	cases := []struct {
		sc    strata.Scope
		exact bool
		want  string
		level Level
	}{
		{scope("acme", "u1", "a1", "s1"), false, `{"level": "session"}`, LevelSession},
		{scope("acme", "u1", "a1", "s2"), false, `"agent"`, LevelAgent},
		{scope("acme", "", "a1", ""), false, `"agent"`, LevelAgent},
		{scope("acme", "u1", "a2", "s2"), false, `"user"`, LevelUser},
		{scope("acme", "u2", "a2", "s2"), false, `"org"`, LevelOrg},
		{scope("acme", "", "", ""), false, `"org"`, LevelOrg},
		// exact reads look at the most specific given level only
		{scope("acme", "u1", "", ""), true, `"user"`, LevelUser},
		{scope("acme", "u1", "a1", ""), true, `"agent"`, LevelAgent},
		{scope("acme", "", "", ""), true, `"org"`, LevelOrg},
	}
	for pass := 0; pass < 2; pass++ { // the second pass is served from the cache
		for _, c := range cases {
			got, err := e.get(t, c.sc, "prefs", "style", c.exact)
			require.NoError(t, err, "%+v", c)
			require.JSONEq(t, c.want, string(got.Value), "%+v", c)
			require.Equal(t, c.level, got.Level, "%+v", c)
		}
		if pass == 0 {
			e.loads.Store(0)
		}
	}
	require.Zero(t, e.loads.Load(), "cached resolutions must not touch Postgres")

	_, err := e.get(t, scope("acme", "u1", "a1", "s2"), "prefs", "style", true)
	require.ErrorIs(t, err, strata.ErrNotFound, "exact session read with no session entry")
	_, err = e.get(t, scope("acme", "u1", "a1", "s1"), "prefs", "other", false)
	require.ErrorIs(t, err, strata.ErrNotFound)

	// Deleting the session entry makes the agent level answer, at once (cache updated).
	require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, err := e.s.Delete(ctx, tx, ac, "prefs", "style", scope("acme", "u1", "a1", "s1"), nil, "k")
		return err
	}))
	got, err := e.get(t, scope("acme", "u1", "a1", "s1"), "prefs", "style", false)
	require.NoError(t, err)
	require.Equal(t, LevelAgent, got.Level)

	// Batch resolution, aligned with the keys asked.
	e.mustPut(t, scope("acme", "u1", "", ""), "prefs", "lang", `"fr"`)
	many, err := e.s.GetMany(context.Background(), "prefs", []string{"lang", "nope", "style"}, scope("acme", "u1", "a9", ""), false)
	require.NoError(t, err)
	require.Len(t, many, 3)
	require.JSONEq(t, `"fr"`, string(many[0].Value))
	require.Nil(t, many[1])
	require.Equal(t, LevelUser, many[2].Level)

	// Listing: one level, or resolved per key.
	list, err := e.s.List(context.Background(), "prefs", scope("acme", "u1", "", ""), false, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	list, err = e.s.List(context.Background(), "prefs", scope("acme", "u1", "a1", ""), true, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "lang", list[0].Key)
	require.Equal(t, LevelAgent, list[1].Level)
}

func TestKVVersionsConflictsHistoryRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "u1", "", "")
	v1, created, err := e.put(t, sc, "ns", "k", `{"a":1}`)
	require.NoError(t, err)
	require.True(t, created)
	require.EqualValues(t, 1, v1.Version)
	v2, created, err := e.put(t, sc, "ns", "k", `{"a":2}`, ifMatch(1))
	require.NoError(t, err)
	require.False(t, created)
	require.EqualValues(t, 2, v2.Version)

	// Stale If-Match: 409 and nothing written.
	_, _, err = e.put(t, sc, "ns", "k", `{"a":3}`, ifMatch(1))
	var ce *strata.ConflictError
	require.ErrorAs(t, err, &ce)
	require.EqualValues(t, 2, ce.Details["current_version"])
	got, err := e.get(t, sc, "ns", "k", true)
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Version)
	require.JSONEq(t, `{"a":2}`, string(got.Value))
	_, _, err = e.put(t, sc, "ns", "k", `1`, func(in *WriteInput) { in.IfNoneMatch = true })
	require.ErrorIs(t, err, strata.ErrConflict)
	_, _, err = e.put(t, sc, "ns", "absent", `1`, ifMatch(1))
	require.ErrorIs(t, err, strata.ErrConflict, "If-Match on a missing entry")

	// Delete with a stale If-Match → conflict; then a real delete leaves a tombstone.
	err = e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, err := e.s.Delete(ctx, tx, ac, "ns", "k", sc, ptr(int64(1)), "k2")
		return err
	})
	require.ErrorIs(t, err, strata.ErrConflict)
	var tomb KVEntry
	require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		var err error
		tomb, err = e.s.Delete(ctx, tx, ac, "ns", "k", sc, ptr(int64(2)), "k2")
		return err
	}))
	require.True(t, tomb.Deleted)
	require.EqualValues(t, 3, tomb.Version)
	_, err = e.get(t, sc, "ns", "k", false)
	require.ErrorIs(t, err, strata.ErrNotFound)
	require.ErrorIs(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, err := e.s.Delete(ctx, tx, ac, "ns", "k", sc, nil, "k2")
		return err
	}), strata.ErrNotFound)

	// Re-create continues the version sequence.
	v4, created, err := e.put(t, sc, "ns", "k", `{"a":4}`)
	require.NoError(t, err)
	require.True(t, created)
	require.EqualValues(t, 4, v4.Version)

	// Restore version 1: a new write with version 1's value.
	var v5 KVEntry
	require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		var err error
		v5, _, err = e.s.Restore(ctx, tx, ac, WriteInput{Namespace: "ns", Key: "k", Scope: sc, RestoreVersion: 1, Actor: "k3", IfMatch: ptr(int64(4))})
		return err
	}))
	require.EqualValues(t, 5, v5.Version)
	require.JSONEq(t, `{"a":1}`, string(v5.Value))
	got, err = e.get(t, sc, "ns", "k", false)
	require.NoError(t, err)
	require.EqualValues(t, 5, got.Version)
	err = e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, _, err := e.s.Restore(ctx, tx, ac, WriteInput{Namespace: "ns", Key: "k", Scope: sc, RestoreVersion: 3, Actor: "k3"})
		return err
	})
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "version", fe.Field)

	hist, err := e.s.History(context.Background(), "ns", "k", sc, "", 100)
	require.NoError(t, err)
	require.Len(t, hist, 5)
	ops := []string{}
	for _, h := range hist {
		ops = append(ops, fmt.Sprintf("%d:%s:%s", h.Version, h.Op, h.WrittenBy))
	}
	require.Equal(t, []string{"5:restore:k3", "4:put:key_test", "3:delete:k2", "2:put:key_test", "1:put:key_test"}, ops)
	require.EqualValues(t, 1, hist[0].RestoredFrom)
	require.Equal(t, "u1", hist[0].UserID)
	page2, err := e.s.History(context.Background(), "ns", "k", sc, "3", 100)
	require.NoError(t, err)
	require.Len(t, page2, 2)
	_, err = e.s.History(context.Background(), "ns", "never", sc, "", 100)
	require.ErrorIs(t, err, strata.ErrNotFound)
}

func ptr[T any](v T) *T { return &v }

func TestKVTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "", "", "")
	ent := e.mustPut(t, sc, "ns", "k", `"short"`, func(in *WriteInput) { in.TTL = 10 * time.Second })
	require.NotNil(t, ent.ExpiresAt)
	require.Equal(t, e.clk.Now().Add(10*time.Second), *ent.ExpiresAt)
	e.mustPut(t, scope("acme", "u1", "", ""), "ns", "k", `"user"`, func(in *WriteInput) { in.TTL = 5 * time.Second })

	got, err := e.get(t, scope("acme", "u1", "", ""), "ns", "k", false)
	require.NoError(t, err)
	require.JSONEq(t, `"user"`, string(got.Value))
	e.clk.Advance(6 * time.Second) // the user entry expired: the org entry answers (even from the cache)
	got, err = e.get(t, scope("acme", "u1", "", ""), "ns", "k", false)
	require.NoError(t, err)
	require.Equal(t, LevelOrg, got.Level)
	e.clk.Advance(5 * time.Second)
	_, err = e.get(t, scope("acme", "u1", "", ""), "ns", "k", false)
	require.ErrorIs(t, err, strata.ErrNotFound)
	list, err := e.s.List(context.Background(), "ns", sc, false, "", 10)
	require.NoError(t, err)
	require.Empty(t, list)
	// If-Match on an expired entry is a conflict; a plain PUT re-creates it.
	_, _, err = e.put(t, sc, "ns", "k", `"again"`, ifMatch(1))
	require.ErrorIs(t, err, strata.ErrConflict)
	again, created, err := e.put(t, sc, "ns", "k", `"again"`)
	require.NoError(t, err)
	require.True(t, created)
	require.EqualValues(t, 2, again.Version)
	require.Nil(t, again.ExpiresAt)
}

func cachedVersion(t *testing.T, e *env, org, ns, key string, sl slot) (int64, bool) {
	t.Helper()
	v, err := e.rdb.Get(context.Background(), e.s.entryKey(org, ns, key, sl)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	require.NoError(t, err)
	c, err := decodeCached(v)
	require.NoError(t, err)
	return c.version, true
}

// A reader misses, reads version 1 from Postgres and stalls before filling the cache; a
// write of version 2 commits and returns; the stalled fill then lands. The next read must
// see version 2 — the fill may not resurrect version 1.
func TestKVCacheRaceLateFillCannotResurrect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "u1", "", "")
	e.mustPut(t, sc, "ns", "k", `"v1"`)
	require.NoError(t, e.rdb.Del(context.Background(), e.s.entryKey("acme", "ns", "k", slot{LevelUser, "u1"})).Err())

	loaded, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.s.hooks.beforeFill = func() {
		once.Do(func() {
			close(loaded)
			<-release
		})
	}
	done := make(chan KVEntry)
	go func() {
		got, err := e.s.Get(context.Background(), "ns", "k", sc, true)
		if err != nil {
			panic(err)
		}
		done <- got
	}()
	<-loaded // the reader holds version 1, not yet cached
	e.mustPut(t, sc, "ns", "k", `"v2"`)
	close(release)
	first := <-done
	require.EqualValues(t, 1, first.Version, "the read began before the write")

	got, err := e.get(t, sc, "ns", "k", true)
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Version)
	require.JSONEq(t, `"v2"`, string(got.Value))
	v, ok := cachedVersion(t, e, "acme", "ns", "k", slot{LevelUser, "u1"})
	require.True(t, ok)
	require.EqualValues(t, 2, v)
}

// The same race when the write could mark itself in Redis before commit but not update
// the cache after it (Redis failed in between): the pending marker keeps reads on Postgres
// and refuses the late fill.
func TestKVCacheRacePendingMarkerWithoutEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "", "a1", "")
	e.mustPut(t, sc, "ns", "k", `"v1"`)
	got, err := e.get(t, sc, "ns", "k", false) // cached now
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Version)
	require.NoError(t, e.rdb.Del(context.Background(), e.s.entryKey("acme", "ns", "k", slot{LevelAgent, "a1"}),
		e.s.entryKey("acme", "ns", "k", slot{LevelOrg, ""})).Err())

	loaded, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.s.hooks.beforeFill = func() { once.Do(func() { close(loaded); <-release }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.s.Get(context.Background(), "ns", "k", sc, false)
	}()
	<-loaded
	e.s.hooks.skipEnd = true
	e.mustPut(t, sc, "ns", "k", `"v2"`)
	close(release)
	<-done

	for i := 0; i < 3; i++ {
		got, err = e.get(t, sc, "ns", "k", false)
		require.NoError(t, err)
		require.EqualValues(t, 2, got.Version)
	}
	_, ok := cachedVersion(t, e, "acme", "ns", "k", slot{LevelAgent, "a1"})
	require.False(t, ok, "nothing may be cached while the write's marker stands")
}

// Concurrent misses of one key cost one Postgres read.
func TestKVSingleflight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "u1", "a1", "s1")
	e.mustPut(t, scope("acme", "u1", "", ""), "ns", "k", `"user"`)

	const n = 16
	var mu sync.Mutex
	joined := 0
	all := make(chan struct{})
	e.s.hooks.join = func(_ string, c int) {
		mu.Lock()
		defer mu.Unlock()
		joined = c
		if c == n {
			close(all)
		}
	}
	e.loads.Store(0)
	e.s.hooks.load = func() {
		e.loads.Add(1)
		<-all // hold the read until every caller waits on it
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.s.Get(context.Background(), "ns", "k", sc, false)
			if err == nil && got.Level != LevelUser {
				err = fmt.Errorf("level %s", got.Level)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, joined)
	require.EqualValues(t, 1, e.loads.Load())
	_, err := e.s.Get(context.Background(), "ns", "k", sc, false)
	require.NoError(t, err)
	require.EqualValues(t, 1, e.loads.Load(), "then it is cached")
}

// startRedis runs a private redis-server on a free port until the test ends.
func startRedis(t *testing.T, port int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer c.Close()
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return cmd
		}
		require.Less(t, i, 200, "redis-server did not start")
		time.Sleep(10 * time.Millisecond) // kept: waits for a real redis-server child process to accept connections
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestKVRedisDownFallsBackToPostgres(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	srv := startRedis(t, port)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, "kvdown:")
	sc := scope("acme", "u1", "", "")
	e.mustPut(t, sc, "ns", "k", `"v1"`)
	_, err := e.get(t, sc, "ns", "k", false)
	require.NoError(t, err)
	e.loads.Store(0)
	_, err = e.get(t, sc, "ns", "k", false)
	require.NoError(t, err)
	require.Zero(t, e.loads.Load(), "served from the cache while Redis is up")

	require.NoError(t, srv.Process.Kill())
	_ = srv.Wait()

	got, err := e.get(t, sc, "ns", "k", false)
	require.NoError(t, err, "reads fall back to Postgres")
	require.JSONEq(t, `"v1"`, string(got.Value))
	require.EqualValues(t, 1, e.loads.Load())
	v2, _, err := e.put(t, sc, "ns", "k", `"v2"`)
	require.NoError(t, err, "writes still work")
	require.EqualValues(t, 2, v2.Version)
	got, err = e.get(t, sc, "ns", "k", false)
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Version)
	require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, err := e.s.Delete(ctx, tx, ac, "ns", "k", sc, nil, "k")
		return err
	}))
	_, err = e.get(t, sc, "ns", "k", false)
	require.ErrorIs(t, err, strata.ErrNotFound)

	// Redis comes back (empty, as a restart without persistence leaves it): reads are
	// correct and cached again.
	startRedis(t, port)
	// A batch read pipelines EVALSHA: on a fresh Redis it must load the scripts itself.
	e.mustPut(t, sc, "ns", "k2", `"other"`)
	for i := 0; i < 2; i++ {
		many, err := e.s.GetMany(context.Background(), "ns", []string{"k", "k2"}, sc, false)
		require.NoError(t, err)
		require.Nil(t, many[0])
		require.JSONEq(t, `"other"`, string(many[1].Value))
	}
	_, ok := cachedVersion(t, e, "acme", "ns", "k2", slot{LevelUser, "u1"})
	require.True(t, ok, "the batch read filled the cache")
	e.mustPut(t, sc, "ns", "k", `"v4"`)
	for i := 0; i < 2; i++ {
		got, err = e.get(t, sc, "ns", "k", false)
		require.NoError(t, err)
		require.EqualValues(t, 4, got.Version)
	}
	v, ok := cachedVersion(t, e, "acme", "ns", "k", slot{LevelUser, "u1"})
	require.True(t, ok)
	require.EqualValues(t, 4, v)
}

func TestKVTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	e.mustPut(t, scope("acme", "u1", "", ""), "ns", "k", `"secret"`)
	_, err := e.get(t, scope("acme", "u1", "", ""), "ns", "k", false)
	require.NoError(t, err) // cached for acme
	_, err = e.get(t, scope("other", "u1", "", ""), "ns", "k", false)
	require.ErrorIs(t, err, strata.ErrNotFound)
	_, err = e.s.History(context.Background(), "ns", "k", scope("other", "u1", "", ""), "", 10)
	require.ErrorIs(t, err, strata.ErrNotFound)
	require.ErrorIs(t, e.tx(t, "other", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		_, err := e.s.Delete(ctx, tx, ac, "ns", "k", scope("other", "u1", "", ""), nil, "k")
		return err
	}), strata.ErrNotFound)
	// Row-level security backs the explicit filter: the app role cannot see acme's rows
	// from an "other" transaction even without an org filter.
	var n int
	require.NoError(t, pg.InOrgTx(context.Background(), e.pool, "other", func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT count(*) FROM kv_entries`).Scan(&n)
	}))
	require.Zero(t, n)
	// "other" writes the same key: independent versions.
	o := e.mustPut(t, scope("other", "u1", "", ""), "ns", "k", `"mine"`)
	require.EqualValues(t, 1, o.Version)
	got, err := e.get(t, scope("acme", "u1", "", ""), "ns", "k", false)
	require.NoError(t, err)
	require.JSONEq(t, `"secret"`, string(got.Value))
}

func TestKVBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "", "", "")
	for _, c := range []struct {
		ns, key, value, field string
		kind                  strata.FieldKind
	}{
		{"bad ns", "k", `1`, "namespace", strata.FieldInvalid},
		{"ns", "", `1`, "key", strata.FieldInvalid},
		{"ns", "k\x00", `1`, "key", strata.FieldInvalid},
		{"ns", "k", `"a\u0000b"`, "value", strata.FieldInvalid},
		{"ns", "k", `null`, "value", strata.FieldInvalid},
		{"ns", "k", `{"a":`, "value", strata.FieldInvalid},
		{"ns", "k", `"` + string(make([]byte, 2000)) + `"`, "value", strata.FieldTooLarge},
	} {
		_, _, err := e.put(t, sc, c.ns, c.key, c.value)
		var fe *strata.FieldError
		require.ErrorAs(t, err, &fe, "%q/%q", c.ns, c.key)
		require.Equal(t, c.field, fe.Field)
		require.Equal(t, c.kind, fe.Kind)
	}
	deep := ""
	for i := 0; i < 70; i++ {
		deep = "[" + deep + "]"
	}
	_, _, err := e.put(t, sc, "ns", "k", deep)
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	_, _, err = e.put(t, scope("acme", "bad user", "", ""), "ns", "k", `1`)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "user_id", fe.Field)

	own := testenv.OwnerConn(t, e.dsn)
	var n int
	require.NoError(t, own.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM kv_entries) + (SELECT count(*) FROM kv_versions)`).Scan(&n))
	require.Zero(t, n)
}

func TestKVEraseUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	e.mustPut(t, scope("acme", "u1", "", ""), "ns", "k", `"u1 pref"`)
	e.mustPut(t, scope("acme", "u1", "", "s1"), "ns", "k", `"u1 session"`)
	e.mustPut(t, scope("acme", "u2", "", ""), "ns", "k", `"u2 pref"`)
	e.mustPut(t, scope("acme", "", "", ""), "ns", "k", `"org"`)
	for _, sc := range []strata.Scope{scope("acme", "u1", "", "s1"), scope("acme", "u1", "", "")} {
		_, err := e.get(t, sc, "ns", "k", true) // cache them
		require.NoError(t, err)
	}
	var n ErasureCounts
	require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
		var err error
		n, err = e.s.EraseUser(ctx, tx, ac, "acme", "u1")
		return err
	}))
	require.EqualValues(t, 2, n.Entries)
	require.EqualValues(t, 2, n.Versions)
	got, err := e.get(t, scope("acme", "u1", "", "s1"), "ns", "k", false)
	require.NoError(t, err)
	require.Equal(t, LevelOrg, got.Level, "u1's entries are gone, also from the cache")
	// The cache holds no u1 content: at most a tombstone no stale fill can overwrite, and
	// the pending markers named after u1 are gone.
	raw, err := e.rdb.Get(context.Background(), e.s.entryKey("acme", "ns", "k", slot{LevelUser, "u1"})).Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
		c, err := decodeCached(raw)
		require.NoError(t, err)
		require.Nil(t, c.entry, "u1's cached entry is a tombstone")
	}
	require.Zero(t, e.rdb.Exists(context.Background(), e.s.pendingKey("acme", "ns", "k", slot{LevelUser, "u1"})).Val(),
		"erasure deletes the subject's pending-writer markers")
	require.NotContains(t, e.s.pendingKey("acme", "ns", "k", slot{LevelUser, "u1"}), "u1", "no raw user id in key names")
	own := testenv.OwnerConn(t, e.dsn)
	var left int
	require.NoError(t, own.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM kv_entries WHERE user_id = 'u1' OR scope_id = 'u1' OR value::text LIKE '%u1%') +
		(SELECT count(*) FROM kv_versions WHERE user_id = 'u1' OR scope_id = 'u1' OR value::text LIKE '%u1%')`).Scan(&left))
	require.Zero(t, left)
	// The session entry can be written again; its versions continue.
	s1 := e.mustPut(t, scope("acme", "", "", "s1"), "ns", "k", `"fresh"`)
	require.EqualValues(t, 3, s1.Version)
}

// Concurrent writes of one new key serialise: every write gets its own version; of
// concurrent If-Match writes on the same version exactly one wins.
func TestKVConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "", "a1", "")
	const n = 8
	var wg sync.WaitGroup
	versions := make(chan int64, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			got, _, err := e.put(t, sc, "ns", "fresh", strconv.Itoa(i))
			errs <- err
			versions <- got.Version
		}(i)
	}
	wg.Wait()
	close(errs)
	close(versions)
	seen := map[int64]bool{}
	for err := range errs {
		require.NoError(t, err)
	}
	for v := range versions {
		seen[v] = true
	}
	require.Len(t, seen, n)
	got, err := e.get(t, sc, "ns", "fresh", false)
	require.NoError(t, err)
	require.EqualValues(t, n, got.Version)

	wins := atomic.Int64{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, _, err := e.put(t, sc, "ns", "fresh", strconv.Itoa(100+i), ifMatch(n)); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, strata.ErrConflict) {
				t.Errorf("unexpected error: %v", err)
			}
		}(i)
	}
	wg.Wait()
	require.EqualValues(t, 1, wins.Load())
	got, err = e.get(t, sc, "ns", "fresh", false)
	require.NoError(t, err)
	require.EqualValues(t, n+1, got.Version)
	hist, err := e.s.History(context.Background(), "ns", "fresh", sc, "", 100)
	require.NoError(t, err)
	require.Len(t, hist, n+1)
}

// TestKVInputParsedByStore: the store reads its preconditions and cursors itself and names
// bad fields bare (the transport adds header./query./body.).
func TestKVInputParsedByStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	sc := scope("acme", "u1", "", "")
	for v, want := range map[string]bool{"": false, " * ": true} {
		got, err := ParseIfNoneMatch(v)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParseIfNoneMatch(`"3"`)
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "If-None-Match", fe.Field)
	require.Equal(t, strata.FieldMalformed, fe.Kind)

	ctx := context.Background()
	for _, c := range []string{"0", "-2", "x"} {
		_, err = e.s.History(ctx, "ns", "k", sc, c, 10)
		require.ErrorAs(t, err, &fe, c)
		require.Equal(t, "cursor", fe.Field)
	}
	_, err = e.s.List(ctx, "ns", sc, false, "bad cursor", 10)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "cursor", fe.Field)
	_, err = e.s.GetMany(ctx, "ns", []string{"ok", "not ok"}, sc, false)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "keys[1]", fe.Field)
}

// TestKVRectify: a correction needs a live entry of the subject at the scope named; it
// writes a new version with history op rectify, conditional on the version it read.
func TestKVRectify(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	e.mustPut(t, scope("acme", "u1", "", ""), "ns", "k", `"wrong"`)
	e.mustPut(t, scope("acme", "u2", "a1", ""), "ns", "k", `"u2's"`)
	rectify := func(sc strata.Scope, value string) (KVEntry, int64, error) {
		var out KVEntry
		var prev int64
		err := e.tx(t, sc.OrgID, func(ctx context.Context, tx pgx.Tx, ac AfterCommit) error {
			var err error
			out, prev, err = e.s.Rectify(ctx, tx, ac, WriteInput{Namespace: "ns", Key: "k", Scope: sc,
				Value: json.RawMessage(value), Actor: "key_compliance"})
			return err
		})
		return out, prev, err
	}
	var fe *strata.FieldError
	for _, sc := range []strata.Scope{scope("acme", "u1", "", "s9"), scope("acme", "u1", "a1", "")} {
		_, _, err := rectify(sc, `"x"`)
		require.ErrorAs(t, err, &fe, "%+v", sc) // none at s9; a1's entry is u2's
		require.Equal(t, "kv", fe.Field)
	}
	_, _, err := rectify(scope("acme", "u1", "", ""), `null`)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "value", fe.Field)

	got, prev, err := rectify(scope("acme", "u1", "", ""), `"right"`)
	require.NoError(t, err)
	require.Equal(t, int64(1), prev)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, LevelUser, got.Level)
	read, err := e.get(t, scope("acme", "u1", "", ""), "ns", "k", true)
	require.NoError(t, err)
	require.JSONEq(t, `"right"`, string(read.Value))
	hist, err := e.s.History(context.Background(), "ns", "k", scope("acme", "u1", "", ""), "", 10)
	require.NoError(t, err)
	require.Equal(t, "rectify", hist[0].Op)
	require.Equal(t, "key_compliance", hist[0].WrittenBy)
}
