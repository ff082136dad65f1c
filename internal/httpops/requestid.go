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
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
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
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}
