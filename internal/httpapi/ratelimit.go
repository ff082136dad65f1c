package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/strata-mem/strata/internal/auth"
)

// keyLimiter is a token bucket per API key on this replica. A cluster's limit per key is
// the replica count times STRATA_RATE_LIMIT; a shared Redis limiter would add a round trip
// to every request, which the hot paths cannot afford.
type keyLimiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
}

func newKeyLimiter(perSecond float64, burst int) *keyLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &keyLimiter{limit: rate.Limit(perSecond), burst: burst, keys: map[string]*rate.Limiter{}}
}

func (l *keyLimiter) get(key string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.keys[key]
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.keys[key] = lim
	}
	return lim
}

// rateLimit answers 429 with Retry-After when the caller's key is over its rate.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	if s.limiter == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		res := s.limiter.get(p.KeyID).Reserve()
		if d := res.Delay(); d > 0 {
			res.Cancel()
			secs := int(math.Ceil(d.Seconds()))
			if secs < 1 {
				secs = 1
			}
			w.Header().Set("RateLimit-Policy", strconv.FormatFloat(float64(s.limiter.limit), 'f', -1, 64)+";w=1")
			writeProblem(w, r, http.StatusTooManyRequests,
				"this API key is over its rate limit ("+strconv.FormatFloat(float64(s.limiter.limit), 'f', -1, 64)+
					" requests/s); retry after "+(time.Duration(secs)*time.Second).String(), retryAfter(secs))
			return
		}
		next.ServeHTTP(w, r)
	})
}
