package working

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

type bundle struct {
	store  *Store
	pool   *pgxpool.Pool
	dsn    string
	rdb    redis.UniversalClient
	prefix string
	clock  *testenv.Clock
	ctx    context.Context
}

func setup(t *testing.T, o Options) *bundle {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	c := testenv.NewClock(time.Now())
	o.Prefix, o.Now = prefix, c.Now
	return &bundle{store: New(pool, rdb, o), pool: pool, dsn: dsn, rdb: rdb, prefix: prefix, clock: c, ctx: context.Background()}
}

// inTx runs fn in a transaction for org and commits when it returns nil. A panic in fn
// (an injected crash) rolls back and is reported as an error, like a dead process whose
// transaction Postgres aborts.
func (b *bundle) inTx(org string, fn func(tx pgx.Tx) error) (err error) {
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			_ = tx.Rollback(b.ctx)
			err = fmt.Errorf("crashed: %v", r)
		}
	}()
	if _, err := tx.Exec(b.ctx, "SELECT set_config('app.org_id', $1, true)", org); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(b.ctx)
		return err
	}
	return tx.Commit(b.ctx)
}

// flush emulates FLUSHALL for this test's prefix.
func (b *bundle) flush(t *testing.T) {
	t.Helper()
	keys, err := testenv.RedisKeys(b.ctx, b.rdb, b.prefix+"*")
	require.NoError(t, err)
	require.NoError(t, testenv.RedisDel(b.ctx, b.rdb, keys))
}

// post appends a turn through the whole protocol: Redis + Postgres in one transaction,
// then Confirm after the commit.
func (b *bundle) post(org, session, content string) (*Appended, error) {
	var a *Appended
	err := b.inTx(org, func(tx pgx.Tx) error {
		var err error
		a, err = b.store.Append(b.ctx, tx, org, session, NewTurn{Role: "user", Content: content, UserID: "u1"})
		return err
	})
	if err != nil {
		return nil, err
	}
	return a, a.Confirm(b.ctx)
}

func (b *bundle) durableSeqs(t *testing.T, session string) []int64 {
	t.Helper()
	c := testenv.OwnerConn(t, b.dsn)
	rows, err := c.Query(b.ctx, `SELECT seq FROM working_turns WHERE session_id = $1 ORDER BY seq`, session)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return seqs
}

func (b *bundle) bufferSeqs(t *testing.T, org, session string) []int64 {
	t.Helper()
	entries, err := b.rdb.LRange(b.ctx, b.store.sessionKeys(org, session).turns, 0, -1).Result()
	require.NoError(t, err)
	var out []int64
	for _, e := range entries {
		tt, err := decodeEntry(e)
		require.NoError(t, err)
		out = append(out, tt.Seq)
	}
	return out
}

func seqsOf(turns []Turn) []int64 {
	out := []int64{}
	for _, t := range turns {
		out = append(out, t.Seq)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// A crash after the Redis append and before the Postgres write (the process dies: no
// compensation runs). The turn stays in Redis only; the next append finds it above the
// durable mark and writes it, so nothing is lost and nothing is doubled.
func TestSpillCrashBetweenRedisAndPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferSize: 3})
	for i := 1; i <= 5; i++ {
		_, err := b.post("o", "s", fmt.Sprint("m", i))
		require.NoError(t, err)
	}
	require.Equal(t, []int64{3, 4, 5}, b.bufferSeqs(t, "o", "s"))

	b.store.afterRedisWrite = func() error { panic("kill -9") }
	_, err := b.post("o", "s", "m6")
	require.ErrorContains(t, err, "crashed")
	b.store.afterRedisWrite = nil
	require.Equal(t, seqRange(1, 5), b.durableSeqs(t, "s"), "turn 6 never reached Postgres")
	require.Equal(t, []int64{3, 4, 5, 6}, b.bufferSeqs(t, "o", "s"), "and nothing was trimmed")

	_, err = b.post("o", "s", "m7")
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 7), b.durableSeqs(t, "s"))
	require.Equal(t, []int64{5, 6, 7}, b.bufferSeqs(t, "o", "s"))
	var content string
	require.NoError(t, testenv.OwnerConn(t, b.dsn).QueryRow(b.ctx,
		`SELECT content FROM working_turns WHERE session_id = 's' AND seq = 6`).Scan(&content))
	require.Equal(t, "m6", content)
}

