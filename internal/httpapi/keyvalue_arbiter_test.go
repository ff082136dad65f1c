package httpapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// Key-value memory decides versions in Postgres (the row is locked and If-Match checked in
// the request's transaction; Redis is a read-through cache), so a Redis flush or rollback
// cannot make it acknowledge two writes at one version. These tests attack that from
// outside, like the working-memory ones.

// kvCacheKeys are the Redis cache entries of one (org, namespace, key), all levels.
func kvCacheKeys(t *testing.T, rc redis.UniversalClient, prefix, org, ns, key string) []string {
	t.Helper()
	keys, err := testenv.RedisKeys(context.Background(), rc, prefix+"kv{"+org+"|"+ns+"|"+key+"}*")
	require.NoError(t, err)
	return keys
}

// TestKVArbiterHeldWriteThenFlush: write A is held behind the test's lock on the
// entry's row, the cache is flushed, write B follows with the same If-Match: exactly one
// is acknowledged, and it is what a read after a further flush returns.
func TestKVArbiterHeldWriteThenFlush(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	owner := testenv.OwnerConn(t, s.DBURL)
	watch := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)
	ctx := context.Background()
	path := "/v1/kv/arb/held"

	r := s.Do("PUT", path, key, map[string]any{"value": "init"})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, 200, s.Do("GET", path, key, nil).Status) // cached

	tx, err := owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM kv_entries WHERE namespace = 'arb' AND key = 'held' FOR UPDATE`).Scan(&one))
	base := lockWaiters(t, watch)
	results := make(chan *apptest.Response, 2)
	send := func(v string) { results <- s.Do("PUT", path, key, map[string]any{"value": v}, "If-Match", `"1"`) }
	go send("A")
	waitLockWaiters(t, watch, base+1)
	require.NoError(t, testenv.RedisDel(ctx, rc, kvCacheKeys(t, rc, s.Prefix, "acme", "arb", "held")))
	go send("B")
	waitLockWaiters(t, watch, base+2)
	require.NoError(t, tx.Commit(ctx))

	var acked []kvEntry
	var statuses []int
	for range 2 {
		r := <-results
		statuses = append(statuses, r.Status)
		switch r.Status {
		case 200:
			acked = append(acked, kvDecode(t, r))
		case 409:
		default:
			t.Fatalf("unexpected answer %d %s", r.Status, r.Body)
		}
	}
	require.Len(t, acked, 1, "statuses %v", statuses)
	require.Equal(t, int64(2), acked[0].Version)
	require.NoError(t, testenv.RedisDel(ctx, rc, kvCacheKeys(t, rc, s.Prefix, "acme", "arb", "held")))
	got := kvDecode(t, s.Do("GET", path, key, nil))
	require.Equal(t, acked[0].Version, got.Version)
	require.Equal(t, acked[0].Value, got.Value)
}

// TestKVArbiterRolledBackCache: the cache comes back with an older entry (a failover to a
// replica that missed two writes). A write with If-Match at the old version is refused,
// and after that refusal reads no longer serve the old entry.
func TestKVArbiterRolledBackCache(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	rc := testenv.RedisClient(t)
	ctx := context.Background()
	path := "/v1/kv/arb/rb"

	require.Equal(t, 201, s.Do("PUT", path, key, map[string]any{"value": "v1"}).Status)
	require.Equal(t, "v1", kvDecode(t, s.Do("GET", path, key, nil)).Value) // cached
	dumps := map[string]string{}
	for _, k := range kvCacheKeys(t, rc, s.Prefix, "acme", "arb", "rb") {
		d, err := rc.Dump(ctx, k).Result()
		require.NoError(t, err)
		dumps[k] = d
	}
	require.NotEmpty(t, dumps)
	for v := 2; v <= 3; v++ {
		r := s.Do("PUT", path, key, map[string]any{"value": "v" + strconv.Itoa(v)}, "If-Match", strconv.Quote(strconv.Itoa(v-1)))
		require.Equal(t, 200, r.Status, string(r.Body))
	}
	require.Equal(t, "v3", kvDecode(t, s.Do("GET", path, key, nil)).Value)
	for k, d := range dumps {
		require.NoError(t, rc.RestoreReplace(ctx, k, time.Hour, d).Err())
	}

	r := s.Do("PUT", path, key, map[string]any{"value": "stale"}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, "a write on a rolled-back cache was acknowledged: %s", r.Body)
	got := kvDecode(t, s.Do("GET", path, key, nil))
	require.Equal(t, int64(3), got.Version, "after the refusal reads must serve the durable entry, not the rolled-back cache")
	require.Equal(t, "v3", got.Value)

	r = s.Do("PUT", path, key, map[string]any{"value": "v4"}, "If-Match", `"3"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, int64(4), kvDecode(t, r).Version)
	require.Equal(t, "v4", kvDecode(t, s.Do("GET", path, key, nil)).Value)
}
