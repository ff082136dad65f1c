// Package apptest starts a real Strata server in-process (through app.Run, on port 0) on a
// fresh database and Redis prefix, and gives end-to-end tests a small HTTP client for it.
package apptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/testenv"
)

// Server is a running test server.
type Server struct {
	t        testing.TB
	URL      string
	AdminKey string
	DBURL    string // owner URL of the server's database
	Prefix   string // the server's Redis key prefix
	Client   *http.Client
	logs     *syncBuffer
	stop     func() error
}

// Stop shuts the server down gracefully now (the test's cleanup then has nothing left to do),
// so a test can start another on the same database (Env STRATA_DATABASE_URL = s.DBURL, and the
// same STRATA_REDIS_PREFIX and STRATA_ADMIN_KEY) and check what survived the restart.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.stop(); err != nil {
		s.t.Fatalf("apptest: %v", err)
	}
}

// Logs returns what the server has logged so far.
func (s *Server) Logs() string { return s.logs.String() }

// Option changes the server's environment, or adds a hook, before it starts.
type Option func(o *options)

type options struct {
	env   map[string]string
	hooks app.Hooks
}

// Env sets one variable.
func Env(k, v string) Option { return func(o *options) { o.env[k] = v } }

// Tracer makes tr see every statement the server's primary pool sends (RoundTrips counts
// them per request).
func Tracer(tr pgx.QueryTracer) Option { return func(o *options) { o.hooks.PoolTracer = tr } }

// noAutoConsolidation marks the environment of NoAutoConsolidation.
const noAutoConsolidation = "apptest.no_auto_consolidation"

// NoAutoConsolidation keeps the consolidation worker from turning the test's completed jobs
// into job memories by itself: the outbox poll is an hour, and Start returns only after the
// poll's run at start-up (which waits for River's leader election, seconds on a loaded
// machine) has completed — so it cannot pick up what the test writes. An explicit
// POST /v1/admin/consolidation/run still consolidates.
func NoAutoConsolidation() Option {
	return func(o *options) { o.env["STRATA_OUTBOX_POLL"], o.env[noAutoConsolidation] = "1h", "1" }
}

// Start runs a server until the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	dsn := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	admin := "sk_admin_" + testenv.RandomID(16)
	env := map[string]string{
		"STRATA_DATABASE_URL": dsn,
		"STRATA_REDIS_URL":    testenv.RedisServerURL(t),
		"STRATA_REDIS_PREFIX": prefix,
		"STRATA_HTTP_ADDR":    "127.0.0.1:0",
		"STRATA_ADMIN_KEY":    admin,
		"STRATA_LOG_LEVEL":    "warn",
		// Many test servers share one Postgres (max_connections 100 by default).
		"STRATA_DB_MAX_CONNS": "12",
		// No load balancer to tell: stop without the drain's delay (a test sets it to test it).
		"STRATA_SHUTDOWN_DELAY": "0",
	}
	o := &options{env: env}
	for _, opt := range opts {
		opt(o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		err := app.RunWith(ctx, []string{"server"}, func(k string) string { return env[k] }, pw, logs, o.hooks)
		pw.CloseWithError(fmt.Errorf("server exited: %v", err))
		done <- err
	}()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "Strata listening on "); ok {
				urlc <- u
			}
		}
		close(urlc)
	}()
	var base string
	select {
	case u, ok := <-urlc:
		if !ok {
			cancel()
			t.Fatalf("apptest: server did not start: %v\n%s", <-done, logs.String())
		}
		base = u
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("apptest: server did not start within 60s\n%s", logs.String())
	}
	s := &Server{t: t, URL: base, AdminKey: admin, DBURL: dsn, Prefix: prefix,
		Client: &http.Client{Timeout: 30 * time.Second}, logs: logs}
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					stopErr = fmt.Errorf("server exited with %v", err)
				}
			case <-time.After(30 * time.Second):
				stopErr = fmt.Errorf("server did not shut down within 30s")
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("apptest: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	s.WaitReady()
	if env[noAutoConsolidation] != "" {
		s.waitStartupDispatch()
	}
	return s
}

// waitStartupDispatch waits until the outbox poll's run at start-up has completed.
func (s *Server) waitStartupDispatch() {
	s.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DBURL)
	if err != nil {
		s.t.Fatalf("apptest: connecting to read River's jobs: %v", err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'consolidation_dispatch' AND state = 'completed'`).Scan(&n); err != nil {
			s.t.Fatalf("apptest: reading River's jobs: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("apptest: the outbox poll's start-up run did not complete within 60s\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReady polls /readyz until it answers 200.
func (s *Server) WaitReady() {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := s.Client.Get(s.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("apptest: %s/readyz never answered 200", s.URL)
}

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v (failing the test on error) and returns v.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decoding %d response %q: %v", r.Status, r.Body, err)
	}
}

// Map decodes the body as a JSON object.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Do sends a request with key as bearer (none when empty). body may be nil, a []byte or
// string sent as-is, or anything else JSON-encoded. hdr is pairs of header name, value.
func (s *Server) Do(method, path, key string, body any, hdr ...string) *Response {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatalf("encoding body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatalf("request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// NewKey creates an API key for org with role through the admin API and returns it.
func (s *Server) NewKey(org, role string) string {
	s.t.Helper()
	r := s.Do("POST", "/v1/admin/keys", s.AdminKey, map[string]any{"org_id": org, "role": role})
	if r.Status != 201 {
		s.t.Fatalf("creating key: %d %s", r.Status, r.Body)
	}
	var k struct {
		Key string `json:"key"`
	}
	r.JSON(s.t, &k)
	return k.Key
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
