package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// ---- wire types ----------------------------------------------------------------------------

type createErasureInput struct {
	Body struct {
		UserID string `json:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject to erase."`
		Reason string `json:"reason,omitempty" maxLength:"1000" doc:"Why (e.g. the ticket of the subject's request). Kept with the request, never in the audit log."`
	}
}

type erasureOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     gdpr.Erasure
}

type erasureIDInput struct {
	ID string `path:"id" pattern:"^[0-9a-fA-F-]{36}$" doc:"The erasure request id."`
}

type listErasuresInput struct {
	UserID string `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this subject's requests (matched through the pseudonym)."`
	Page
}

type listErasuresOutput struct {
	Body List[gdpr.Erasure]
}

type exportInput struct {
	UserID string `query:"user_id" required:"true" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
}

type restrictionInput struct {
	User string `path:"user" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
}

type restrictInput struct {
	User string `path:"user" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject."`
	Body *struct {
		Reason string `json:"reason,omitempty" maxLength:"1000" doc:"Why (e.g. the subject contests accuracy, Art. 18(1)(a))."`
	}
}

type restrictionOutput struct {
	Status int
	Body   gdpr.Restriction
}

type rectifyMemoryBody struct {
	ID       string         `json:"id" pattern:"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" doc:"The memory (its current version)."`
	Text     *string        `json:"text,omitempty" minLength:"1" maxLength:"16384" doc:"The corrected text (re-embedded)."`
	Metadata map[string]any `json:"metadata,omitempty" doc:"Replaces the metadata object."`
}

type rectifyKVBody struct {
	Namespace string          `json:"namespace" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	Key       string          `json:"key" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	AgentID   string          `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"For an entry at agent level."`
	SessionID string          `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"For an entry at session level."`
	Value     json.RawMessage `json:"value" doc:"The corrected value."`
}

type rectifyInput struct {
	Body struct {
		UserID string             `json:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The data subject on whose behalf the record is corrected."`
		Reason string             `json:"reason,omitempty" maxLength:"1000" doc:"Kept on the corrected record (never in the audit log)."`
		Memory *rectifyMemoryBody `json:"memory,omitempty" doc:"A memory to correct (exactly one of memory, kv)."`
		KV     *rectifyKVBody     `json:"kv,omitempty" doc:"A key-value entry to correct (exactly one of memory, kv)."`
	}
}

type rectifyOutput struct {
	Body gdpr.Rectification
}

// ---- routes ---------------------------------------------------------------------------------

var opCreateErasure = huma.Operation{
	OperationID: "create-erasure", Method: http.MethodPost, Path: "/v1/gdpr/erasures", Tags: []string{"compliance"},
	Summary: "Erase a data subject everywhere (GDPR Art. 17)", DefaultStatus: http.StatusAccepted,
	Description: "Records the request (deadline: received + 30 days) and queues a background job that erases the " +
		"subject from every tier — Redis working state and caches, jobs, checkpoints, steps, events, assets, key-value " +
		"entries and history, memories with their vectors and history, retrieval logs, stored idempotent responses, " +
		"queued jobs naming the subject — then re-queries every tier. Poll the Location for status and the receipt. " +
		"Resumable: a killed server's erasure continues after restart. Data written for the subject after the erasure " +
		"completed is not erased by it.",
}

func (s *Server) createErasure(ctx context.Context, r *Request, in *createErasureInput) (*erasureOutput, error) {
	p := r.Caller
	e, err := gdpr.CreateErasure(ctx, r.Tx, s.erasures, gdpr.NewErasure{OrgID: p.OrgID, UserID: in.Body.UserID,
		Subject: s.pseudo.Subject(p.OrgID, in.Body.UserID), RequestedBy: p.KeyID, RequestID: requestID(ctx),
		Reason: in.Body.Reason, At: s.now()})
	if err != nil {
		return nil, err
	}
	return &erasureOutput{Status: http.StatusAccepted, Location: "/v1/gdpr/erasures/" + e.ID, Body: e}, nil
}

