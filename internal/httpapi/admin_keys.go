package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/strata"
)

type createKeyInput struct {
	Body struct {
		OrgID string      `json:"org_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The org the key belongs to. Defaults to the caller's org; only the bootstrap admin key may name another org."`
		Role  strata.Role `json:"role" enum:"agent,compliance,admin" doc:"What the key may do."`
		Name  string      `json:"name,omitempty" maxLength:"200" doc:"A label for humans."`
	}
}

type createdKey struct {
	auth.Key
	Secret string `json:"key" doc:"The API key. It is shown only in this response; store it now."`
}

type createKeyOutput struct {
	Status int
	Body   createdKey
}

type listKeysInput struct {
	OrgID string `query:"org_id" doc:"Org whose keys to list (bootstrap admin only; default the caller's org)."`
	Page
}

type listKeysOutput struct {
	Body List[auth.Key]
}

type keyIDInput struct {
	ID string `path:"id" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
}

type keyOutput struct {
	Body auth.Key
}

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

var opCreateKey = huma.Operation{
	OperationID: "create-key", Method: http.MethodPost, Path: "/v1/admin/keys", Tags: []string{"admin"},
	Summary: "Create an API key", DefaultStatus: http.StatusCreated,
	Description: "Returns the key's secret once. Keys are stored hashed.",
}

func (s *Server) createKey(ctx context.Context, r *Request, in *createKeyInput) (*createKeyOutput, error) {
	p := r.Caller
	org, err := targetOrg(p, in.Body.OrgID)
	if err != nil {
		return nil, err
	}
	if err := strata.CheckText("name", in.Body.Name); err != nil {
		return nil, err
	}
	k, secret, err := s.keys.Create(ctx, r.Tx, org, in.Body.Role, in.Body.Name, p.KeyID)
	if err != nil {
		return nil, err
	}
	secretInResponse(ctx, "key")
	return &createKeyOutput{Status: http.StatusCreated, Body: createdKey{Key: k, Secret: secret}}, nil
}

var opListKeys = huma.Operation{
	OperationID: "list-keys", Method: http.MethodGet, Path: "/v1/admin/keys", Tags: []string{"admin"},
	Summary: "List API keys (never their secrets)",
}

func (s *Server) listKeys(ctx context.Context, r *Request, in *listKeysInput) (*listKeysOutput, error) {
	p := r.Caller
	org, err := targetOrg(p, in.OrgID)
	if err != nil {
		return nil, err
	}
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	keys, err := s.keys.List(ctx, s.pool, org, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	out := &listKeysOutput{}
	out.Body = page(keys, limit, func(k auth.Key) string { return k.ID })
	return out, nil
}

var opRevokeKey = huma.Operation{
	OperationID: "revoke-key", Method: http.MethodDelete, Path: "/v1/admin/keys/{id}", Tags: []string{"admin"},
	Summary: "Revoke an API key", Description: "Takes effect at once: the next request with the key gets 401.",
}

func (s *Server) revokeKey(ctx context.Context, r *Request, in *keyIDInput) (*keyOutput, error) {
	p := r.Caller
	org := p.OrgID
	if p.Root {
		// The root key may revoke any org's key: find its org first.
		var err error
		if org, err = s.keys.OrgOf(ctx, r.Tx, in.ID); err != nil {
			return nil, err
		}
	}
	k, err := s.keys.Revoke(ctx, r.Tx, org, in.ID)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(s.keys.Forget)
	return &keyOutput{Body: k}, nil
}
