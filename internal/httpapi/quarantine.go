package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// quarantineAdminOnly answers a non-admin's include_quarantined with its own 403.
func quarantineAdminOnly(err error) error {
	if errors.Is(err, semantic.ErrIncludeQuarantined) {
		return huma.Error403Forbidden("include_quarantined needs an admin key")
	}
	return err
}

func (s *Server) createQuarantine(ctx context.Context, r *Request, in *api.CreateQuarantineInput) (*api.QuarantineOutput, error) {
	b := in.Body
	p := r.Caller
	n := semantic.NewQuarantine{KeyID: b.KeyID, AgentID: b.AgentID, Since: b.Since, Reason: b.Reason, CreatedBy: p.KeyID}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if b.KeyID != "" && b.KeyID != "root" {
		ok, err := s.Keys.Exists(ctx, r.Tx, p.OrgID, b.KeyID)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, strata.Invalid("key_id", "no API key with this id in your org")
		}
	}
	q, err := s.Memories.CreateQuarantine(ctx, r.Tx, p.OrgID, n)
	if err != nil {
		return nil, err
	}
	if s.Extraction != nil { // key-value memory has no held state: revert what extraction wrote (issue 57)
		if _, err := s.Extraction.RevertQuarantined(ctx, r.Tx, r.AfterCommit, p.OrgID, n.KeyID, n.AgentID, n.Since, p.KeyID); err != nil {
			return nil, err
		}
	}
	s.emit(r, outbox.New{Type: outbox.QuarantineCreated, DedupeKey: "quarantine.created:" + q.ID.String(),
		Data: map[string]any{"quarantine_id": q.ID.String(), "key_id": q.KeyID, "agent_id": q.AgentID}})
	return &api.QuarantineOutput{Status: http.StatusCreated, Body: q}, nil
}

func (s *Server) listQuarantines(ctx context.Context, r *Request, in *api.ListQuarantinesInput) (*api.ListQuarantinesOutput, error) {
	l, err := listPage(in.Page, func(q semantic.Quarantine) string { return q.ID.String() }, func(n int) ([]semantic.Quarantine, error) {
		return s.Memories.ListQuarantines(ctx, r.Tx, r.Org, in.Status, in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.ListQuarantinesOutput{Body: l}, nil
}

func (s *Server) getQuarantine(ctx context.Context, r *Request, in *api.QuarantineIDInput) (*api.QuarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	q, err := s.Memories.GetQuarantine(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	return &api.QuarantineOutput{Status: http.StatusOK, Body: q}, nil
}

func (s *Server) listQuarantinedMemories(ctx context.Context, r *Request, in *api.QuarantinedMemoriesInput) (*api.QuarantinedMemoriesOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	l, err := listPage(in.Page, func(m semantic.Memory) string { return m.ID.String() }, func(n int) ([]semantic.Memory, error) {
		return s.Memories.QuarantinedMemories(ctx, r.Tx, r.Org, id, in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.QuarantinedMemoriesOutput{Body: l}, nil
}

func (s *Server) releaseQuarantine(ctx context.Context, r *Request, in *api.QuarantineIDInput) (*api.QuarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	q, err := s.Memories.ReleaseQuarantine(ctx, r.Tx, p.OrgID, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	return &api.QuarantineOutput{Status: http.StatusOK, Body: q}, nil
}

func (s *Server) purgeQuarantine(ctx context.Context, r *Request, in *api.QuarantineIDInput) (*api.PurgeQuarantineOutput, error) {
	id, err := semantic.ParseID("id", in.ID)
	if err != nil {
		return nil, err
	}
	p := r.Caller
	q, res, err := s.Memories.PurgeQuarantine(ctx, r.Tx, p.OrgID, id, p.KeyID)
	if err != nil {
		return nil, err
	}
	out := &api.PurgeQuarantineOutput{}
	out.Body.Quarantine, out.Body.PurgeResult = q, res
	return out, nil
}
