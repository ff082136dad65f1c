package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/strata"
)

type listAuditInput struct {
	Action     string    `query:"action" maxLength:"200" doc:"Operation id, e.g. create-key."`
	EntityType string    `query:"entity_type" maxLength:"200"`
	EntityID   string    `query:"entity_id" maxLength:"1000"`
	ActorKeyID string    `query:"actor_key_id" maxLength:"200"`
	AgentID    string    `query:"agent_id" maxLength:"200"`
	UserID     string    `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject; matched through its pseudonym."`
	Since      time.Time `query:"since" doc:"RFC 3339; inclusive."`
	Until      time.Time `query:"until" doc:"RFC 3339; exclusive."`
	Page
}

type listAuditOutput struct {
	Body List[audit.Record]
}

type verifyAuditOutput struct {
	Body audit.Report
}

var opListAudit = huma.Operation{
	OperationID: "list-audit", Method: http.MethodGet, Path: "/v1/audit", Tags: []string{"compliance"},
	Summary: "Read the audit log",
	Description: "Every write and compliance action of the caller's org, oldest first. Data subjects appear only " +
		"as keyed pseudonyms; filter by user_id to find a subject's records.",
}

func (s *Server) listAudit(ctx context.Context, r *Request, in *listAuditInput) (*listAuditOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	after, err := audit.ParseCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	f := audit.Filter{Action: in.Action, EntityType: in.EntityType, EntityID: in.EntityID, ActorKeyID: in.ActorKeyID,
		AgentID: in.AgentID, Subject: s.pseudo.Subject(r.Org, in.UserID), AfterID: after, Limit: limit + 1}
	if in.UserID != "" && f.Subject == "" {
		return nil, strata.Invalid("user_id", "cannot be pseudonymised")
	}
	if !in.Since.IsZero() {
		f.Since = &in.Since
	}
	if !in.Until.IsZero() {
		f.Until = &in.Until
	}
	recs, err := audit.List(ctx, r.Tx, r.Org, f)
	if err != nil {
		return nil, err
	}
	return &listAuditOutput{Body: page(recs, limit, func(r audit.Record) string { return strconv.FormatInt(r.ID, 10) })}, nil
}

var opVerifyAudit = huma.Operation{
	OperationID: "verify-audit", Method: http.MethodGet, Path: "/v1/audit/verify", Tags: []string{"compliance"},
	Summary: "Verify the audit log's hash chain",
	Description: "Chains any pending records, then walks the org's chain recomputing every hash. " +
		"first_broken names the first record that was edited or removed.",
}

func (s *Server) verifyAudit(ctx context.Context, r *Request, in *struct{}) (*verifyAuditOutput, error) {
	if _, err := audit.ChainOrg(ctx, s.pool, r.Org); err != nil {
		return nil, err
	}
	rep, err := audit.Verify(ctx, r.Tx, r.Org)
	if err != nil {
		return nil, err
	}
	return &verifyAuditOutput{Body: rep}, nil
}
