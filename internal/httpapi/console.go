package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/mem0"
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
	h := s.Console(s.inProcess())
	// The console routes with its own router: from a fresh route context too (the
	// request's metrics label stays /console/*).
	fresh := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, chi.NewRouteContext())))
	})
	r.Handle("/console", fresh)
	r.Handle("/console/*", fresh)
}

// inProcess is the API as an in-process handler for the surfaces built on it (the console,
// the Mem0-compatible API): each request enters the router afresh, without the outer
// request's route context.
func (s *Server) inProcess() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.router.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, (*chi.Context)(nil))))
	})
}

// mountMem0 serves the Mem0-compatible API at /mem0 (internal/mem0, docs/mem0.md): every
// call becomes requests to the API through inProcess, with the caller's own key, so roles,
// Art. 18, idempotency and audit are the API's.
//
// The key is checked first (Mem0's "Token <key>" read as a bearer key): a request without a
// valid one is a 401 before its body is read or validated.
func (s *Server) mountMem0(r chi.Router) {
	r.With(mem0Token, s.authenticate).Mount("/mem0", mem0.New(s.inProcess(), s.Log))
}

// mem0Token reads Mem0 clients' "Authorization: Token <key>" as "Bearer <key>".
func mem0Token(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Token "); ok {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(k))
		}
		next.ServeHTTP(w, r)
	})
}

// viaDetails is the audit details of a record written by hand for p (the export's).
func viaDetails(p auth.Principal) map[string]any {
	if p.Via == "" {
		return nil
	}
	return map[string]any{"via": p.Via}
}
