package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/strata"
)

// targetOrg is the org an admin call acts on: the caller's own, or any org for the root key.
func targetOrg(p auth.Principal, requested string) (string, error) {
	if requested == "" || requested == p.OrgID {
		return p.OrgID, nil
	}
	if !p.Root {
		return "", huma.Error403Forbidden("an org admin key manages only its own org's keys")
	}
	return requested, nil
}

func (s *Server) createKey(ctx context.Context, r *Request, in *api.CreateKeyInput) (*api.CreateKeyOutput, error) {
	p := r.Caller
	org, err := targetOrg(p, in.Body.OrgID)
	if err != nil {
		return nil, err
	}
	if err := strata.CheckText("name", in.Body.Name); err != nil {
		return nil, err
	}
	k, secret, err := s.Keys.Create(ctx, r.Tx, org, in.Body.Role, in.Body.Name, p.KeyID)
	if err != nil {
		return nil, err
	}
	secretInResponse(ctx, "key")
	return &api.CreateKeyOutput{Status: http.StatusCreated, Body: api.CreatedKey{Key: k, Secret: secret}}, nil
}

func (s *Server) listKeys(ctx context.Context, r *Request, in *api.ListKeysInput) (*api.ListKeysOutput, error) {
	p := r.Caller
	org, err := targetOrg(p, in.OrgID)
	if err != nil {
		return nil, err
	}
	l, err := listPage(in.Page, func(k auth.Key) string { return k.ID }, func(n int) ([]auth.Key, error) {
		return s.Keys.List(ctx, s.Pool, org, in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.ListKeysOutput{Body: l}, nil
}

func (s *Server) revokeKey(ctx context.Context, r *Request, in *api.KeyIDInput) (*api.KeyOutput, error) {
	p := r.Caller
	org := p.OrgID
	if p.Root {
		// The root key may revoke any org's key: find its org first.
		var err error
		if org, err = s.Keys.OrgOf(ctx, r.Tx, in.ID); err != nil {
			return nil, err
		}
	}
	k, err := s.Keys.Revoke(ctx, r.Tx, org, in.ID)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(s.Keys.Forget)
	return &api.KeyOutput{Body: k}, nil
}
