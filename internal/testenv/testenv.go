// Package testenv gives tests real, isolated stores: a fresh Postgres database per test,
// cloned from a migrated template (so it costs one CREATE DATABASE, not a migration run),
// and a Redis key prefix per test. STRATA_TEST_DATABASE_URL and STRATA_TEST_REDIS_URL point
// it elsewhere; the defaults are the local stores `make test` starts.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/migrations"
)

// BaseDatabaseURL is the server tests create their databases on.
func BaseDatabaseURL() string {
	if u := os.Getenv("STRATA_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the Redis tests use.
func RedisURL() string {
	if u := os.Getenv("STRATA_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// RandomID returns n random bytes in hex.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func withDB(base, db string) string {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + db
	return u.String()
}

func templateName() string {
	h := sha256.New()
	h.Write([]byte(migrations.RiverVersion))
	names, _ := fs.Glob(migrations.FS, "*.sql")
	sort.Strings(names)
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS, n)
		h.Write([]byte(n))
		h.Write(b)
	}
	return "strata_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]
}

// ensureTemplate builds the migrated template database once per migration set, under an
// advisory lock so parallel test processes (one per package) build it once.
func ensureTemplate(ctx context.Context, t testing.TB, admin *pgx.Conn, partitions int) string {
	name := templateName()
	if partitions != migrations.DefaultPartitions {
		name += "_p" + strconv.Itoa(partitions)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7355608)"); err != nil {
		t.Fatalf("testenv: advisory lock: %v", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(7355608)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if exists {
		return name
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: creating template: %v", err)
	}
	if _, err := migrations.ApplyWith(ctx, withDB(BaseDatabaseURL(), name), nil, migrations.Options{Partitions: partitions}); err != nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE "+name)
		t.Fatalf("testenv: migrating template: %v", err)
	}
	return name
}

// DatabaseURL creates a fresh, fully migrated database for this test and drops it when
// the test ends. The URL connects as the migrating owner; use pg.NewPool on it to get the
// server's view (role strata_app, row-level security binding).
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return DatabaseURLPartitions(t, migrations.DefaultPartitions)
}

// DatabaseURLPartitions is DatabaseURL with the big tables hash-partitioned into n
// partitions (migrations/0033; 0: unpartitioned), cloned from a template of its own.
func DatabaseURLPartitions(t testing.TB, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, BaseDatabaseURL())
	if err != nil {
		t.Fatalf("testenv: Postgres is not reachable at %s (run `make stores`): %v", pg.RedactURL(BaseDatabaseURL()), err)
	}
	defer admin.Close(context.Background())
	tmpl := ensureTemplate(ctx, t, admin, n)
	name := "strata_t_" + RandomID(6)
	var lastErr error
	for i := 0; i < 20; i++ { // a sibling may be cloning the same template this instant
		if _, lastErr = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); lastErr == nil {
			break
		}
		time.Sleep(time.Duration(50+i*25) * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("testenv: creating test database: %v", lastErr)
	}
	dropAtCleanup(t, name)
	return withDB(BaseDatabaseURL(), name)
}

// EmptyDatabaseURL creates a fresh database with no Strata schema (for a peer that brings
// its own tables, such as the mem0 benchmark's pgvector store) on the same server, dropped
// when the test ends. The URL connects as the superuser the tests use.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, BaseDatabaseURL())
	if err != nil {
		t.Fatalf("testenv: Postgres is not reachable at %s (run `make stores`): %v", pg.RedactURL(BaseDatabaseURL()), err)
	}
	defer admin.Close(context.Background())
	name := "strata_peer_" + RandomID(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: creating an empty database: %v", err)
	}
	dropAtCleanup(t, name)
	return withDB(BaseDatabaseURL(), name)
}

func dropAtCleanup(t testing.TB, name string) {
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), BaseDatabaseURL())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
}

// Pool returns a pool on a fresh test database with the server's settings (role
// strata_app), closed when the test ends.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := DatabaseURL(t)
	p, err := pg.NewPool(context.Background(), dsn, pg.PoolOptions{MaxConns: 10})
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p, dsn
}

// OwnerConn connects to dsn as its owner (the migrating user), bypassing the request role:
// for assertions that must see every org's rows.
func OwnerConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// ClusterMode reports whether STRATA_TEST_REDIS=cluster asks the suites to run against a
// real Redis Cluster (SharedRedisCluster) instead of the single server of RedisURL.
func ClusterMode() bool { return os.Getenv("STRATA_TEST_REDIS") == "cluster" }

// RedisServerURL is the STRATA_REDIS_URL a test server should use: the shared cluster's in
// cluster mode, RedisURL otherwise.
func RedisServerURL(t testing.TB) string {
	t.Helper()
	if ClusterMode() {
		return SharedRedisCluster(t).URL
	}
	return RedisURL()
}

// Redis returns a client and a key prefix of this test's own; the prefix's keys are
// deleted when the test ends. In cluster mode the client is a cluster client of the shared
// cluster.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	var c redis.UniversalClient
	if ClusterMode() {
		c = SharedRedisCluster(t).Client()
	} else {
		opt, err := redis.ParseURL(RedisURL())
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		c = redis.NewClient(opt)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("testenv: Redis is not reachable at %s (run `make stores`): %v", RedisURL(), err)
	}
	prefix := "t" + RandomID(5) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, err := RedisKeys(ctx, c, prefix+"*"); err == nil {
			for _, k := range keys { // one DEL per key: keys of a cluster live on many slots
				c.Del(ctx, k)
			}
		}
		c.Close()
	})
	return c, prefix
}

// RedisKeys lists the keys matching pattern, on every master when c is a cluster client
// (SCAN and KEYS see one node only).
func RedisKeys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, n redis.Cmdable) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
		return keys, err
	}
	return keys, scan(ctx, c)
}

// RedisClient is a client of the Redis a test server uses (RedisServerURL), closed when
// the test ends.
func RedisClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	if ClusterMode() {
		c = SharedRedisCluster(t).Client()
	} else {
		opt, err := redis.ParseURL(RedisURL())
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		c = redis.NewClient(opt)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// RedisDel deletes keys one by one (a multi-key DEL across cluster slots is refused).
func RedisDel(ctx context.Context, c redis.UniversalClient, keys []string) error {
	for _, k := range keys {
		if err := c.Del(ctx, k).Err(); err != nil {
			return err
		}
	}
	return nil
}
