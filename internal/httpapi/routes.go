package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/httpops"
)

// routes is the whole API, top to bottom.
func (s *Server) routes() {
	r := s.router
	r.Use(httpops.WithRequestID)
	if s.Trace != nil { // after the request id (a span attribute), before the access log (which logs the trace id)
		r.Use(s.Trace)
	}
	r.Use(httpops.Observe(s.Log, s.metrics, s.Options.RequestTimeout))
	r.Use(httpops.SecurityHeaders) // nosniff everywhere; outside the console, a CSP that allows nothing
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		httpops.WriteProblem(w, r, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path, nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		httpops.WriteProblem(w, r, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path, nil)
	})

	// Operations: unauthenticated.
	r.Get("/healthz", httpops.Healthz)
	r.Get("/readyz", httpops.Readyz(s.Pool, s.Redis, s.Draining))
	r.Handle("/metrics", s.metrics.Handler())
	r.Get("/openapi.json", s.serveOpenAPI)

	// Profiling: admin keys only.
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		httpops.Pprof(r)
	})

	// MCP (tools.go): authenticated; each tool call is dispatched to the API below.
	s.mountMCP(r)

	// The web console (console.go, internal/console): its own sessions; actions call the API below.
	s.mountConsole(r)

	// The live event stream (events.go, docs/events.md): authenticated, Server-Sent Events
	// read from the outbox in short transactions of its own (no unit of work: it is long-lived).
	r.With(s.authenticate, s.limiter.Middleware, httpops.CheckQuery).Get("/v1/events/stream", s.streamEvents)

	// The Mem0-compatible API (console.go, internal/mem0): translated into calls of the API below.
	s.mountMem0(r)

	// The API: authenticated, one unit of work per request.
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.limiter.Middleware, s.readRouting, httpops.CheckQuery, s.unitOfWork)
		s.api = humachi.New(r, newHumaConfig())
		streamDoc := api.OpStreamEvents          // a copy: operation docs are never mutated
		s.api.OpenAPI().AddOperation(&streamDoc) // served above, outside the unit of work

		// API keys (admin_keys.go).
		handle(s, adminRoles, api.OpCreateKey, NoSubjectData, s.createKey) // POST /v1/admin/keys
		handle(s, adminRoles, api.OpListKeys, NoSubjectData, s.listKeys)   // GET /v1/admin/keys
		handle(s, adminRoles, api.OpRevokeKey, NoSubjectData, s.revokeKey) // DELETE /v1/admin/keys/{id}

		// Webhooks (webhooks.go, docs/events.md).
		handle(s, adminRoles, api.OpCreateWebhook, NoSubjectData, s.createWebhook)                 // POST /v1/admin/webhooks
		handle(s, adminRoles, api.OpListWebhooks, NoSubjectData, s.listWebhooks)                   // GET /v1/admin/webhooks
		handle(s, adminRoles, api.OpGetWebhook, NoSubjectData, s.getWebhook)                       // GET /v1/admin/webhooks/{id}
		handle(s, adminRoles, api.OpUpdateWebhook, NoSubjectData, s.updateWebhook)                 // PATCH /v1/admin/webhooks/{id}
		handle(s, adminRoles, api.OpDeleteWebhook, NoSubjectData, s.deleteWebhook)                 // DELETE /v1/admin/webhooks/{id}
		handle(s, adminRoles, api.OpListWebhookDeliveries, NoSubjectData, s.listWebhookDeliveries) // GET /v1/admin/webhooks/{id}/deliveries
		handle(s, adminRoles, api.OpRedeliverWebhook, NoSubjectData, s.redeliverWebhook)           // POST /v1/admin/webhooks/{id}/deliveries/{delivery}/redeliver
		handle(s, adminRoles, api.OpPingWebhook, NoSubjectData, s.pingWebhook)                     // POST /v1/admin/webhooks/{id}/ping
		handle(s, adminRoles, api.OpRotateWebhookSecret, NoSubjectData, s.rotateWebhookSecret)     // POST /v1/admin/webhooks/{id}/rotate-secret

		// Audit log (audit.go).
		handle(s, complianceRoles, api.OpListAudit, NoSubjectData, s.listAudit)     // GET /v1/audit
		handle(s, complianceRoles, api.OpVerifyAudit, NoSubjectData, s.verifyAudit) // GET /v1/audit/verify
		handle(s, complianceRoles, api.OpAnchorAudit, NoSubjectData, s.anchorAudit) // POST /v1/audit/anchors
		handle(s, complianceRoles, api.OpListAnchors, NoSubjectData, s.listAnchors) // GET /v1/audit/anchors
		handle(s, complianceRoles, api.OpExportAudit, NoSubjectData, s.exportAudit) // GET /v1/audit/export

		// Key-value memory (keyvalue.go).
		handle(s, agentRoles, api.OpPutKv, ActsOnSubjectData, s.putKv)         // PUT /v1/kv/{namespace}/{key}
		handle(s, agentRoles, api.OpGetKv, SubjectData, s.getKv)               // GET /v1/kv/{namespace}/{key}
		handle(s, agentRoles, api.OpDeleteKv, ActsOnSubjectData, s.deleteKv)   // DELETE /v1/kv/{namespace}/{key}
		handle(s, agentRoles, api.OpKvHistory, SubjectData, s.kvHistory)       // GET /v1/kv/{namespace}/{key}/history
		handle(s, agentRoles, api.OpRestoreKv, ActsOnSubjectData, s.restoreKv) // POST /v1/kv/{namespace}/{key}/restore
		handle(s, agentRoles, api.OpListKv, SubjectData, s.listKv)             // GET /v1/kv/{namespace}
		handle(s, agentRoles, api.OpBatchGetKv, SubjectData, s.batchGetKv)     // POST /v1/kv/{namespace}/batch-get

		// Working memory: session state and turns (working.go).
		handle(s, agentRoles, api.OpPutSessionState, ActsOnSubjectData, s.putSessionState)     // PUT /v1/sessions/{session}/state
		handle(s, agentRoles, api.OpPatchSessionState, ActsOnSubjectData, s.patchSessionState) // PATCH /v1/sessions/{session}/state
		handle(s, agentRoles, api.OpGetSessionState, SubjectData, s.getSessionState)           // GET /v1/sessions/{session}/state
		handle(s, agentRoles, api.OpDeleteSession, ActsOnSubjectData, s.deleteSession)         // DELETE /v1/sessions/{session}/state
		handle(s, agentRoles, api.OpPostSessionMessage, NoSubjectData, s.postSessionMessage)   // POST /v1/sessions/{session}/messages
		handle(s, agentRoles, api.OpListSessionMessages, SubjectData, s.listSessionMessages)   // GET /v1/sessions/{session}/messages
		handle(s, agentRoles, api.OpPopSessionMessage, ActsOnSubjectData, s.popSessionMessage) // POST /v1/sessions/{session}/messages/pop
		handle(s, agentRoles, api.OpSessionExtraction, SubjectData, s.sessionExtraction)       // GET /v1/sessions/{session}/extraction
		handle(s, agentRoles, api.OpListSessions, FilteredSubjectData, s.listSessions)         // GET /v1/sessions

		// Rolling summaries of sessions and long jobs (summaries.go).
		handle(s, agentRoles, api.OpSessionSummary, SubjectData, s.sessionSummary)                 // GET /v1/sessions/{session}/summary
		handle(s, agentRoles, api.OpSessionSummaryVersions, SubjectData, s.sessionSummaryVersions) // GET /v1/sessions/{session}/summary/versions
		handle(s, agentRoles, api.OpJobSummary, JobSubjectData, s.jobSummary)                      // GET /v1/jobs/{job}/summary
		handle(s, agentRoles, api.OpJobSummaryVersions, JobSubjectData, s.jobSummaryVersions)      // GET /v1/jobs/{job}/summary/versions

		// Episodic log (episodic.go).
		handle(s, agentRoles, api.OpAppendEvents, ActsOnSubjectData, s.appendEvents) // POST /v1/jobs/{job}/events
		handle(s, agentRoles, api.OpListEvents, JobSubjectData, s.listEvents)        // GET /v1/jobs/{job}/events
		handle(s, agentRoles, api.OpEventApplied, JobSubjectData, s.eventApplied)    // GET /v1/jobs/{job}/applied
		handle(s, agentRoles, api.OpRevertEvent, ActsOnSubjectData, s.revertEvent)   // POST /v1/jobs/{job}/events/{seq}/revert
		// The raw body of an append is documented as what it is: an event or an array of events.
		if pi := s.api.OpenAPI().Paths["/v1/jobs/{job}/events"]; pi != nil && pi.Post != nil && pi.Post.RequestBody != nil {
			pi.Post.RequestBody.Required = true
			pi.Post.RequestBody.Content = map[string]*huma.MediaType{
				"application/json": {Schema: api.AppendBodySchema(s.api.OpenAPI().Components.Schemas)}}
		}

		// Assets (assets.go).
		handle(s, agentRoles, api.OpPutAsset, ActsOnSubjectData, s.putAsset)               // PUT /v1/assets/{asset}
		handle(s, agentRoles, api.OpGetAsset, SubjectData, s.getAsset)                     // GET /v1/assets/{asset}
		handle(s, agentRoles, api.OpAddAssetVersion, ActsOnSubjectData, s.addAssetVersion) // POST /v1/assets/{asset}/versions
		handle(s, agentRoles, api.OpListAssetVersions, SubjectData, s.listAssetVersions)   // GET /v1/assets/{asset}/versions

		// Durable jobs: records, checkpoints, steps, resume, handoffs (jobs.go).
		handle(s, agentRoles, api.OpPutJob, ActsOnSubjectData, s.putJob)                 // PUT /v1/jobs/{job}
		handle(s, agentRoles, api.OpGetJob, SubjectData, s.getJob)                       // GET /v1/jobs/{job}
		handle(s, agentRoles, api.OpListJobs, FilteredSubjectData, s.listJobs)           // GET /v1/jobs
		handle(s, agentRoles, api.OpCompleteJob, ActsOnSubjectData, s.completeJob)       // POST /v1/jobs/{job}/complete
		handle(s, agentRoles, api.OpPutCheckpoint, ActsOnSubjectData, s.putCheckpoint)   // PUT /v1/jobs/{job}/checkpoint
		handle(s, agentRoles, api.OpListCheckpoints, JobSubjectData, s.listCheckpoints)  // GET /v1/jobs/{job}/checkpoints
		handle(s, agentRoles, api.OpGetCheckpoint, JobSubjectData, s.getCheckpoint)      // GET /v1/jobs/{job}/checkpoints/{version}
		handle(s, agentRoles, api.OpForkCheckpoint, ActsOnSubjectData, s.forkCheckpoint) // POST /v1/jobs/{job}/checkpoints/{version}/fork
		handle(s, agentRoles, api.OpStartStep, ActsOnSubjectData, s.startStep)           // POST /v1/jobs/{job}/steps/{step}/start
		handle(s, agentRoles, api.OpHeartbeatStep, ActsOnSubjectData, s.heartbeatStep)   // POST /v1/jobs/{job}/steps/{step}/heartbeat
		handle(s, agentRoles, api.OpCompleteStep, ActsOnSubjectData, s.completeStep)     // POST /v1/jobs/{job}/steps/{step}/complete
		handle(s, agentRoles, api.OpFailStep, ActsOnSubjectData, s.failStep)             // POST /v1/jobs/{job}/steps/{step}/fail
		handle(s, adminRoles, api.OpClearStep, ActsOnSubjectData, s.clearStep)           // POST /v1/jobs/{job}/steps/{step}/clear
		handle(s, agentRoles, api.OpGetStep, JobSubjectData, s.getStep)                  // GET /v1/jobs/{job}/steps/{step}
		handle(s, agentRoles, api.OpListSteps, JobSubjectData, s.listSteps)              // GET /v1/jobs/{job}/steps
		handle(s, agentRoles, api.OpListAttempts, JobSubjectData, s.listAttempts)        // GET /v1/jobs/{job}/steps/{step}/attempts
		handle(s, agentRoles, api.OpResumeJob, SubjectData, s.resumeJob)                 // GET /v1/jobs/{job}/resume
		handle(s, agentRoles, api.OpCreateHandoff, ActsOnSubjectData, s.createHandoff)   // POST /v1/jobs/{job}/handoffs
		handle(s, agentRoles, api.OpListHandoffs, JobSubjectData, s.listHandoffs)        // GET /v1/jobs/{job}/handoffs
		handle(s, agentRoles, api.OpAckHandoff, ActsOnSubjectData, s.ackHandoff)         // POST /v1/jobs/{job}/handoffs/{id}/ack

		// Semantic memory (memories.go).
		handle(s, agentRoles, api.OpCreateMemory, NoSubjectData, s.createMemory)           // POST /v1/memories
		handle(s, agentRoles, api.OpCreateMemories, NoSubjectData, s.createMemories)       // POST /v1/memories/batch
		handle(s, agentRoles, api.OpSearchMemories, ScopedSubjectData, s.searchMemories)   // POST /v1/memories/search
		handle(s, agentRoles, api.OpSimilarJobs, ScopedSubjectData, s.similarJobs)         // POST /v1/jobs/similar
		handle(s, agentRoles, api.OpListMemories, FilteredSubjectData, s.listMemories)     // GET /v1/memories
		handle(s, agentRoles, api.OpGetMemory, SubjectData, s.getMemory)                   // GET /v1/memories/{id}
		handle(s, agentRoles, api.OpUpdateMemory, ActsOnSubjectData, s.updateMemory)       // PATCH /v1/memories/{id}
		handle(s, agentRoles, api.OpDeleteMemory, ActsOnSubjectData, s.deleteMemory)       // DELETE /v1/memories/{id}
		handle(s, agentRoles, api.OpMemoryHistory, SubjectData, s.memoryHistory)           // GET /v1/memories/{id}/history
		handle(s, agentRoles, api.OpVerifyMemory, ActsOnSubjectData, s.verifyMemory)       // POST /v1/memories/{id}/verify
		handle(s, agentRoles, api.OpMemoryRetrievals, SubjectData, s.memoryRetrievals)     // GET /v1/memories/{id}/retrievals
		handle(s, agentRoles, api.OpExtractMemories, ActsOnSubjectData, s.extractMemories) // POST /v1/memories/extract
		handle(s, agentRoles, api.OpMemoryProvenance, SubjectData, s.memoryProvenance)     // GET /v1/memories/{id}/provenance

		// Graph memory: entities and relations with time (graph.go, docs/graph.md). The reads
		// by id are CheckedByHandler: the tier leaves restricted subjects' entities and
		// relations out of every answer and refuses a start among them, from the org's
		// restricted set (graphHide), in the same statements that read the graph.
		handle(s, agentRoles, api.OpSearchGraphEntities, ScopedSubjectData, s.searchGraphEntities) // GET /v1/graph/entities
		handle(s, agentRoles, api.OpResolveGraphEntity, ActsOnSubjectData, s.resolveGraphEntity)   // POST /v1/graph/entities
		handle(s, agentRoles, api.OpGetGraphEntity, CheckedByHandler, s.getGraphEntity)            // GET /v1/graph/entities/{id}
		handle(s, agentRoles, api.OpDeleteGraphEntity, ActsOnSubjectData, s.deleteGraphEntity)     // DELETE /v1/graph/entities/{id}
		handle(s, agentRoles, api.OpGraphNeighbors, CheckedByHandler, s.graphNeighbors)            // GET /v1/graph/entities/{id}/neighbors
		handle(s, agentRoles, api.OpGraphHistory, CheckedByHandler, s.graphHistory)                // GET /v1/graph/entities/{id}/history
		handle(s, adminRoles, api.OpMergeGraphEntity, ActsOnSubjectData, s.mergeGraphEntity)       // POST /v1/graph/entities/{id}/merge
		handle(s, adminRoles, api.OpSplitGraphEntity, ActsOnSubjectData, s.splitGraphEntity)       // POST /v1/graph/entities/{id}/split
		handle(s, agentRoles, api.OpAddGraphRelation, ActsOnSubjectData, s.addGraphRelation)       // POST /v1/graph/relations

		// LangGraph checkpointer (langgraph.go).
		handle(s, agentRoles, api.OpPutLanggraphCheckpoint, ActsOnSubjectData, s.putLanggraphCheckpoint)           // POST /v1/jobs/{job}/langgraph/checkpoints
		handle(s, agentRoles, api.OpPutLanggraphWrites, ActsOnSubjectData, s.putLanggraphWrites)                   // POST /v1/jobs/{job}/langgraph/writes
		handle(s, agentRoles, api.OpGetLanggraphCheckpoint, JobSubjectData, s.getLanggraphCheckpoint)              // GET /v1/jobs/{job}/langgraph/checkpoint
		handle(s, agentRoles, api.OpListLanggraphCheckpoints, FilteredSubjectData, s.listLanggraphCheckpoints)     // GET /v1/jobs/{job}/langgraph/checkpoints
		handle(s, agentRoles, api.OpSearchLanggraphCheckpoints, FilteredSubjectData, s.searchLanggraphCheckpoints) // GET /v1/langgraph/checkpoints
		handle(s, agentRoles, api.OpDeleteLanggraphThread, ActsOnSubjectData, s.deleteLanggraphThread)             // DELETE /v1/jobs/{job}/langgraph

		// Per-turn context (context.go).
		handle(s, agentRoles, api.OpGetContext, CheckedByHandler, s.getContext) // POST /v1/context

		// Agent tools (tools.go).
		handle(s, agentRoles, api.OpListTools, NoSubjectData, s.listTools) // GET /v1/tools

		// Lifecycle policies (admin_policies.go).
		handle(s, adminRoles, api.OpGetPolicies, NoSubjectData, s.getPolicies) // GET /v1/admin/policies
		handle(s, adminRoles, api.OpPutPolicies, NoSubjectData, s.putPolicies) // PUT /v1/admin/policies

		// Lifecycle: eviction and consolidation (admin_workers.go).
		handle(s, adminRoles, api.OpPreviewEviction, NoSubjectData, s.previewEviction)   // POST /v1/admin/eviction/preview
		handle(s, adminRoles, api.OpRunEviction, NoSubjectData, s.runEviction)           // POST /v1/admin/eviction/run
		handle(s, adminRoles, api.OpRunConsolidation, NoSubjectData, s.runConsolidation) // POST /v1/admin/consolidation/run

		// Compliance: erasure, export, restriction, rectification (gdpr.go).
		handle(s, complianceRoles, api.OpCreateErasure, NoSubjectData, s.createErasure)         // POST /v1/gdpr/erasures
		handle(s, complianceRoles, api.OpGetErasure, NoSubjectData, s.getErasure)               // GET /v1/gdpr/erasures/{id}
		handle(s, complianceRoles, api.OpListErasures, NoSubjectData, s.listErasures)           // GET /v1/gdpr/erasures
		handle(s, complianceRoles, api.OpExportSubject, NoSubjectData, s.exportSubject)         // GET /v1/gdpr/exports
		handle(s, complianceRoles, api.OpRestrictSubject, NoSubjectData, s.restrictSubject)     // POST /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, api.OpUnrestrictSubject, NoSubjectData, s.unrestrictSubject) // DELETE /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, api.OpGetRestriction, NoSubjectData, s.getRestriction)       // GET /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, api.OpRectify, NoSubjectData, s.rectify)                     // POST /v1/gdpr/rectifications

		// Quarantines of poisoned memories (quarantine.go).
		handle(s, adminRoles, api.OpCreateQuarantine, NoSubjectData, s.createQuarantine)               // POST /v1/admin/quarantines
		handle(s, adminRoles, api.OpListQuarantines, NoSubjectData, s.listQuarantines)                 // GET /v1/admin/quarantines
		handle(s, adminRoles, api.OpGetQuarantine, NoSubjectData, s.getQuarantine)                     // GET /v1/admin/quarantines/{id}
		handle(s, adminRoles, api.OpListQuarantinedMemories, NoSubjectData, s.listQuarantinedMemories) // GET /v1/admin/quarantines/{id}/memories
		handle(s, adminRoles, api.OpReleaseQuarantine, NoSubjectData, s.releaseQuarantine)             // POST /v1/admin/quarantines/{id}/release
		handle(s, adminRoles, api.OpPurgeQuarantine, NoSubjectData, s.purgeQuarantine)                 // POST /v1/admin/quarantines/{id}/purge
	})
}