var opGetErasure = huma.Operation{
	OperationID: "get-erasure", Method: http.MethodGet, Path: "/v1/gdpr/erasures/{id}", Tags: []string{"compliance"},
	Summary: "An erasure's status and receipt",
	Description: "status (pending, running, completed), started/finished times, counts of what was removed per tier, " +
		"and the verification: every tier re-queried after the erasure, with what it found (zero when clean).",
}

func (s *Server) getErasure(ctx context.Context, r *Request, in *erasureIDInput) (*erasureOutput, error) {
	e, err := gdpr.GetErasure(ctx, r.Tx, r.Org, strings.ToLower(in.ID))
	if err != nil {
		return nil, err
	}
	return &erasureOutput{Status: http.StatusOK, Body: e}, nil
}

var opListErasures = huma.Operation{
	OperationID: "list-erasures", Method: http.MethodGet, Path: "/v1/gdpr/erasures", Tags: []string{"compliance"},
	Summary: "List erasure requests (newest first)",
}

func (s *Server) listErasures(ctx context.Context, r *Request, in *listErasuresInput) (*listErasuresOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	es, err := gdpr.ListErasures(ctx, r.Tx, r.Org, s.pseudo.Subject(r.Org, in.UserID), in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &listErasuresOutput{Body: page(es, limit, func(e gdpr.Erasure) string { return e.ID })}, nil
}

var opExportSubject = huma.Operation{
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

func (s *Server) exportSubject(ctx context.Context, r *Request, in *exportInput) (*huma.StreamResponse, error) {
	p := r.Caller
	org, user := p.OrgID, in.UserID
	subject := s.pseudo.Subject(org, user)
	// An export is a read (its transaction rolls back), so its audit record commits on
	// its own, before anything is sent.
	if err := pg.InOrgTx(ctx, s.pool, org, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: p.KeyID, ActorRole: string(p.Role),
			Action: "export-subject", EntityType: "gdpr.export", RequestID: requestID(ctx), Subject: subject, Status: 200})
	}); err != nil {
		return nil, err
	}
	// A large export outlives STRATA_REQUEST_TIMEOUT and the pool's statement timeout (a
	// streamed statement lasts as long as the client reads): it runs until it is done or
	// the client goes away (a write fails), in one snapshot.
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	etx, err := pg.BeginReadSnapshot(ectx, s.readPool(ctx), org)
	if err != nil && s.retryOnPrimary(ctx, err) {
		etx, err = pg.BeginReadSnapshot(ectx, s.pool, org)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	restriction, err := gdpr.GetRestriction(ectx, etx, org, user)
	if err != nil {
		_ = etx.Rollback(ectx)
		cancel()
		return nil, err
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		defer cancel()
		defer etx.Rollback(ectx) //nolint:errcheck
		hc.SetHeader("Content-Type", "application/x-ndjson")
		hc.SetHeader("Content-Disposition", `attachment; filename="strata-export.ndjson"`)
		hc.SetStatus(http.StatusOK)
		w := hc.BodyWriter()
		sum, err := gdpr.Export(ectx, etx, s.working, gdpr.ExportHeader{OrgID: org, UserID: user, Subject: subject, Previous: s.pseudo.Subjects(org, user)[1:],
			GeneratedAt: s.now().UTC(), Restricted: restriction.Restricted}, w)
		if err != nil {
			// The status is sent; say so in the stream (no summary line follows).
			s.log.ErrorContext(ctx, "export failed", "err", err, "request_id", requestID(ctx), "records", sum.Records)
			b, _ := json.Marshal(map[string]any{"type": "error", "detail": "the export failed after " +
				fmt.Sprint(sum.Records) + " records; retry (report X-Request-Id " + requestID(ctx) + ")"})
			_, _ = w.Write(append(b, '\n'))
		}
	}}, nil
}

