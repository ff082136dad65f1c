package httpapi

import (
	"context"
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/mcp"
)

// Agent tools: the MCP server at /mcp and the same tools as OpenAI function-calling
// schemas at GET /v1/tools. Both come from one table (internal/mcp.Specs) whose input
// schemas are generated from this API's OpenAPI document, and every tool call is dispatched
// to the REST handler in-process with the caller's own key: one implementation underneath.

type agentTools struct {
	once  sync.Once
	tools []mcp.Tool
	err   error
	mcp   http.Handler
}

// toolTable builds the tools once every route is registered (at the first request).
func (s *Server) toolTable() ([]mcp.Tool, error) {
	s.agentTools().once.Do(func() {
		at := s.agentTools()
		at.tools, at.err = mcp.Tools(s.api.OpenAPI())
		if at.err == nil {
			// A tool call enters the router afresh: without the /mcp request's chi route
			// context, which would make chi route it as a sub-router's remainder.
			api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.router.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, (*chi.Context)(nil))))
			})
			at.mcp = mcp.Handler(api, at.tools, s.Log)
		}
	})
	return s.agentTools().tools, s.agentTools().err
}

func (s *Server) agentTools() *agentTools { return &s.tools }

// mountMCP serves the MCP server (streamable HTTP, stateless, JSON responses) at /mcp
// behind the same bearer keys as /v1. It is outside huma and the unit of work: each tool
// call is a REST request of its own through the router (with its own transaction, audit
// record and rate limit).
func (s *Server) mountMCP(r chi.Router) {
	r.With(s.authenticate).Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, err := s.toolTable(); err != nil {
			httpops.WriteProblem(w, req, http.StatusInternalServerError, "building the tool table: "+err.Error(), nil)
			return
		}
		s.agentTools().mcp.ServeHTTP(w, req)
	}))
}

func (s *Server) listTools(ctx context.Context, r *Request, in *struct{}) (*api.ToolsOutput, error) {
	tools, err := s.toolTable()
	if err != nil {
		return nil, err
	}
	out := &api.ToolsOutput{}
	out.Body.Items = mcp.OpenAITools(tools)
	return out, nil
}
