package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/strata"
)

type putAssetInput struct {
	Asset   string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	IfMatch string `header:"If-Match" doc:"The current version (ETag); a stale one gets 409 and nothing is written."`
	Body    episodic.AssetInput
}

type assetOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   episodic.Asset
}

type getAssetInput struct {
	Asset string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
}

type addVersionInput struct {
	Asset   string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	IfMatch string `header:"If-Match" doc:"Alternative to parent_version: the version this one replaces."`
	Body    struct {
		ParentVersion *int64 `json:"parent_version,omitempty" minimum:"0" doc:"The version this one replaces: the asset's current version (0 or absent: the asset must not exist yet). A stale parent gets 409 with the current asset."`
		episodic.AssetInput
	}
}

type versionOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   episodic.AssetVersion
}

type listVersionsInput struct {
	Asset string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	Page
}

type listVersionsOutput struct {
	subjects []string
	Body     List[episodic.AssetVersion]
}

var opPutAsset = huma.Operation{
	OperationID: "put-asset", Method: http.MethodPut, Path: "/v1/assets/{asset}", Tags: []string{"assets"},
	Summary: "Create or update an asset",
	Description: "Creates the asset at version 1 (201), or, when uri, media_type, sha256 or metadata differ from the " +
		"current version, adds a version whose parent is the current one (200). The same content again changes " +
		"nothing. If-Match (the ETag) guards against lost updates: a stale version gets 409.",
}

func (s *Server) putAsset(ctx context.Context, r *Request, in *putAssetInput) (*assetOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	a, created, err := s.events.PutAsset(ctx, r.Tx, r.Org, in.Asset, in.Body, im)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &assetOutput{Status: status, ETag: etag(a.Version), Body: a}, nil
}

var opGetAsset = huma.Operation{
	OperationID: "get-asset", Method: http.MethodGet, Path: "/v1/assets/{asset}", Tags: []string{"assets"},
	Summary: "Read an asset at its current version",
}

func (s *Server) getAsset(ctx context.Context, r *Request, in *getAssetInput) (*assetOutput, error) {
	a, err := s.events.GetAsset(ctx, r.Tx, r.Org, in.Asset)
	if err != nil {
		return nil, err
	}
	return &assetOutput{Status: http.StatusOK, ETag: etag(a.Version), Body: a}, nil
}

var opAddAssetVersion = huma.Operation{
	OperationID: "add-asset-version", Method: http.MethodPost, Path: "/v1/assets/{asset}/versions", Tags: []string{"assets"},
	Summary: "Add a version to an asset", DefaultStatus: http.StatusCreated,
	Description: "The new version names its parent (parent_version, or If-Match): it must be the current version, " +
		"else 409 with the current asset (no lost update). parent_version 0 or absent creates the asset. job_id and seq " +
		"name the job event that produced the version.",
}

func (s *Server) addAssetVersion(ctx context.Context, r *Request, in *addVersionInput) (*versionOutput, error) {
	v, ok, err := ifMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	parent := int64(0)
	switch {
	case in.Body.ParentVersion != nil && ok && *in.Body.ParentVersion != v:
		return nil, strata.Invalid("parent_version", "differs from If-Match (%d)", v)
	case in.Body.ParentVersion != nil:
		parent = *in.Body.ParentVersion
	case ok:
		parent = v
	}
	av, err := s.events.AddVersion(ctx, r.Tx, r.Org, in.Asset, parent, in.Body.AssetInput)
	if err != nil {
		return nil, err
	}
	return &versionOutput{Status: http.StatusCreated, ETag: etag(av.Version), Body: av}, nil
}

var opListAssetVersions = huma.Operation{
	OperationID: "list-asset-versions", Method: http.MethodGet, Path: "/v1/assets/{asset}/versions", Tags: []string{"assets"},
	Summary: "List an asset's lineage", Description: "Versions oldest first, each with its parent and producing event.",
}

func (s *Server) listAssetVersions(ctx context.Context, r *Request, in *listVersionsInput) (*listVersionsOutput, error) {
	limit, err := in.Page.limit()
	if err != nil {
		return nil, err
	}
	vs, err := s.events.ListVersions(ctx, r.Tx, r.Org, in.Asset, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	out := &listVersionsOutput{}
	if a, err := s.events.GetAsset(ctx, r.Tx, r.Org, in.Asset); err == nil {
		out.subjects = []string{a.UserID} // GDPR Art. 18 (enforced by the wrapper): the asset's subject and each version's
		for _, v := range vs {
			out.subjects = append(out.subjects, v.UserID)
		}
	}
	out.Body = page(vs, limit, func(v episodic.AssetVersion) string { return strconv.FormatInt(v.Version, 10) })
	return out, nil
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: subjects.go).

func (o *assetOutput) subjectUsers() []string        { return []string{o.Body.UserID} }
func (o *listVersionsOutput) subjectUsers() []string { return o.subjects }
