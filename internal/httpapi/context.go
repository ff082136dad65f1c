package httpapi

import (
	"context"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/semantic"
	tc "github.com/strata-mem/strata/internal/turncontext"
)

// POST /v1/context: per-turn context assembly (docs/context.md). The assembly lives in
// internal/turncontext, the wire types in internal/api/context.go.

// getContext hands the request to the assembler, which checks the GDPR restriction of the
// user, job and session named in its first round trip (CheckedByHandler in routes.go).
func (s *Server) getContext(ctx context.Context, r *Request, in *api.ContextInput) (*api.ContextOutput, error) {
	a, err := s.Context.Assemble(ctx, r.Session(), assembly(r, in.Body, httpops.RequestID(ctx)))
	if err != nil {
		return nil, err
	}
	out := &api.ContextOutput{Body: api.ContextBody{Model: a.Model, Encoding: a.Encoding, Estimated: a.Estimated,
		MaxTokens: a.MaxTokens, Tokens: a.Tokens, Prompt: a.Prompt, Sections: a.Sections,
		KVNamespaces: a.KVNamespaces, Timings: api.ContextTiming(a.Timings)}}
	if a.Job != nil {
		j := api.ContextJob(*a.Job)
		out.Body.Job = &j
	}
	return out, nil
}

// assembly is the request as the assembler takes it: the caller's org and key, the
// request's id for the retrieval log.
func assembly(r *Request, b api.ContextRequest, requestID string) tc.Request {
	req := tc.Request{Scope: r.Scope(b.UserID, b.AgentID, b.SessionID), JobID: b.JobID, Query: b.Query,
		Model: b.Model, MaxTokens: b.MaxTokens, KVNamespaces: b.KVNamespaces, TopK: b.TopK, SimilarJobs: b.SimilarJobs,
		RecentTurns: b.RecentTurns, RecentEvents: b.RecentEvents, Trust: b.Trust, RequestID: requestID, KeyID: r.Caller.KeyID}
	if pf := b.Provenance; pf != nil {
		req.Provenance = &semantic.ProvenanceFilter{KeyIDs: pf.KeyIDs, AgentIDs: pf.AgentIDs, JobIDs: pf.JobIDs,
			ExcludeKeyIDs: pf.ExcludeKeyIDs, ExcludeAgentIDs: pf.ExcludeAgentIDs}
	}
	return req
}
