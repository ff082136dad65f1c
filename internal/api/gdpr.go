package api

import (
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/gdpr"
)

// ---- wire types ----------------------------------------------------------------------------

type CreateErasureInput struct {
	Body struct {
		UserID string `json:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject to erase."`
		Reason string `json:"reason,omitempty" maxLength:"1000" doc:"Why (e.g. the ticket of the subject's request). Kept with the request, never in the audit log."`
	}
}

type ErasureOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     gdpr.Erasure
}

type ErasureIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F-]{36}$" doc:"The erasure request id."`
}

type ListErasuresInput struct {
	UserID string `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this subject's requests (matched through the pseudonym)."`
	Page
}

type ListErasuresOutput struct {
	Body List[gdpr.Erasure]
}

type ExportInput struct {
	UserID string `query:"user_id" required:"true" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
}

type RestrictionInput struct {
	User string `path:"user" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
}

type RestrictInput struct {
	User string `path:"user" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
	Body *struct {
		Reason string `json:"reason,omitempty" maxLength:"1000" doc:"Why (e.g. the subject contests accuracy, Art. 18(1)(a))."`
	}
}

type RestrictionOutput struct {
	Status int
	Body   gdpr.Restriction
}

type RectifyMemoryBody struct {
	ID       string         `json:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The memory (its current version)."`
	Text     *string        `json:"text,omitempty" minLength:"1" maxLength:"16384" doc:"The corrected text (re-embedded)."`
	Metadata map[string]any `json:"metadata,omitempty" doc:"Replaces the metadata object."`
}

type RectifyKVBody struct {
	Namespace string          `json:"namespace" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	Key       string          `json:"key" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	AgentID   string          `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"For an entry at agent level."`
	SessionID string          `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"For an entry at session level."`
	Value     json.RawMessage `json:"value" doc:"The corrected value."`
}

type RectifyInput struct {
	Body struct {
		UserID string             `json:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject on whose behalf the record is corrected."`
		Reason string             `json:"reason,omitempty" maxLength:"1000" doc:"Kept on the corrected record (never in the audit log)."`
		Memory *RectifyMemoryBody `json:"memory,omitempty" doc:"A memory to correct (exactly one of memory, kv)."`
		KV     *RectifyKVBody     `json:"kv,omitempty" doc:"A key-value entry to correct (exactly one of memory, kv)."`
	}
}

type RectifyOutput struct {
	Body gdpr.Rectification
}

// ---- operations -----------------------------------------------------------------------------

var OpCreateErasure = huma.Operation{
	OperationID: "create-erasure", Method: http.MethodPost, Path: "/v1/gdpr/erasures", Tags: []string{"compliance"},
	Summary: "Erase a data subject everywhere (GDPR Art. 17)", DefaultStatus: http.StatusAccepted,
	Description: "Records the request (deadline: received + 30 days) and queues a background job that erases the " +
		"subject from every tier — Redis working state and caches, jobs, checkpoints, steps, events, assets, key-value " +
		"entries and history, memories with their vectors and history, retrieval logs, stored idempotent responses, " +
		"queued jobs naming the subject — then re-queries every tier. Poll the Location for status and the receipt. " +
		"Resumable: a killed server's erasure continues after restart. Data written for the subject after the erasure " +
		"completed is not erased by it.",
}

var OpGetErasure = huma.Operation{
	OperationID: "get-erasure", Method: http.MethodGet, Path: "/v1/gdpr/erasures/{id}", Tags: []string{"compliance"},
	Summary: "An erasure's status and receipt",
	Description: "status (pending, running, completed), started/finished times, counts of what was removed per tier, " +
		"and the verification: every tier re-queried after the erasure, with what it found (zero when clean).",
}

var OpListErasures = huma.Operation{
	OperationID: "list-erasures", Method: http.MethodGet, Path: "/v1/gdpr/erasures", Tags: []string{"compliance"},
	Summary: "List erasure requests (newest first)",
}

var OpExportSubject = huma.Operation{
	OperationID: "export-subject", Method: http.MethodGet, Path: "/v1/gdpr/exports", Tags: []string{"compliance"},
	Summary: "Export everything held about a data subject (GDPR Art. 15)",
	Description: "Streams application/x-ndjson: a header line ({\"type\":\"export\",...}), one line per record " +
		"({\"tier\",\"type\",\"id\",\"data\",\"provenance\"}: which key/agent wrote it, when, from which job) across " +
		"working memory, jobs, checkpoints, steps, handoffs, events, assets, key-value entries and history, memories " +
		"(every version; vectors are not exported, their embedding space is), retrieval logs, stored responses, the " +
		"subject's audit records and GDPR requests, then a summary line with counts per type. One consistent snapshot, " +
		"read row by row: memory stays bounded however much the subject has. Allowed while processing is restricted.",
	Responses: map[string]*huma.Response{"200": {Description: "NDJSON stream",
		Content: map[string]*huma.MediaType{"application/x-ndjson": {Schema: &huma.Schema{Type: "string"}}}}},
}

var OpRestrictSubject = huma.Operation{
	OperationID: "restrict-subject", Method: http.MethodPost, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Restrict processing of a subject's data (GDPR Art. 18)", DefaultStatus: http.StatusCreated,
	Description: "The subject's data is kept but excluded from memory search, context and similar-jobs results, and " +
		"every agent read of it (sessions, jobs and their checkpoints/steps/events/handoffs, assets, key-value " +
		"entries, memories) answers 403. Compliance can still export it. 201 when new, 200 when already restricted.",
}

var OpUnrestrictSubject = huma.Operation{
	OperationID: "unrestrict-subject", Method: http.MethodDelete, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Lift a restriction of processing", Description: "404 when the subject was not restricted.",
}

var OpGetRestriction = huma.Operation{
	OperationID: "get-restriction", Method: http.MethodGet, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Whether processing of a subject's data is restricted",
}

var OpRectify = huma.Operation{
	OperationID: "rectify", Method: http.MethodPost, Path: "/v1/gdpr/rectifications", Tags: []string{"compliance"},
	Summary: "Correct a memory or key-value entry on the subject's behalf (GDPR Art. 16)",
	Description: "Exactly one of memory, kv. The record must belong to user_id. A memory gets a new version (the " +
		"old one stays in its history, superseded) whose metadata.rectification records when, by which key and why, " +
		"and whose provenance agent is gdpr:rectification; a key-value entry gets a new version with history op " +
		"rectify. Both are recorded in the audit log as action rectification with the subject's pseudonym.",
}
