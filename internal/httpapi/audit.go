package httpapi

import (
	"context"
	"fmt"
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
	Subject    string    `query:"subject" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject by its audit pseudonym (as erasures and exports name it), e.g. after the user id was erased. Ignored with user_id."`
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
		AgentID: in.AgentID, Subject: s.pseudo.Subject(r.Org, in.UserID), Subjects: s.pseudo.Subjects(r.Org, in.UserID),
		AfterID: after, Limit: limit + 1}
	if in.UserID == "" && in.Subject != "" {
		f.Subject, f.Subjects = in.Subject, []string{in.Subject}
	}
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
		"first_broken names the first record that was edited or removed. Every stored anchor signed by a known key " +
		"is checked too (a chain rewritten and re-chained no longer matches its anchors); anchor names the newest one " +
		"checked and unanchored_records counts the records newer than it.",
}

func (s *Server) verifyAudit(ctx context.Context, r *Request, in *struct{}) (*verifyAuditOutput, error) {
	if _, err := audit.ChainOrg(ctx, s.pool, r.Org); err != nil {
		return nil, err
	}
	rep, err := audit.VerifyAnchored(ctx, r.Tx, r.Org, s.auditKeys)
	if err != nil {
		return nil, err
	}
	return &verifyAuditOutput{Body: rep}, nil
}

type anchorAuditOutput struct {
	Body audit.Anchor
}

var opAnchorAudit = huma.Operation{
	OperationID: "anchor-audit", Method: http.MethodPost, Path: "/v1/audit/anchors", Tags: []string{"compliance"},
	Summary: "Sign the audit chain's head now", DefaultStatus: http.StatusCreated,
	Description: "Chains any pending records, then signs the head of the org's chain (org, last seq, head hash, time, " +
		"key id) with the server's Ed25519 key, stores the anchor and appends it to STRATA_AUDIT_ANCHOR_FILE. " +
		"Anchors are also made every STRATA_AUDIT_ANCHOR_INTERVAL for chains that grew.",
}

func (s *Server) anchorAudit(ctx context.Context, r *Request, in *struct{}) (*anchorAuditOutput, error) {
	if s.anchorer == nil {
		return nil, fmt.Errorf("audit anchoring is not configured on this server (set STRATA_AUDIT_SIGNING_KEY): %w", strata.ErrUnavailable)
	}
	if _, err := audit.ChainOrg(ctx, s.pool, r.Org); err != nil {
		return nil, err
	}
	a, _, err := audit.AnchorOrg(ctx, r.Tx, s.anchorer.Signer, r.Org, time.Now(), false)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(func() {
		if err := s.anchorer.Sink.Write(a); err != nil {
			s.log.Warn("audit anchor not written to the anchor file; it is stored and listed by GET /v1/audit/anchors", "err", err)
		}
	})
	return &anchorAuditOutput{Body: a}, nil
}

type listAnchorsInput struct {
	Page
}

type listAnchorsOutput struct {
	Body List[audit.Anchor]
}

var opListAnchors = huma.Operation{
	OperationID: "list-audit-anchors", Method: http.MethodGet, Path: "/v1/audit/anchors", Tags: []string{"compliance"},
	Summary: "List the signed anchors of the audit chain",
	Description: "The org's anchors, newest first. Copies kept outside Strata (STRATA_AUDIT_ANCHOR_FILE) are what an " +
		"outside check trusts: `strata audit verify --anchors FILE --public-key K`.",
}

func (s *Server) listAnchors(ctx context.Context, r *Request, in *listAnchorsInput) (*listAnchorsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	before, err := audit.ParseCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	as, err := audit.ListAnchors(ctx, r.Tx, r.Org, before, limit+1)
	if err != nil {
		return nil, err
	}
	return &listAnchorsOutput{Body: page(as, limit, func(a audit.Anchor) string { return strconv.FormatInt(a.ID, 10) })}, nil
}

type exportAuditOutput struct {
	Body List[audit.ChainRecord]
}

var opExportAudit = huma.Operation{
	OperationID: "export-audit", Method: http.MethodGet, Path: "/v1/audit/export", Tags: []string{"compliance"},
	Summary: "Export the audit chain for an outside check",
	Description: "The org's chained records in seq order, each exactly as its hash covers it (details as the hashed " +
		"text). `strata audit export` writes these items as JSON lines; `strata audit verify` checks them against " +
		"anchors without database access.",
}

func (s *Server) exportAudit(ctx context.Context, r *Request, in *listAnchorsInput) (*exportAuditOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	after, err := audit.ParseCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	recs, err := audit.ListChain(ctx, r.Tx, r.Org, after, limit+1)
	if err != nil {
		return nil, err
	}
	return &exportAuditOutput{Body: page(recs, limit, func(c audit.ChainRecord) string { return strconv.FormatInt(c.Seq, 10) })}, nil
}