// A crash after the commit and before the trim: the overflow stays in Redis (the buffer is
// briefly longer than N, reads still return N); the next append re-spills it (a no-op in
// Postgres thanks to the primary key) and trims. Trimming before the Postgres write is
// impossible by construction: Confirm is the only trim and runs after the commit.
func TestSpillCrashBetweenCommitAndTrim(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferSize: 3})
	for i := 1; i <= 3; i++ {
		_, err := b.post("o", "s", fmt.Sprint("m", i))
		require.NoError(t, err)
	}
	b.store.beforeConfirm = func() error { return errors.New("killed before trim") }
	for i := 4; i <= 6; i++ {
		_, err := b.post("o", "s", fmt.Sprint("m", i))
		require.ErrorContains(t, err, "killed before trim")
	}
	b.store.beforeConfirm = nil
	require.Equal(t, seqRange(1, 6), b.durableSeqs(t, "s"))
	require.Equal(t, seqRange(1, 6), b.bufferSeqs(t, "o", "s"), "nothing trimmed")
	buf, err := b.store.Turns(b.ctx, b.pool, "o", "s")
	require.NoError(t, err)
	require.Equal(t, []int64{4, 5, 6}, seqsOf(buf.Turns), "reads stay bounded")

	_, err = b.post("o", "s", "m7")
	require.NoError(t, err)
	require.Equal(t, seqRange(1, 7), b.durableSeqs(t, "s"), "re-spilled without duplicates")
	require.Equal(t, []int64{5, 6, 7}, b.bufferSeqs(t, "o", "s"))
}

// When the Postgres half fails inside the request, the Redis half is undone.
func TestAppendPostgresFailureCompensates(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferSize: 3})
	_, err := b.post("o", "s", "m1")
	require.NoError(t, err)
	b.store.afterRedisWrite = func() error { return errors.New("postgres said no") }
	_, err = b.post("o", "s", "m2")
	require.Error(t, err)
	b.store.afterRedisWrite = nil
	require.Equal(t, []int64{1}, b.bufferSeqs(t, "o", "s"))
	_, err = b.post("o", "s", "m3")
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, b.durableSeqs(t, "s"), "a failed turn leaves a gap, never a ghost")

	// Same for state: the failed version is dropped from Redis; the durable one comes back.
	put := func(doc string) (State, error) {
		var st State
		err := b.inTx("o", func(tx pgx.Tx) error {
			var err error
			st, _, err = b.store.Put(b.ctx, tx, "o", "s", Write{State: json.RawMessage(doc)})
			return err
		})
		return st, err
	}
	_, err = put(`{"v": 1}`)
	require.NoError(t, err)
	b.store.afterRedisWrite = func() error { return errors.New("postgres said no") }
	_, err = put(`{"v": 2}`)
	require.Error(t, err)
	b.store.afterRedisWrite = nil
	var st State
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		st, err = b.store.Get(b.ctx, tx, "o", "s")
		return err
	}))
	require.JSONEq(t, `{"v": 1}`, string(st.State))
	require.Equal(t, int64(1), st.Version)
	require.True(t, st.Restored)
}

// The durable copy's expiry follows reads (injected clock): a session read recently is
// restored after a flush even past its last write + TTL; one left alone past its TTL is not.
func TestDurableExpiryFollowsReads(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{TTL: time.Hour})
	get := func() (State, error) {
		var st State
		err := b.inTx("o", func(tx pgx.Tx) error {
			var err error
			st, err = b.store.Get(b.ctx, tx, "o", "s")
			return err
		})
		return st, err
	}
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, "o", "s", Write{State: json.RawMessage(`{"a":1}`)})
		return err
	}))
	b.clock.Advance(30 * time.Minute)
	st, err := get() // slides Redis and bumps the durable expiry to +90 min
	require.NoError(t, err)
	require.WithinDuration(t, b.clock.Now().Add(time.Hour), st.ExpiresAt, time.Millisecond)

	b.flush(t)
	b.clock.Advance(50 * time.Minute) // 80 min after the write, 50 after the read
	st, err = get()
	require.NoError(t, err)
	require.True(t, st.Restored)

	b.flush(t)
	b.clock.Advance(2 * time.Hour)
	_, err = get()
	require.ErrorIs(t, err, strata.ErrNotFound)
}

