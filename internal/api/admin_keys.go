package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/strata"
)

type CreateKeyInput struct {
	Body struct {
		OrgID string      `json:"org_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The org the key belongs to. Defaults to the caller's org; only the bootstrap admin key may name another org."`
		Role  strata.Role `json:"role" enum:"agent,compliance,admin" doc:"What the key may do."`
		Name  string      `json:"name,omitempty" maxLength:"200" doc:"A label for humans."`
	}
}

type CreatedKey struct {
	auth.Key
	Secret string `json:"key" doc:"The API key. It is shown only in this response; store it now."`
}

type CreateKeyOutput struct {
	Status int
	Body   CreatedKey
}

type ListKeysInput struct {
	OrgID string `query:"org_id" doc:"Org whose keys to list (bootstrap admin only; default the caller's org)."`
	Page
}

type ListKeysOutput struct {
	Body List[auth.Key]
}

type KeyIDInput struct {
	ID string `path:"id" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
}

type KeyOutput struct {
	Body auth.Key
}

var OpCreateKey = huma.Operation{
	OperationID: "create-key", Method: http.MethodPost, Path: "/v1/admin/keys", Tags: []string{"admin"},
	Summary: "Create an API key", DefaultStatus: http.StatusCreated,
	Description: "Returns the key's secret once. Keys are stored hashed.",
}

var OpListKeys = huma.Operation{
	OperationID: "list-keys", Method: http.MethodGet, Path: "/v1/admin/keys", Tags: []string{"admin"},
	Summary: "List API keys (never their secrets)",
}

var OpRevokeKey = huma.Operation{
	OperationID: "revoke-key", Method: http.MethodDelete, Path: "/v1/admin/keys/{id}", Tags: []string{"admin"},
	Summary: "Revoke an API key", Description: "Takes effect at once: the next request with the key gets 401.",
}
