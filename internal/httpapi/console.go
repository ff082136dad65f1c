package httpapi

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/auth"
)

// The web console (internal/console) is mounted at /console. It is built by internal/app
// from Deps.Console, which is handed the API as an in-process http.Handler: every console
// action is a request through this router — authenticate (trusting the principal the
// console resolved from its session, auth.WithInProcessPrincipal), rate limit, unit of work,
// role checks, Art. 18 declarations, idempotency and audit — literally the API's.

// mountConsole mounts the console when app composed one.
func (s *Server) mountConsole(r chi.Router) {
	if s.Console == nil {
		return
	}
	h := s.Console(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Enter the router afresh (without the /console request's route context).
		s.router.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, (*chi.Context)(nil))))
	}))
	// The console routes with its own router: from a fresh route context too (the
	// request's metrics label stays /console/*).
	fresh := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, chi.NewRouteContext())))
	})
	r.Handle("/console", fresh)
	r.Handle("/console/*", fresh)
}

// viaDetails is the audit details of a record written by hand for p (the export's).
func viaDetails(p auth.Principal) map[string]any {
	if p.Via == "" {
		return nil
	}
	return map[string]any{"via": p.Via}
}
