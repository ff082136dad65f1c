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
func ensureTemplate(ctx context.Context, t testing.TB, admin *pgx.Conn) string {
	name := templateName()
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
	if _, err := migrations.Apply(ctx, withDB(BaseDatabaseURL(), name), nil); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, BaseDatabaseURL())
	if err != nil {
		t.Fatalf("testenv: Postgres is not reachable at %s (run `make stores`): %v", pg.RedactURL(BaseDatabaseURL()), err)
	}
	defer admin.Close(context.Background())
	tmpl := ensureTemplate(ctx, t, admin)
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
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), BaseDatabaseURL())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDB(BaseDatabaseURL(), name)
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

// Redis returns a client and a key prefix of this test's own; the prefix's keys are
// deleted when the test ends.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := redis.NewClient(opt)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("testenv: Redis is not reachable at %s (run `make stores`): %v", RedisURL(), err)
	}
	prefix := "t" + RandomID(5) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	return c, prefix
}