var opRestrictSubject = huma.Operation{
	OperationID: "restrict-subject", Method: http.MethodPost, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Restrict processing of a subject's data (GDPR Art. 18)", DefaultStatus: http.StatusCreated,
	Description: "The subject's data is kept but excluded from memory search, context and similar-jobs results, and " +
		"every agent read of it (sessions, jobs and their checkpoints/steps/events/handoffs, assets, key-value " +
		"entries, memories) answers 403. Compliance can still export it. 201 when new, 200 when already restricted.",
}

func (s *Server) restrictSubject(ctx context.Context, r *Request, in *restrictInput) (*restrictionOutput, error) {
	reason := ""
	if in.Body != nil {
		reason = in.Body.Reason
	}
	p := r.Caller
	res, created, err := gdpr.Restrict(ctx, r.Tx, p.OrgID, in.User, p.KeyID, reason, s.now())
	if err != nil {
		return nil, err
	}
	s.restrictions.ForgetAfterCommit(r.Session(), r.Org)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &restrictionOutput{Status: status, Body: res}, nil
}

var opUnrestrictSubject = huma.Operation{
	OperationID: "unrestrict-subject", Method: http.MethodDelete, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Lift a restriction of processing", Description: "404 when the subject was not restricted.",
}

func (s *Server) unrestrictSubject(ctx context.Context, r *Request, in *restrictionInput) (*restrictionOutput, error) {
	if err := gdpr.Unrestrict(ctx, r.Tx, r.Org, in.User); err != nil {
		return nil, err
	}
	s.restrictions.ForgetAfterCommit(r.Session(), r.Org)
	return &restrictionOutput{Status: http.StatusOK, Body: gdpr.Restriction{UserID: in.User}}, nil
}

var opGetRestriction = huma.Operation{
	OperationID: "get-restriction", Method: http.MethodGet, Path: "/v1/gdpr/restrictions/{user}", Tags: []string{"compliance"},
	Summary: "Whether processing of a subject's data is restricted",
}

func (s *Server) getRestriction(ctx context.Context, r *Request, in *restrictionInput) (*restrictionOutput, error) {
	res, err := gdpr.GetRestriction(ctx, r.Tx, r.Org, in.User)
	if err != nil {
		return nil, err
	}
	return &restrictionOutput{Status: http.StatusOK, Body: res}, nil
}

var opRectify = huma.Operation{
	OperationID: "rectify", Method: http.MethodPost, Path: "/v1/gdpr/rectifications", Tags: []string{"compliance"},
	Summary: "Correct a memory or key-value entry on the subject's behalf (GDPR Art. 16)",
	Description: "Exactly one of memory, kv. The record must belong to user_id. A memory gets a new version (the " +
		"old one stays in its history, superseded) whose metadata.rectification records when, by which key and why, " +
		"and whose provenance agent is gdpr:rectification; a key-value entry gets a new version with history op " +
		"rectify. Both are recorded in the audit log as action rectification with the subject's pseudonym.",
}

func (s *Server) rectify(ctx context.Context, r *Request, in *rectifyInput) (*rectifyOutput, error) {
	b := in.Body
	if (b.Memory == nil) == (b.KV == nil) {
		return nil, strata.Invalid("body", "give exactly one of memory, kv")
	}
	req := gdpr.RectifyRequest{OrgID: r.Org, UserID: b.UserID, Reason: b.Reason, KeyID: r.Caller.KeyID,
		Role: string(r.Caller.Role), RequestID: requestID(ctx), At: s.now()}
	if m := b.Memory; m != nil {
		req.Memory = &gdpr.MemoryCorrection{ID: m.ID, Text: m.Text, Metadata: m.Metadata}
	} else {
		k := b.KV
		req.KV = &gdpr.KVCorrection{Namespace: k.Namespace, Key: k.Key, AgentID: k.AgentID, SessionID: k.SessionID, Value: k.Value}
	}
	rf := gdpr.Rectifier{Memories: s.memories, KV: s.kv, Embed: s.embedOne, Space: s.space, Pseudo: s.pseudo}
	out, err := rf.Rectify(ctx, r.Tx, r.AfterCommit, req)
	if err != nil {
		return nil, err
	}
	return &rectifyOutput{Body: out}, nil
}
