package httpops

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

type check struct {
	OK        bool    `json:"ok"`
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
	Version   string  `json:"version,omitempty"`
}

type readiness struct {
	Status string           `json:"status"` // ready | degraded | unavailable | draining
	Checks map[string]check `json:"checks"`
}

// Healthz answers that the process serves.
func Healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// Readyz checks each store. Postgres or pgvector down → 503 (nothing durable can be
// written). Redis down alone → 200 "degraded": key-value reads fall back to Postgres and
// working memory answers 503 per request with Retry-After, so the replica stays in rotation.
// While draining reports true (the process got SIGTERM and is about to stop), it answers
// 503 "draining" without asking the stores, so load balancers take the replica out of
// rotation while it still serves; nil draining never drains.
func Readyz(pool *pgxpool.Pool, rdb redis.UniversalClient, draining func() bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if draining != nil && draining() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(readiness{Status: "draining", Checks: map[string]check{}})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		res := readiness{Checks: map[string]check{}}

		start := time.Now()
		vecVersion, err := pg.VectorVersion(ctx, pool)
		pgc := check{OK: err == nil, LatencyMS: ms(time.Since(start))}
		if err != nil {
			pgc.Error = "unreachable"
		}
		res.Checks["postgres"] = pgc
		vc := check{OK: err == nil && vecVersion != "", Version: vecVersion}
		if err == nil && vecVersion == "" {
			vc.Error = "the vector extension is not installed: run `server migrate`"
		} else if err != nil {
			vc.Error = "postgres unreachable"
		}
		res.Checks["pgvector"] = vc

		start = time.Now()
		err = rdb.Ping(ctx).Err()
		rc := check{OK: err == nil, LatencyMS: ms(time.Since(start))}
		if err != nil {
			rc.Error = "unreachable"
		}
		res.Checks["redis"] = rc

		status := http.StatusOK
		switch {
		case !pgc.OK || !vc.OK:
			res.Status, status = "unavailable", http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "2")
		case !rc.OK:
			res.Status = "degraded"
		default:
			res.Status = "ready"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(res)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Pprof mounts net/http/pprof for admin keys only (behind the API's authentication).
func Pprof(r chi.Router) {
	r.Use(requireAdmin)
	r.HandleFunc("/debug/pprof/", pprof.Index)
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.Handle("/debug/pprof/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Handler(chi.URLParam(r, "name")).ServeHTTP(w, r)
	}))
}

// requireAdmin refuses every role but admin.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := auth.FromContext(r.Context()); p.Role != strata.RoleAdmin {
			WriteProblem(w, r, http.StatusForbidden, "profiling needs an admin key", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}
