package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

func (s *Server) createErasure(ctx context.Context, r *Request, in *api.CreateErasureInput) (*api.ErasureOutput, error) {
	p := r.Caller
	e, err := gdpr.CreateErasure(ctx, r.Tx, s.Erasures, gdpr.NewErasure{OrgID: p.OrgID, UserID: in.Body.UserID,
		Subject: s.Pseudo.Subject(p.OrgID, in.Body.UserID), RequestedBy: p.KeyID, RequestID: httpops.RequestID(ctx),
		Reason: in.Body.Reason, At: s.Now()})
	if err != nil {
		return nil, err
	}
	return &api.ErasureOutput{Status: http.StatusAccepted, Location: "/v1/gdpr/erasures/" + e.ID, Body: e}, nil
}

func (s *Server) getErasure(ctx context.Context, r *Request, in *api.ErasureIDInput) (*api.ErasureOutput, error) {
	e, err := gdpr.GetErasure(ctx, r.Tx, r.Org, strings.ToLower(in.ID))
	if err != nil {
		return nil, err
	}
	es := []gdpr.Erasure{e}
	gdpr.FlagDeadlines(es, s.Now())
	e = es[0]
	return &api.ErasureOutput{Status: http.StatusOK, Body: e}, nil
}

func (s *Server) listErasures(ctx context.Context, r *Request, in *api.ListErasuresInput) (*api.ListErasuresOutput, error) {
	l, err := listPage(in.Page, func(e gdpr.Erasure) string { return e.ID }, func(n int) ([]gdpr.Erasure, error) {
		return gdpr.ListErasures(ctx, r.Tx, r.Org, s.Pseudo.Subject(r.Org, in.UserID), in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	gdpr.FlagDeadlines(l.Items, s.Now())
	return &api.ListErasuresOutput{Body: l}, nil
}

func (s *Server) exportSubject(ctx context.Context, r *Request, in *api.ExportInput) (*huma.StreamResponse, error) {
	p := r.Caller
	org, user := p.OrgID, in.UserID
	subject := s.Pseudo.Subject(org, user)
	// An export is a read (its transaction rolls back), so its audit record commits on
	// its own, before anything is sent.
	if err := pg.InOrgTx(ctx, s.Pool, org, func(tx pgx.Tx) error {
		return audit.Append(ctx, tx, audit.Entry{OrgID: org, ActorKeyID: p.KeyID, ActorRole: string(p.Role),
			Action: "export-subject", EntityType: "gdpr.export", RequestID: httpops.RequestID(ctx), Subject: subject, Status: 200,
			Details: viaDetails(p)})
	}); err != nil {
		return nil, err
	}
	// A large export outlives STRATA_REQUEST_TIMEOUT and the pool's statement timeout (a
	// streamed statement lasts as long as the client reads): it runs until it is done or
	// the client goes away (a write fails), in one snapshot; its statements are not bound
	// by the store timeout either.
	ectx, cancel := context.WithCancel(pg.WithoutCallTimeout(context.WithoutCancel(ctx)))
	etx, err := pg.BeginReadSnapshot(ectx, s.readPool(ctx), org)
	if err != nil && s.retryOnPrimary(ctx, err) {
		etx, err = pg.BeginReadSnapshot(ectx, s.Pool, org)
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
		sum, err := gdpr.Export(ectx, etx, s.Working, gdpr.ExportHeader{OrgID: org, UserID: user, Subject: subject, Previous: s.Pseudo.Subjects(org, user)[1:],
			GeneratedAt: s.Now().UTC(), Restricted: restriction.Restricted}, w)
		if err != nil {
			// The status is sent; say so in the stream (no summary line follows).
			s.Log.ErrorContext(ctx, "export failed", "err", err, "request_id", httpops.RequestID(ctx), "records", sum.Records)
			b, _ := json.Marshal(map[string]any{"type": "error", "detail": "the export failed after " +
				fmt.Sprint(sum.Records) + " records; retry (report X-Request-Id " + httpops.RequestID(ctx) + ")"})
			_, _ = w.Write(append(b, '\n'))
		}
	}}, nil
}

func (s *Server) restrictSubject(ctx context.Context, r *Request, in *api.RestrictInput) (*api.RestrictionOutput, error) {
	reason := ""
	if in.Body != nil {
		reason = in.Body.Reason
	}
	p := r.Caller
	res, created, err := gdpr.Restrict(ctx, r.Tx, p.OrgID, in.User, p.KeyID, reason, s.Now())
	if err != nil {
		return nil, err
	}
	s.Restrictions.ForgetAfterCommit(r.Session(), r.Org)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &api.RestrictionOutput{Status: status, Body: res}, nil
}

func (s *Server) unrestrictSubject(ctx context.Context, r *Request, in *api.RestrictionInput) (*api.RestrictionOutput, error) {
	if err := gdpr.Unrestrict(ctx, r.Tx, r.Org, in.User); err != nil {
		return nil, err
	}
	s.Restrictions.ForgetAfterCommit(r.Session(), r.Org)
	return &api.RestrictionOutput{Status: http.StatusOK, Body: gdpr.Restriction{UserID: in.User}}, nil
}

func (s *Server) getRestriction(ctx context.Context, r *Request, in *api.RestrictionInput) (*api.RestrictionOutput, error) {
	res, err := gdpr.GetRestriction(ctx, r.Tx, r.Org, in.User)
	if err != nil {
		return nil, err
	}
	return &api.RestrictionOutput{Status: http.StatusOK, Body: res}, nil
}

func (s *Server) rectify(ctx context.Context, r *Request, in *api.RectifyInput) (*api.RectifyOutput, error) {
	b := in.Body
	if (b.Memory == nil) == (b.KV == nil) {
		return nil, strata.Invalid("body", "give exactly one of memory, kv")
	}
	req := gdpr.RectifyRequest{OrgID: r.Org, UserID: b.UserID, Reason: b.Reason, KeyID: r.Caller.KeyID,
		Role: string(r.Caller.Role), RequestID: httpops.RequestID(ctx), At: s.Now()}
	if m := b.Memory; m != nil {
		req.Memory = &gdpr.MemoryCorrection{ID: m.ID, Text: m.Text, Metadata: m.Metadata}
	} else {
		k := b.KV
		req.KV = &gdpr.KVCorrection{Namespace: k.Namespace, Key: k.Key, AgentID: k.AgentID, SessionID: k.SessionID, Value: k.Value}
	}
	rf := gdpr.Rectifier{Memories: s.Memories, KV: s.KV, Embed: s.embedOne, Space: s.space, Pseudo: s.Pseudo}
	out, err := rf.Rectify(ctx, r.Tx, r.AfterCommit, req)
	if err != nil {
		return nil, err
	}
	return &api.RectifyOutput{Body: out}, nil
}
