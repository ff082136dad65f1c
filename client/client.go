// Package client is the Go client for Strata's HTTP API. It is what the `strata` CLI and
// the end-to-end tests use, and what a Go agent imports.
//
// Every write is retried safely: the client gives each logical POST/PUT/PATCH call one
// Idempotency-Key (unless the caller sets one) and reuses it on every retry, so a call that
// timed out or hit a 503 can be repeated without applying twice. Retries back off
// exponentially with jitter and honour Retry-After.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// Client talks to one Strata server with one API key.
type Client struct {
	base       string
	key        string
	http       *http.Client
	maxRetries int
	minBackoff time.Duration
	maxBackoff time.Duration
	userAgent  string
	owner      string // WithOwner: the agent id Step claims as and Once records as
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the underlying HTTP client (default: 30 s timeout).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetries sets how many times a failed call is retried (default 4) and the backoff
// bounds (default 100 ms to 5 s).
func WithRetries(n int, min, max time.Duration) Option {
	return func(c *Client) { c.maxRetries, c.minBackoff, c.maxBackoff = n, min, max }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client for baseURL (e.g. http://localhost:8080) with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey,
		http: &http.Client{Timeout: 30 * time.Second}, maxRetries: 4,
		minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second, userAgent: "strata-go-client/1"}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL is the server the client talks to.
func (c *Client) BaseURL() string { return c.base }

// FieldError is one entry of a problem's errors list.
type FieldError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
	Value    any    `json:"value,omitempty"`
}

// Error is an RFC 9457 problem the server answered.
type Error struct {
	Status    int          `json:"status"`
	Title     string       `json:"title"`
	Detail    string       `json:"detail"`
	Errors    []FieldError `json:"errors"`
	RequestID string       `json:"-"`
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Errors {
		if f.Location != "" {
			fmt.Fprintf(&b, "; %s: %s", f.Location, f.Message)
		} else if f.Message != "" {
			fmt.Fprintf(&b, "; %s", f.Message)
		}
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// StatusOf returns the HTTP status of an *Error, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound, IsConflict: common checks.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsConflict reports a 409 (stale version, lease held, stale fencing token, ...).
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// Call describes one request.
type Call struct {
	Method string
	Path   string     // e.g. "/v1/jobs/j1/events"; already escaped
	Query  url.Values // optional
	Body   any        // JSON-encoded when non-nil ([]byte / json.RawMessage sent as-is)
	// Header adds headers (If-Match, Idempotency-Key, Content-Type, ...).
	Header http.Header
	// NoRetry disables retries for this call.
	NoRetry bool
}

// Meta is what a call's response said besides its body.
type Meta struct {
	Status    int
	ETag      string
	RequestID string
	Replayed  bool
	Header    http.Header
}

func isWrite(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

// Do sends call and decodes a 2xx JSON body into out (which may be nil). Retries:
// network errors, 429, 502, 503, 504, and 409 "still in progress" for idempotent writes.
func (c *Client) Do(ctx context.Context, call Call, out any) (Meta, error) {
	var body []byte
	switch b := call.Body.(type) {
	case nil:
	case []byte:
		body = b
	case json.RawMessage:
		body = b
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			return Meta{}, fmt.Errorf("encoding request body: %w", err)
		}
	}
	hdr := http.Header{}
	for k, v := range call.Header {
		hdr[k] = v
	}
	if isWrite(call.Method) && hdr.Get("Idempotency-Key") == "" {
		hdr.Set("Idempotency-Key", uuid.NewString())
	}
	u := c.base + call.Path
	if len(call.Query) > 0 {
		u += "?" + call.Query.Encode()
	}
	attempts := c.maxRetries + 1
	if call.NoRetry {
		attempts = 1
	}
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			wait := c.backoff(attempt, lastErr)
			select {
			case <-ctx.Done():
				return Meta{}, ctx.Err()
			case <-time.After(wait):
			}
		}
		meta, err := c.once(ctx, call.Method, u, body, hdr, out)
		if err == nil {
			return meta, nil
		}
		lastErr = err
		if !c.retryable(call.Method, hdr, err) {
			return meta, err
		}
	}
	return Meta{}, lastErr
}

func (c *Client) once(ctx context.Context, method, u string, body []byte, hdr http.Header, out any) (Meta, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Meta{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	// The caller's trace context (traceparent), through the global OpenTelemetry propagator:
	// a caller that traces continues its trace in Strata; otherwise a no-op.
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	if err != nil {
		return Meta{}, &netError{err: err}
	}
	defer resp.Body.Close()
	meta := Meta{Status: resp.StatusCode, ETag: resp.Header.Get("ETag"), RequestID: resp.Header.Get("X-Request-Id"),
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true", Header: resp.Header}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return meta, &netError{err: err}
	}
	if resp.StatusCode >= 400 {
		e := &Error{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), RequestID: meta.RequestID}
		_ = json.Unmarshal(data, e)
		e.Status = resp.StatusCode
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return meta, e
	}
	if out != nil && len(data) > 0 {
		if w, ok := out.(io.Writer); ok {
			_, err = w.Write(data)
			return meta, err
		}
		if err := json.Unmarshal(data, out); err != nil {
			return meta, fmt.Errorf("decoding %s response: %w", u, err)
		}
	}
	return meta, nil
}

type netError struct{ err error }

func (e *netError) Error() string { return "connecting to Strata: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

func (c *Client) retryable(method string, hdr http.Header, err error) bool {
	var ne *netError
	if errors.As(err, &ne) {
		// A read without side effects, or a write carrying an Idempotency-Key, is safe.
		return method == http.MethodGet || hdr.Get("Idempotency-Key") != "" || method == http.MethodDelete
	}
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return hdr.Get("Idempotency-Key") != "" && strings.Contains(e.Detail, "still in progress")
	}
	return false
}

func (c *Client) backoff(attempt int, err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return min(e.RetryAfter, c.maxBackoff)
	}
	d := c.minBackoff << (attempt - 1)
	if d > c.maxBackoff || d <= 0 {
		d = c.maxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// Page is one page of a list.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// PathEscape escapes one path segment.
func PathEscape(s string) string { return url.PathEscape(s) }
