package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/episodic"
)

type PutAssetInput struct {
	Asset   string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	IfMatch string `header:"If-Match" doc:"The current version (ETag); a stale one gets 409 and nothing is written."`
	Body    episodic.AssetInput
}

type AssetOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   episodic.Asset
}

type GetAssetInput struct {
	Asset string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
}

type AddVersionInput struct {
	Asset   string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	IfMatch string `header:"If-Match" doc:"Alternative to parent_version: the version this one replaces."`
	Body    struct {
		ParentVersion *int64 `json:"parent_version,omitempty" minimum:"0" doc:"The version this one replaces: the asset's current version (0 or absent: the asset must not exist yet). A stale parent gets 409 with the current asset."`
		episodic.AssetInput
	}
}

type VersionOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   episodic.AssetVersion
}

type ListVersionsInput struct {
	Asset string `path:"asset" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The asset id (client-chosen)."`
	Page
}

type ListVersionsOutput struct {
	subjects // the asset's and each version's data subject
	Body     List[episodic.AssetVersion]
}

var OpPutAsset = huma.Operation{
	OperationID: "put-asset", Method: http.MethodPut, Path: "/v1/assets/{asset}", Tags: []string{"assets"},
	Summary: "Create or update an asset",
	Description: "Creates the asset at version 1 (201), or, when uri, media_type, sha256 or metadata differ from the " +
		"current version, adds a version whose parent is the current one (200). The same content again changes " +
		"nothing. If-Match (the ETag) guards against lost updates: a stale version gets 409.",
}

var OpGetAsset = huma.Operation{
	OperationID: "get-asset", Method: http.MethodGet, Path: "/v1/assets/{asset}", Tags: []string{"assets"},
	Summary: "Read an asset at its current version",
}

var OpAddAssetVersion = huma.Operation{
	OperationID: "add-asset-version", Method: http.MethodPost, Path: "/v1/assets/{asset}/versions", Tags: []string{"assets"},
	Summary: "Add a version to an asset", DefaultStatus: http.StatusCreated,
	Description: "The new version names its parent (parent_version, or If-Match): it must be the current version, " +
		"else 409 with the current asset (no lost update). parent_version 0 or absent creates the asset. job_id and seq " +
		"name the job event that produced the version.",
}

var OpListAssetVersions = huma.Operation{
	OperationID: "list-asset-versions", Method: http.MethodGet, Path: "/v1/assets/{asset}/versions", Tags: []string{"assets"},
	Summary: "List an asset's lineage", Description: "Versions oldest first, each with its parent and producing event.",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go).

func (o *AssetOutput) SubjectUsers() []string { return []string{o.Body.UserID} }
