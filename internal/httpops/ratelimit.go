package httpops

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/strata-mem/strata/internal/auth"
)

// KeyLimiter is a token bucket per API key on this replica. A cluster's limit per key is
// the replica count times STRATA_RATE_LIMIT; a shared Redis limiter would add a round trip
// to every request, which the hot paths cannot afford.
type KeyLimiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
}

// NewKeyLimiter limits each key to perSecond requests with burst; nil (no limit) when
// perSecond is 0.
func NewKeyLimiter(perSecond float64, burst int) *KeyLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &KeyLimiter{limit: rate.Limit(perSecond), burst: burst, keys: map[string]*rate.Limiter{}}
}

func (l *KeyLimiter) get(key string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.keys[key]
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.keys[key] = lim
	}
	return lim
}

// Middleware answers 429 with Retry-After when the caller's key is over its rate; a nil
// limiter passes everything.
func (l *KeyLimiter) Middleware(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		res := l.get(p.KeyID).Reserve()
		if d := res.Delay(); d > 0 {
			res.Cancel()
			secs := max(int(math.Ceil(d.Seconds())), 1)
			per := strconv.FormatFloat(float64(l.limit), 'f', -1, 64)
			w.Header().Set("RateLimit-Policy", per+";w=1")
			WriteProblem(w, r, http.StatusTooManyRequests, "this API key is over its rate limit ("+per+
				" requests/s); retry after "+(time.Duration(secs)*time.Second).String(), RetryAfter(secs))
			return
		}
		next.ServeHTTP(w, r)
	})
}
