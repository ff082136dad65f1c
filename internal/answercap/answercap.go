// Package answercap bounds what Strata reads of an answer from the model (chat
// completions) or the embedder: the HTTP client of every such call reads at most a limit
// that the call sets from what it asked for (a multiple of the requested max tokens; batch
// size × dimensions for embeddings), and fails with a *TooLargeError beyond it instead of
// holding the whole answer in memory. The answer's content is never part of the error.
package answercap

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// BytesPerToken is what one requested completion token may take in the answer's bytes: a
// token is about 4 bytes of text, JSON escaping can double it and \u escapes of non-ASCII
// text take 6 bytes a character; 16 leaves room for all of that.
const BytesPerToken = 16

// Floor is the smallest limit of a chat answer: the envelope (id, usage, finish reason)
// and small max_tokens values fit with room.
const Floor = 64 << 10

// Default is the limit of a call that set none.
const Default = 4 << 20

// ForTokens is the limit of a chat completion that asked for at most maxTokens tokens.
func ForTokens(maxTokens int) int64 {
	return max(int64(maxTokens)*BytesPerToken+16<<10, Floor)
}

// ForEmbeddings is the limit of an embeddings answer of n vectors of dims numbers: a
// float as JSON text takes up to ~24 bytes with its comma, each item an envelope of its
// own (index, object).
func ForEmbeddings(n, dims int) int64 {
	return int64(n)*int64(dims)*32 + int64(n)*256 + 16<<10
}

// TooLargeError is an answer refused for its size. It says how large and what the limit
// was; none of the answer.
type TooLargeError struct {
	What  string // "model answer", "embeddings answer"
	Size  int64  // bytes: the declared Content-Length, or what was read when the limit was passed
	Known bool   // Size is the declared length (else: at least Size)
	Limit int64
}

func (e *TooLargeError) Error() string {
	what := e.What
	if what == "" {
		what = "answer"
	}
	if e.Known {
		return fmt.Sprintf("the %s is %d bytes; Strata reads at most %d bytes of it (refused, not read)", what, e.Size, e.Limit)
	}
	return fmt.Sprintf("the %s is larger than %d bytes (at least %d read); Strata reads at most %d bytes of it (refused)",
		what, e.Limit, e.Size, e.Limit)
}

type limitKey struct{}

type limit struct {
	n    int64
	what string
}

// WithLimit returns ctx carrying the most bytes the answer of a call made with it may have
// (what names the answer in the error: "model answer").
func WithLimit(ctx context.Context, n int64, what string) context.Context {
	return context.WithValue(ctx, limitKey{}, limit{n: n, what: what})
}

// Client returns a copy of c (nil: a plain client) whose answers are capped: a response
// body beyond the request context's limit (WithLimit; Default without one) fails the read
// with a *TooLargeError, and a declared Content-Length beyond it fails the call before a
// byte of the body is read.
func Client(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	if _, ok := out.Transport.(*transport); ok {
		return &out
	}
	base := out.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	out.Transport = &transport{base: base}
	return &out
}

type transport struct{ base http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	l, ok := req.Context().Value(limitKey{}).(limit)
	if !ok {
		l = limit{n: Default, what: "answer"}
	}
	if resp.ContentLength > l.n {
		resp.Body.Close()
		return nil, &TooLargeError{What: l.what, Size: resp.ContentLength, Known: true, Limit: l.n}
	}
	resp.Body = &capped{rc: resp.Body, left: l.n, l: l}
	return resp, nil
}

// capped reads at most l.n bytes of rc; one byte more is a *TooLargeError (and the body
// is closed, so the connection stops receiving).
type capped struct {
	rc   io.ReadCloser
	left int64
	read int64
	l    limit
	err  error
}

func (c *capped) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	// Ask for one byte beyond the limit: receiving it proves the answer too large.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.rc.Read(p)
	c.read += int64(n)
	if int64(n) > c.left {
		n = int(c.left)
		c.left = 0
		c.err = &TooLargeError{What: c.l.what, Size: c.read, Limit: c.l.n}
		c.rc.Close()
		return n, c.err
	}
	c.left -= int64(n)
	return n, err
}

func (c *capped) Close() error { return c.rc.Close() }
