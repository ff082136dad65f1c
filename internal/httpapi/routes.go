package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
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

		// API keys (admin_keys.go).
		handle(s, adminRoles, opCreateKey, NoSubjectData, s.createKey) // POST /v1/admin/keys
		handle(s, adminRoles, opListKeys, NoSubjectData, s.listKeys)   // GET /v1/admin/keys
		handle(s, adminRoles, opRevokeKey, NoSubjectData, s.revokeKey) // DELETE /v1/admin/keys/{id}

		// Audit log (audit.go).
		handle(s, complianceRoles, opListAudit, NoSubjectData, s.listAudit)     // GET /v1/audit
		handle(s, complianceRoles, opVerifyAudit, NoSubjectData, s.verifyAudit) // GET /v1/audit/verify
		handle(s, complianceRoles, opAnchorAudit, NoSubjectData, s.anchorAudit) // POST /v1/audit/anchors
		handle(s, complianceRoles, opListAnchors, NoSubjectData, s.listAnchors) // GET /v1/audit/anchors
		handle(s, complianceRoles, opExportAudit, NoSubjectData, s.exportAudit) // GET /v1/audit/export

		// Key-value memory (keyvalue.go).
		handle(s, agentRoles, opPutKv, NoSubjectData, s.putKv)         // PUT /v1/kv/{namespace}/{key}
		handle(s, agentRoles, opGetKv, SubjectData, s.getKv)           // GET /v1/kv/{namespace}/{key}
		handle(s, agentRoles, opDeleteKv, NoSubjectData, s.deleteKv)   // DELETE /v1/kv/{namespace}/{key}
		handle(s, agentRoles, opKvHistory, SubjectData, s.kvHistory)   // GET /v1/kv/{namespace}/{key}/history
		handle(s, agentRoles, opRestoreKv, NoSubjectData, s.restoreKv) // POST /v1/kv/{namespace}/{key}/restore
		handle(s, agentRoles, opListKv, SubjectData, s.listKv)         // GET /v1/kv/{namespace}
		handle(s, agentRoles, opBatchGetKv, SubjectData, s.batchGetKv) // POST /v1/kv/{namespace}/batch-get

		// Working memory: session state and turns (working.go).
		handle(s, agentRoles, opPutSessionState, NoSubjectData, s.putSessionState)       // PUT /v1/sessions/{session}/state
		handle(s, agentRoles, opPatchSessionState, NoSubjectData, s.patchSessionState)   // PATCH /v1/sessions/{session}/state
		handle(s, agentRoles, opGetSessionState, SubjectData, s.getSessionState)         // GET /v1/sessions/{session}/state
		handle(s, agentRoles, opDeleteSession, NoSubjectData, s.deleteSession)           // DELETE /v1/sessions/{session}/state
		handle(s, agentRoles, opPostSessionMessage, NoSubjectData, s.postSessionMessage) // POST /v1/sessions/{session}/messages
		handle(s, agentRoles, opListSessionMessages, SubjectData, s.listSessionMessages) // GET /v1/sessions/{session}/messages
		handle(s, agentRoles, opSessionExtraction, SubjectData, s.sessionExtraction)     // GET /v1/sessions/{session}/extraction

		// Episodic log (episodic.go).
		handle(s, agentRoles, opAppendEvents, NoSubjectData, s.appendEvents)  // POST /v1/jobs/{job}/events
		handle(s, agentRoles, opListEvents, JobSubjectData, s.listEvents)     // GET /v1/jobs/{job}/events
		handle(s, agentRoles, opEventApplied, JobSubjectData, s.eventApplied) // GET /v1/jobs/{job}/applied
		handle(s, agentRoles, opRevertEvent, NoSubjectData, s.revertEvent)    // POST /v1/jobs/{job}/events/{seq}/revert
		// The raw body of an append is documented as what it is: an event or an array of events.
		if pi := s.api.OpenAPI().Paths["/v1/jobs/{job}/events"]; pi != nil && pi.Post != nil && pi.Post.RequestBody != nil {
			pi.Post.RequestBody.Required = true
			pi.Post.RequestBody.Content = map[string]*huma.MediaType{
				"application/json": {Schema: appendBodySchema(s.api.OpenAPI().Components.Schemas)}}
		}

		// Assets (assets.go).
		handle(s, agentRoles, opPutAsset, NoSubjectData, s.putAsset)                 // PUT /v1/assets/{asset}
		handle(s, agentRoles, opGetAsset, SubjectData, s.getAsset)                   // GET /v1/assets/{asset}
		handle(s, agentRoles, opAddAssetVersion, NoSubjectData, s.addAssetVersion)   // POST /v1/assets/{asset}/versions
		handle(s, agentRoles, opListAssetVersions, SubjectData, s.listAssetVersions) // GET /v1/assets/{asset}/versions

		// Durable jobs: records, checkpoints, steps, resume, handoffs (jobs.go).
		handle(s, agentRoles, opPutJob, NoSubjectData, s.putJob)                    // PUT /v1/jobs/{job}
		handle(s, agentRoles, opGetJob, SubjectData, s.getJob)                      // GET /v1/jobs/{job}
		handle(s, agentRoles, opListJobs, FilteredSubjectData, s.listJobs)          // GET /v1/jobs
		handle(s, agentRoles, opCompleteJob, NoSubjectData, s.completeJob)          // POST /v1/jobs/{job}/complete
		handle(s, agentRoles, opPutCheckpoint, NoSubjectData, s.putCheckpoint)      // PUT /v1/jobs/{job}/checkpoint
		handle(s, agentRoles, opListCheckpoints, JobSubjectData, s.listCheckpoints) // GET /v1/jobs/{job}/checkpoints
		handle(s, agentRoles, opGetCheckpoint, JobSubjectData, s.getCheckpoint)     // GET /v1/jobs/{job}/checkpoints/{version}
		handle(s, agentRoles, opForkCheckpoint, NoSubjectData, s.forkCheckpoint)    // POST /v1/jobs/{job}/checkpoints/{version}/fork
		handle(s, agentRoles, opStartStep, NoSubjectData, s.startStep)              // POST /v1/jobs/{job}/steps/{step}/start
		handle(s, agentRoles, opHeartbeatStep, NoSubjectData, s.heartbeatStep)      // POST /v1/jobs/{job}/steps/{step}/heartbeat
		handle(s, agentRoles, opCompleteStep, NoSubjectData, s.completeStep)        // POST /v1/jobs/{job}/steps/{step}/complete
		handle(s, agentRoles, opFailStep, NoSubjectData, s.failStep)                // POST /v1/jobs/{job}/steps/{step}/fail
		handle(s, adminRoles, opClearStep, NoSubjectData, s.clearStep)              // POST /v1/jobs/{job}/steps/{step}/clear
		handle(s, agentRoles, opGetStep, JobSubjectData, s.getStep)                 // GET /v1/jobs/{job}/steps/{step}
		handle(s, agentRoles, opListSteps, JobSubjectData, s.listSteps)             // GET /v1/jobs/{job}/steps
		handle(s, agentRoles, opResumeJob, SubjectData, s.resumeJob)                // GET /v1/jobs/{job}/resume
		handle(s, agentRoles, opCreateHandoff, NoSubjectData, s.createHandoff)      // POST /v1/jobs/{job}/handoffs
		handle(s, agentRoles, opListHandoffs, JobSubjectData, s.listHandoffs)       // GET /v1/jobs/{job}/handoffs
		handle(s, agentRoles, opAckHandoff, NoSubjectData, s.ackHandoff)            // POST /v1/jobs/{job}/handoffs/{id}/ack

		// Semantic memory (memories.go).
		handle(s, agentRoles, opCreateMemory, NoSubjectData, s.createMemory)         // POST /v1/memories
		handle(s, agentRoles, opSearchMemories, ScopedSubjectData, s.searchMemories) // POST /v1/memories/search
		handle(s, agentRoles, opSimilarJobs, ScopedSubjectData, s.similarJobs)       // POST /v1/jobs/similar
		handle(s, agentRoles, opGetMemory, SubjectData, s.getMemory)                 // GET /v1/memories/{id}
		handle(s, agentRoles, opUpdateMemory, NoSubjectData, s.updateMemory)         // PATCH /v1/memories/{id}
		handle(s, agentRoles, opDeleteMemory, NoSubjectData, s.deleteMemory)         // DELETE /v1/memories/{id}
		handle(s, agentRoles, opMemoryHistory, SubjectData, s.memoryHistory)         // GET /v1/memories/{id}/history
		handle(s, agentRoles, opVerifyMemory, NoSubjectData, s.verifyMemory)         // POST /v1/memories/{id}/verify
		handle(s, agentRoles, opMemoryRetrievals, SubjectData, s.memoryRetrievals)   // GET /v1/memories/{id}/retrievals
		handle(s, agentRoles, opExtractMemories, NoSubjectData, s.extractMemories)   // POST /v1/memories/extract
		handle(s, agentRoles, opMemoryProvenance, SubjectData, s.memoryProvenance)   // GET /v1/memories/{id}/provenance

		// LangGraph checkpointer (langgraph.go).
		handle(s, agentRoles, opPutLanggraphCheckpoint, NoSubjectData, s.putLanggraphCheckpoint)               // POST /v1/jobs/{job}/langgraph/checkpoints
		handle(s, agentRoles, opPutLanggraphWrites, NoSubjectData, s.putLanggraphWrites)                       // POST /v1/jobs/{job}/langgraph/writes
		handle(s, agentRoles, opGetLanggraphCheckpoint, JobSubjectData, s.getLanggraphCheckpoint)              // GET /v1/jobs/{job}/langgraph/checkpoint
		handle(s, agentRoles, opListLanggraphCheckpoints, FilteredSubjectData, s.listLanggraphCheckpoints)     // GET /v1/jobs/{job}/langgraph/checkpoints
		handle(s, agentRoles, opSearchLanggraphCheckpoints, FilteredSubjectData, s.searchLanggraphCheckpoints) // GET /v1/langgraph/checkpoints
		handle(s, agentRoles, opDeleteLanggraphThread, NoSubjectData, s.deleteLanggraphThread)                 // DELETE /v1/jobs/{job}/langgraph

		// Per-turn context (context.go).
		handle(s, agentRoles, opGetContext, CheckedByHandler, s.getContext) // POST /v1/context

		// Agent tools (tools.go).
		handle(s, agentRoles, opListTools, NoSubjectData, s.listTools) // GET /v1/tools

		// Lifecycle policies (admin_policies.go).
		handle(s, adminRoles, opGetPolicies, NoSubjectData, s.getPolicies) // GET /v1/admin/policies
		handle(s, adminRoles, opPutPolicies, NoSubjectData, s.putPolicies) // PUT /v1/admin/policies

		// Lifecycle: eviction and consolidation (admin_workers.go).
		handle(s, adminRoles, opPreviewEviction, NoSubjectData, s.previewEviction)   // POST /v1/admin/eviction/preview
		handle(s, adminRoles, opRunEviction, NoSubjectData, s.runEviction)           // POST /v1/admin/eviction/run
		handle(s, adminRoles, opRunConsolidation, NoSubjectData, s.runConsolidation) // POST /v1/admin/consolidation/run

		// Compliance: erasure, export, restriction, rectification (gdpr.go).
		handle(s, complianceRoles, opCreateErasure, NoSubjectData, s.createErasure)         // POST /v1/gdpr/erasures
		handle(s, complianceRoles, opGetErasure, NoSubjectData, s.getErasure)               // GET /v1/gdpr/erasures/{id}
		handle(s, complianceRoles, opListErasures, NoSubjectData, s.listErasures)           // GET /v1/gdpr/erasures
		handle(s, complianceRoles, opExportSubject, NoSubjectData, s.exportSubject)         // GET /v1/gdpr/exports
		handle(s, complianceRoles, opRestrictSubject, NoSubjectData, s.restrictSubject)     // POST /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, opUnrestrictSubject, NoSubjectData, s.unrestrictSubject) // DELETE /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, opGetRestriction, NoSubjectData, s.getRestriction)       // GET /v1/gdpr/restrictions/{user}
		handle(s, complianceRoles, opRectify, NoSubjectData, s.rectify)                     // POST /v1/gdpr/rectifications

		// Quarantines of poisoned memories (quarantine.go).
		handle(s, adminRoles, opCreateQuarantine, NoSubjectData, s.createQuarantine)               // POST /v1/admin/quarantines
		handle(s, adminRoles, opListQuarantines, NoSubjectData, s.listQuarantines)                 // GET /v1/admin/quarantines
		handle(s, adminRoles, opGetQuarantine, NoSubjectData, s.getQuarantine)                     // GET /v1/admin/quarantines/{id}
		handle(s, adminRoles, opListQuarantinedMemories, NoSubjectData, s.listQuarantinedMemories) // GET /v1/admin/quarantines/{id}/memories
		handle(s, adminRoles, opReleaseQuarantine, NoSubjectData, s.releaseQuarantine)             // POST /v1/admin/quarantines/{id}/release
		handle(s, adminRoles, opPurgeQuarantine, NoSubjectData, s.purgeQuarantine)                 // POST /v1/admin/quarantines/{id}/purge
	})
}
