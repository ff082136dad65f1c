package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/strata"
)

func (s *Server) listAudit(ctx context.Context, r *Request, in *api.ListAuditInput) (*api.ListAuditOutput, error) {
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	after, err := audit.ParseCursor(in.Cursor)
	if err != nil {
		return nil, err
	}
	f := audit.Filter{Action: in.Action, EntityType: in.EntityType, EntityID: in.EntityID, ActorKeyID: in.ActorKeyID,
		AgentID: in.AgentID, Subject: s.Pseudo.Subject(r.Org, in.UserID), Subjects: s.Pseudo.Subjects(r.Org, in.UserID),
		AfterID: after, Limit: limit + 1, Newest: in.Order == "newest"}
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
	return &api.ListAuditOutput{Body: page(recs, limit, func(r audit.Record) string { return strconv.FormatInt(r.ID, 10) })}, nil
}

func (s *Server) verifyAudit(ctx context.Context, r *Request, in *struct{}) (*api.VerifyAuditOutput, error) {
	if _, err := audit.ChainOrg(ctx, s.Pool, r.Org); err != nil {
		return nil, err
	}
	rep, err := audit.VerifyAnchored(ctx, r.Tx, r.Org, s.AuditKeys)
	if err != nil {
		return nil, err
	}
	return &api.VerifyAuditOutput{Body: rep}, nil
}

func (s *Server) anchorAudit(ctx context.Context, r *Request, in *struct{}) (*api.AnchorAuditOutput, error) {
	if s.Anchorer == nil {
		return nil, huma.NewError(http.StatusServiceUnavailable,
			"audit anchoring is off on this server: set STRATA_AUDIT_SIGNING_KEY (a base64 Ed25519 seed, or a file path) and restart it")
	}
	if _, err := audit.ChainOrg(ctx, s.Pool, r.Org); err != nil {
		return nil, err
	}
	a, _, err := audit.AnchorOrg(ctx, r.Tx, s.Anchorer.Signer, r.Org, time.Now(), false)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(func() {
		if err := s.Anchorer.Sink.Write(a); err != nil {
			s.Log.Warn("audit anchor not written to the anchor file; it is stored and listed by GET /v1/audit/anchors", "err", err)
		}
	})
	return &api.AnchorAuditOutput{Body: a}, nil
}

func (s *Server) listAnchors(ctx context.Context, r *Request, in *api.ListAnchorsInput) (*api.ListAnchorsOutput, error) {
	l, err := listPage(in.Page, func(a audit.Anchor) string { return strconv.FormatInt(a.ID, 10) }, func(n int) ([]audit.Anchor, error) {
		before, err := audit.ParseCursor(in.Cursor)
		if err != nil {
			return nil, err
		}
		return audit.ListAnchors(ctx, r.Tx, r.Org, before, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.ListAnchorsOutput{Body: l}, nil
}

func (s *Server) exportAudit(ctx context.Context, r *Request, in *api.ListAnchorsInput) (*api.ExportAuditOutput, error) {
	l, err := listPage(in.Page, func(c audit.ChainRecord) string { return strconv.FormatInt(c.Seq, 10) }, func(n int) ([]audit.ChainRecord, error) {
		after, err := audit.ParseCursor(in.Cursor)
		if err != nil {
			return nil, err
		}
		return audit.ListChain(ctx, r.Tx, r.Org, after, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.ExportAuditOutput{Body: l}, nil
}
