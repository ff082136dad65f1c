package httpops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/strata-mem/strata/internal/idempotency"
)

type requestIDKey struct{}

// RequestID is the request's id (X-Request-Id), "" outside a request.
func RequestID(ctx context.Context) string {
	if id, _ := ctx.Value(requestIDKey{}).(*string); id != nil {
		return *id
	}
	return ""
}

// WithRequestID accepts a sane X-Request-Id from the client or makes one, and echoes it.
func WithRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !idempotency.ValidKey(id) || len(id) > 128 {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		// The context, the id (by pointer: a string in an interface is an allocation of its
		// own) and the header's value, in one allocation.
		c := &requestIDCtx{Context: r.Context(), id: id, hdr: [1]string{id}}
		w.Header()["X-Request-Id"] = c.hdr[:]
		next.ServeHTTP(w, r.WithContext(c))
	})
}

// requestIDCtx is a context carrying the request id (context.WithValue's behaviour, with
// the value stored inline).
type requestIDCtx struct {
	context.Context
	id  string
	hdr [1]string
}

func (c *requestIDCtx) Value(key any) any {
	if _, ok := key.(requestIDKey); ok {
		return &c.id
	}
	return c.Context.Value(key)
}