// With Redis unreachable, reads are served from Postgres (restored) and writes are 503s.
func TestRedisDownServesDurableCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferSize: 2})
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, "o", "s", Write{State: json.RawMessage(`{"a":1}`), UserID: "u1"})
		return err
	}))
	for i := 1; i <= 3; i++ {
		_, err := b.post("o", "s", fmt.Sprint("m", i))
		require.NoError(t, err)
	}

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	down := New(b.pool, dead, Options{Prefix: b.prefix, BufferSize: 2, Now: b.clock.Now})
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		st, err := down.Get(b.ctx, tx, "o", "s")
		require.NoError(t, err)
		require.True(t, st.Restored)
		require.JSONEq(t, `{"a":1}`, string(st.State))
		require.Equal(t, int64(1), st.Version)
		buf, err := down.Turns(b.ctx, tx, "o", "s")
		require.NoError(t, err)
		require.Equal(t, []int64{2, 3}, seqsOf(buf.Turns))
		require.True(t, buf.Restored)

		_, _, err = down.Put(b.ctx, tx, "o", "s", Write{State: json.RawMessage(`{"a":2}`)})
		var ue *strata.UnavailableError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "redis", ue.Store)
		_, err = down.Append(b.ctx, tx, "o", "s", NewTurn{Role: "user", Content: "x"})
		require.ErrorAs(t, err, &ue)
		return nil
	}))
}

func TestEraseAndExportUser(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferSize: 2})
	write := func(session, user string) {
		var appended []*Appended
		require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "o", session, Write{State: json.RawMessage(`{"who":"` + user + `"}`), UserID: user})
			if err != nil {
				return err
			}
			for i := 0; i < 3; i++ {
				a, err := b.store.Append(b.ctx, tx, "o", session, NewTurn{Role: "user", Content: user + " says hi"})
				if err != nil {
					return err
				}
				appended = append(appended, a)
			}
			return nil
		}))
		for _, a := range appended {
			require.NoError(t, a.Confirm(b.ctx))
		}
	}
	write("s1", "alice")
	write("s2", "alice")
	write("s3", "bob")

	var sessions []string
	var export []SessionExport
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		var err error
		if sessions, err = b.store.SessionsOfUser(b.ctx, tx, "o", "alice"); err != nil {
			return err
		}
		export, err = b.store.ExportUser(b.ctx, tx, "o", "alice")
		return err
	}))
	require.Equal(t, []string{"s1", "s2"}, sessions)
	require.Len(t, export, 2)
	require.JSONEq(t, `{"who":"alice"}`, string(export[0].State))
	require.Len(t, export[0].Turns, 3, "the export has the whole log, not only the buffer")

	// The index survives a flush through the durable table.
	b.flush(t)
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		var err error
		sessions, err = b.store.SessionsOfUser(b.ctx, tx, "o", "alice")
		return err
	}))
	require.Equal(t, []string{"s1", "s2"}, sessions)
	// Bring s1 back into Redis, then erase.
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		_, err := b.store.Get(b.ctx, tx, "o", "s1")
		return err
	}))
	var e Erasure
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		var err error
		e, err = b.store.EraseUser(b.ctx, tx, "o", "alice")
		return err
	}))
	require.Equal(t, 2, e.Sessions)
	require.Equal(t, int64(2), e.States)
	require.Equal(t, int64(6), e.Turns)
	require.GreaterOrEqual(t, e.RedisKeys, int64(2))

	owner := testenv.OwnerConn(t, b.dsn)
	var n int
	require.NoError(t, owner.QueryRow(b.ctx, `SELECT
		(SELECT count(*) FROM working_sessions WHERE user_id = 'alice' OR state::text LIKE '%alice%') +
		(SELECT count(*) FROM working_turns WHERE user_id = 'alice' OR content LIKE '%alice%')`).Scan(&n))
	require.Zero(t, n)
	keys, err := testenv.RedisKeys(b.ctx, b.rdb, b.prefix+"*")
	require.NoError(t, err)
	for _, k := range keys {
		if typ := b.rdb.Type(b.ctx, k).Val(); typ == "hash" {
			require.NotEqual(t, "alice", b.rdb.HGet(b.ctx, k, "uid").Val(), k)
		}
		require.NotContains(t, k, "alice")
	}
	require.NoError(t, b.inTx("o", func(tx pgx.Tx) error {
		var err error
		sessions, err = b.store.SessionsOfUser(b.ctx, tx, "o", "bob")
		return err
	}))
	require.Equal(t, []string{"s3"}, sessions, "bob is untouched")
}

