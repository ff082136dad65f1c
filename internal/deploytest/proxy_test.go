package deploytest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lb is the load balancer of the deploy: round robin over a fixed number of slots (one
// per replica; a replaced replica takes its predecessor's slot), skipping a slot whose
// /readyz failed its last check (every 100 ms), as a cloud load balancer would.
//
// It retries a request on another replica when that is safe:
//   - the connection was refused (or the dial failed): nothing was sent, any request;
//   - the connection broke before an answer, or the replica answered 503: only a safe
//     method (GET, HEAD, OPTIONS) or a request carrying an Idempotency-Key.
//
// Anything else reaches the client as it is (a broken connection as 502).
type lb struct {
	URL string

	mu       sync.Mutex
	backends []string // per slot; "" while the slot has no replica

	healthy []atomic.Bool
	served  []atomic.Int64
	next    atomic.Uint64
	tr      *http.Transport
	srv     *http.Server
	stop    chan struct{}

	retried   atomic.Int64 // requests sent again to another replica
	retried5  atomic.Int64 // of which after a 503
	refused   atomic.Int64 // dial failures seen
	broken502 atomic.Int64 // requests answered 502 (broken connection, not retryable)
}

func newLB(t *testing.T, slots int) *lb {
	p := &lb{backends: make([]string, slots), healthy: make([]atomic.Bool, slots), served: make([]atomic.Int64, slots),
		stop: make(chan struct{}),
		tr: &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 30 * time.Second}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	go p.check()
	t.Cleanup(func() {
		close(p.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		p.tr.CloseIdleConnections()
	})
	return p
}

// set puts a replica (its base URL) in slot i; "" takes the slot out.
func (p *lb) set(i int, base string) {
	p.mu.Lock()
	p.backends[i] = base
	p.mu.Unlock()
	p.healthy[i].Store(base != "" && ready(base))
}

func (p *lb) backend(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backends[i]
}

var probe = &http.Client{Timeout: 500 * time.Millisecond}

func ready(base string) bool {
	resp, err := probe.Get(base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (p *lb) check() {
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		var wg sync.WaitGroup
		for i := range p.healthy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := p.backend(i)
				p.healthy[i].Store(b != "" && ready(b))
			}()
		}
		wg.Wait()
	}
}

// pick returns the next slot in turn that is healthy and not yet tried, else one not yet
// tried that has a replica, else -1.
func (p *lb) pick(tried []bool) int {
	n := len(p.healthy)
	start := p.next.Add(1)
	for pass := 0; pass < 2; pass++ {
		for k := 0; k < n; k++ {
			i := int((start + uint64(k)) % uint64(n))
			if tried[i] || p.backend(i) == "" {
				continue
			}
			if pass == 1 || p.healthy[i].Load() {
				return i
			}
		}
	}
	return -1
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func dialFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func (p *lb) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	retryable := safeMethod(r.Method) || r.Header.Get("Idempotency-Key") != ""
	tried := make([]bool, len(p.healthy))
	var last *http.Response
	for round := 0; round < 3; round++ { // a whole round refused: every replica restarting
		for {
			i := p.pick(tried)
			if i < 0 {
				break
			}
			tried[i] = true
			out := r.Clone(r.Context())
			out.RequestURI = ""
			out.URL.Scheme, out.URL.Host = "http", p.backend(i)[len("http://"):]
			out.Host = out.URL.Host
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			out.ContentLength = int64(len(body))
			p.served[i].Add(1)
			resp, err := p.tr.RoundTrip(out)
			switch {
			case err != nil && dialFailed(err):
				p.refused.Add(1)
				p.retried.Add(1)
				continue
			case err != nil && retryable:
				p.retried.Add(1)
				continue
			case err != nil:
				p.broken502.Add(1)
				w.WriteHeader(http.StatusBadGateway)
				return
			case resp.StatusCode == http.StatusServiceUnavailable && retryable:
				if last != nil {
					last.Body.Close()
				}
				last = resp
				p.retried.Add(1)
				p.retried5.Add(1)
				continue
			}
			if last != nil {
				last.Body.Close()
			}
			relay(w, resp)
			return
		}
		if last != nil {
			relay(w, last)
			return
		}
		clear(tried)
		time.Sleep(200 * time.Millisecond) // kept: no replica accepted a connection; a restart is under way
	}
	p.broken502.Add(1)
	w.WriteHeader(http.StatusBadGateway)
}

func relay(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
