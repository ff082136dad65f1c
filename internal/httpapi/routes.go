package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"github.com/go-chi/chi/v5"
)

// routes is the whole API, top to bottom.
func (s *Server) routes() {
	r := s.router
	r.Use(withRequestID, s.observe)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path, nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path, nil)
	})

	// Operations: unauthenticated.
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Handle("/metrics", s.metricsHandler())
	r.Get("/openapi.json", s.serveOpenAPI)

	// Profiling: admin keys only.
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, requireAdmin)
		pprofRoutes(r)
	})

	// MCP (tools.go): authenticated; each tool call is dispatched to the API below.
	s.mountMCP(r)

	// The API: authenticated, one unit of work per request.
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.rateLimit, s.unitOfWork)
		s.api = humachi.New(r, newHumaConfig())

		s.registerAdminKeys()
		s.registerAudit()
		s.registerKeyValue()

		s.registerWorking()
		s.registerEpisodic()
		s.registerJobs()
		s.registerMemories()
		s.registerLangGraph()
		s.registerContext()
		s.registerTools()
		s.registerLifecycleAdmin()
		s.registerGDPR()
		s.registerQuarantines()
	})
}
