package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/migrations"
)

// PGBin is where Debian's Postgres 15 binaries live (STRATA_TEST_PG_BIN overrides).
func PGBin() string {
	if d := os.Getenv("STRATA_TEST_PG_BIN"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// PGCluster is a private Postgres server of a test: its own data directory and port.
type PGCluster struct {
	t    testing.TB
	Port int
	URL  string // of the database "strata" on it, as the superuser
	data string
	log  string
	opts string
	run  func(name string, args ...string)
}

// PGPair is a private Postgres primary with a streaming standby (pg_basebackup -R) of it,
// the database "strata" migrated on the primary and so on both (pgvector included).
type PGPair struct {
	Primary, Standby *PGCluster
}

// StartPostgresPair starts a primary and a hot standby on free ports, as the postgres user
// when the test runs as root; both are stopped (and their files removed) when the test
// ends. It costs a few seconds (initdb, migrations, base backup).
func StartPostgresPair(t testing.TB) *PGPair {
	t.Helper()
	for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(PGBin(), b)); err != nil {
			t.Fatalf("testenv: %s not found in %s (Debian's postgresql-15; STRATA_TEST_PG_BIN): %v", b, PGBin(), err)
		}
	}
	begun := time.Now()
	dir, err := os.MkdirTemp("", "strata-pg-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cred := pgCredential(t)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(PGBin(), name), args...)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("testenv: %s %v: %v\n%s", name, args, err, out)
		}
	}
	opts := "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off " +
		"-c shared_buffers=32MB -c max_connections=80 -c max_wal_senders=4 -c wal_keep_size=256MB " +
		"-c hot_standby_feedback=on -c unix_socket_directories=" + dir
	p := &PGCluster{t: t, Port: FreePort(t), data: filepath.Join(dir, "primary"), log: filepath.Join(dir, "primary.log"), opts: opts}
	run("initdb", "-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	// initdb's trust setup already accepts local replication connections (127.0.0.1).
	p.run = run
	p.Start()
	t.Cleanup(p.Stop)
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/strata?sslmode=disable&application_name=strata-test", p.Port)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port))
	if err != nil {
		t.Fatalf("testenv: private primary: %v", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE strata"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	admin.Close(ctx)
	initialised := time.Now()
	if _, err := migrations.Apply(ctx, p.URL, nil); err != nil {
		t.Fatalf("testenv: migrating the private primary: %v", err)
	}
	migrated := time.Now()

	s := &PGCluster{t: t, Port: FreePort(t), data: filepath.Join(dir, "standby"), log: filepath.Join(dir, "standby.log"), opts: opts, run: run}
	run("pg_basebackup", "-D", s.data, "-R", "-X", "stream", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres", "--no-sync", "--checkpoint=fast")
	s.Start()
	t.Cleanup(s.Stop)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/strata?sslmode=disable&application_name=strata-test", s.Port)
	t.Logf("testenv: Postgres primary + standby up in %s (initdb and start %s, migrations %s, base backup and standby %s)",
		time.Since(begun).Round(time.Millisecond), initialised.Sub(begun).Round(time.Millisecond),
		migrated.Sub(initialised).Round(time.Millisecond), time.Since(migrated).Round(time.Millisecond))
	return &PGPair{Primary: p, Standby: s}
}

// Start starts the server and waits until it accepts connections.
func (c *PGCluster) Start() {
	c.t.Helper()
	c.run("pg_ctl", "-D", c.data, "-l", c.log, "-o", "-p "+strconv.Itoa(c.Port)+" "+c.opts, "-w", "-t", "60", "start")
}

// Stop stops the server at once (immediate mode: like a crash of the machine).
func (c *PGCluster) Stop() {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err != nil {
		return
	}
	cmd := exec.Command(filepath.Join(PGBin(), "pg_ctl"), "-D", c.data, "-m", "immediate", "-w", "stop")
	if cred := pgCredential(c.t); cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	_ = cmd.Run()
}

// Exec runs sql on the server's strata database as the superuser.
func (c *PGCluster) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// QueryInt runs a query answering one integer on the server's strata database.
func (c *PGCluster) QueryInt(ctx context.Context, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// pgCredential is the postgres user's when the test runs as root (initdb refuses root).
func pgCredential(t testing.TB) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("testenv: running as root needs a postgres user for the private Postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
