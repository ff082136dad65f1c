package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

// ---- configuration ---------------------------------------------------------------------

func soak() bool { return os.Getenv("STRATA_SOAK") != "" }

// seed returns the run's random seed (STRATA_RELIABILITY_SEED replays one) and logs it.
func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("STRATA_RELIABILITY_SEED"); v != "" {
		p, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
		s = p
	}
	t.Logf("STRATA_RELIABILITY_SEED=%d", s)
	return s
}

// ---- the server binary -------------------------------------------------------------------

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// serverBinary builds cmd/server once per test process.
func serverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		out, err := exec.Command(gobin, "env", "GOMOD").Output()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "strata-reliability-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "strata-server")
		cmd := exec.Command(gobin, "build", "-o", builtBin, "./cmd/server")
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, b)
		}
	})
	require.NoError(t, buildErr)
	return builtBin
}

// stack is one test's stores: a fresh database, a Redis prefix, a bootstrap admin key.
type stack struct {
	dsn, redisURL, prefix, admin string
}

func newStack(t *testing.T) stack {
	_, prefix := testenv.Redis(t)
	return stack{dsn: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(), prefix: prefix,
		admin: "sk_admin_" + testenv.RandomID(16)}
}

// proc is one server process.
type proc struct {
	t       *testing.T
	name    string
	bin     string
	env     []string
	url     string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	kills    int
	restarts []time.Duration
}

func newProc(t *testing.T, name string, st stack, extraEnv ...string) *proc {
	port := testenv.FreePort(t)
	p := &proc{t: t, name: name, bin: serverBinary(t), url: fmt.Sprintf("http://127.0.0.1:%d", port),
		logPath: filepath.Join(t.TempDir(), name+".log"),
		env: append(append(os.Environ(), "STRATA_DATABASE_URL="+st.dsn, "STRATA_REDIS_URL="+st.redisURL,
			"STRATA_REDIS_PREFIX="+st.prefix, fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port),
			"STRATA_ADMIN_KEY="+st.admin, "STRATA_LOG_LEVEL=warn", "STRATA_SHUTDOWN_TIMEOUT=2s", "STRATA_SHUTDOWN_DELAY=0"), extraEnv...)}
	p.start()
	t.Cleanup(p.stop)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s log (tail):\n%s", p.name, b)
		}
	})
	return p
}

func (p *proc) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(p.t, err)
	defer logf.Close()
	began := time.Now()
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(p.t, cmd.Start())
	p.cmd = cmd
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) { // kept: polls a real child server process (kill -9 harness)
		if resp, err := hc.Get(p.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				p.restarts = append(p.restarts, time.Since(began))
				return
			}
		}
	}
	p.t.Fatalf("%s did not become ready", p.name)
}

// kill SIGKILLs the process: no graceful shutdown, no flush.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
		p.kills++
	}
}

func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// ---- HTTP ---------------------------------------------------------------------------------

type client struct {
	base, key string
	hc        *http.Client
}

func newClient(base, key string) *client {
	return &client{base: base, key: key, hc: &http.Client{Timeout: 15 * time.Second}}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r *reply) m() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	return m
}

// do sends one request; err is a transport failure (no answer).
func (c *client) do(method, path string, body any, hdr ...string) (*reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// must retries a request until a live server answers it below 500 (for setup calls).
func (c *client) must(t *testing.T, method, path string, body any, hdr ...string) *reply {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // kept: polls a real child server process (kill -9 harness)
		if r, err := c.do(method, path, body, hdr...); err == nil && r.status < 500 {
			return r
		}
	}
	t.Fatalf("%s %s: no answer for 60s", method, path)
	return nil
}

func newKey(t *testing.T, base, admin, org, role string) (secret, id string) {
	t.Helper()
	r := newClient(base, admin).must(t, "POST", "/v1/admin/keys", map[string]any{"org_id": org, "role": role})
	require.Equal(t, 201, r.status, string(r.body))
	return r.m()["key"].(string), r.m()["id"].(string)
}

// ---- a round-robin proxy -------------------------------------------------------------------

// rrProxy spreads requests over backends in turn, skipping those whose /readyz failed
// its last check (every 100 ms), as a load balancer would. A backend that dies between
// checks costs the requests in flight a 502: clients retry those.
type rrProxy struct {
	URL      string
	backends []*url.URL
	healthy  []atomic.Bool
	served   []atomic.Int64
	next     atomic.Uint64
	srv      *http.Server
	stop     chan struct{}
}

func newRRProxy(t *testing.T, backends ...string) *rrProxy {
	p := &rrProxy{stop: make(chan struct{}), healthy: make([]atomic.Bool, len(backends)), served: make([]atomic.Int64, len(backends))}
	for i, b := range backends {
		u, err := url.Parse(b)
		require.NoError(t, err)
		p.backends = append(p.backends, u)
		p.healthy[i].Store(true)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := p.pick()
			p.served[i].Add(1)
			pr.SetURL(p.backends[i])
		},
		Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 64},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.URL = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: rp}
	go func() { _ = p.srv.Serve(ln) }()
	go p.check()
	t.Cleanup(func() {
		close(p.stop)
		_ = p.srv.Shutdown(context.Background())
	})
	return p
}

func (p *rrProxy) pick() int {
	n := len(p.backends)
	for tries := 0; tries < n; tries++ {
		i := int(p.next.Add(1) % uint64(n))
		if p.healthy[i].Load() {
			return i
		}
	}
	return int(p.next.Load() % uint64(n))
}

func (p *rrProxy) check() {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		for i, b := range p.backends {
			resp, err := hc.Get(b.String() + "/readyz")
			ok := err == nil && resp.StatusCode == 200
			if resp != nil {
				resp.Body.Close()
			}
			p.healthy[i].Store(ok)
		}
	}
}

func newRand(s uint64, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(s, stream)) }