func TestMergePatchRFC7386(t *testing.T) {
	t.Parallel()
	// The examples of RFC 7386 appendix A (object targets and patches).
	cases := []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		{`{"n":12345678901234567890}`, `{"m":0.1}`, `{"n":12345678901234567890,"m":0.1}`},
	}
	for _, c := range cases {
		got, err := applyPatch([]byte(c.target), []byte(c.patch))
		require.NoError(t, err)
		require.JSONEq(t, c.want, string(got), c.target+" + "+c.patch)
	}
	got, err := applyPatch(nil, []byte(`{"a":null,"b":1}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"b":1}`, string(got))
	require.Contains(t, string(mustApply(t, `{"n":1}`, `{"big":12345678901234567890}`)), "12345678901234567890")
}

func mustApply(t *testing.T, target, patch string) []byte {
	t.Helper()
	b, err := applyPatch([]byte(target), []byte(patch))
	require.NoError(t, err)
	return b
}

// loadScript answers one string per session (decodeSession); what it decodes must be what
// the session's hash holds, field by field, with and without turns.
func TestLoadReplyMatchesHash(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	org, session := "org-a", "s-load"
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"a":"x y\nz"}`), UserID: "u1", AgentID: "ag:2"})
		return err
	}))
	_, err := b.post(org, session, "hello")
	require.NoError(t, err)
	k := b.store.sessionKeys(org, session)
	h, err := b.rdb.HGetAll(b.ctx, k.meta).Result()
	require.NoError(t, err)
	num := func(f string) int64 { n, _ := strconv.ParseInt(h[f], 10, 64); return n }
	want := meta{version: num("v"), doc: []byte(h["doc"]), uid: h["uid"], aid: h["aid"],
		ttl: time.Duration(num("ttl")) * time.Millisecond, ca: num("ca"), ua: num("ua"), dx: num("dx"), seq: num("seq")}
	require.Equal(t, "u1", want.uid)
	require.Equal(t, "ag:2", want.aid)
	for _, n := range []int{0, 5} {
		res, err := loadScript.Run(b.ctx, b.rdb, []string{k.meta, k.turns}, n).Result()
		require.NoError(t, err)
		m, turns, err := decodeLoad(res)
		require.NoError(t, err)
		require.Equal(t, want, m, "turns %d", n)
		require.Len(t, turns, min(n, 1))
	}

	// A tombstone (a fresh incarnation): no document, new, no scope.
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error { return b.store.Delete(b.ctx, tx, org, session, nil) }))
	res, err := loadScript.Run(b.ctx, b.rdb, []string{k.meta, k.turns}, 0).Result()
	require.NoError(t, err)
	m, _, err := decodeLoad(res)
	require.NoError(t, err)
	require.True(t, m.isNew)
	require.Nil(t, m.doc)
	require.Empty(t, m.uid)
	_, err = b.store.Get(b.ctx, b.pool, org, session)
	require.ErrorIs(t, err, strata.ErrNotFound)
}

func TestDecodeSessionRefusesMalformed(t *testing.T) { // not parallel: AllocsPerRun
	m, err := decodeSession("3 60000 1 2 3 4 0 1 2 1 1\nabc{}")
	require.NoError(t, err)
	require.Equal(t, meta{version: 3, ttl: time.Minute, ca: 1, ua: 2, dx: 3, seq: 4, restored: true, uid: "ab", aid: "c", doc: []byte("{}")}, m)
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _, _ = decodeSession("3 60000 1 2 3 4 0 1 2 1 1\nabc{}") }),
		"only the document is copied")
	for _, bad := range []string{"", "3 60000 1 2 3 4 0 1 2 1\nabc", "3 60000 1 2 3 4 0 1 2 1 1 9\nabc", "3 60000 1 2 3 4 0 1 9 1 1\nabc",
		"3 60000 1 2 3 4 0 1 -1 1 1\nabc", "3 60000 1 2 3 4 0 1 2 1 1"} {
		_, err := decodeSession(bad)
		require.Error(t, err, "%q", bad)
	}
}

// runLoad falls back to EVAL when Redis does not know the script (its cache was flushed, or
// it restarted): emulated with a hash Redis has never seen.
func TestLoadWithoutScriptCache(t *testing.T) { // not parallel: swaps loadSHA
	b := setup(t, Options{})
	org, session := "org-a", "s-noscript"
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"a":1}`)})
		return err
	}))
	saved := loadSHA
	loadSHA = "0000000000000000000000000000000000000000"
	t.Cleanup(func() { loadSHA = saved })
	st, err := b.store.Get(b.ctx, b.pool, org, session)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(st.State))
	require.Equal(t, int64(1), st.Version)
	_, err = b.store.Get(b.ctx, b.pool, org, "s-none")
	require.ErrorIs(t, err, strata.ErrNotFound)
}
