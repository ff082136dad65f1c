package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/strata"
)

func (s *Server) putAsset(ctx context.Context, r *Request, in *api.PutAssetInput) (*api.AssetOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	a, created, err := s.Events.PutAsset(ctx, r.Tx, r.Org, in.Asset, in.Body, im)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &api.AssetOutput{Status: status, ETag: etag(a.Version), Body: a}, nil
}

func (s *Server) getAsset(ctx context.Context, r *Request, in *api.GetAssetInput) (*api.AssetOutput, error) {
	a, err := s.Events.GetAsset(ctx, r.Tx, r.Org, in.Asset)
	if err != nil {
		return nil, err
	}
	return &api.AssetOutput{Status: http.StatusOK, ETag: etag(a.Version), Body: a}, nil
}

func (s *Server) addAssetVersion(ctx context.Context, r *Request, in *api.AddVersionInput) (*api.VersionOutput, error) {
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
	av, err := s.Events.AddVersion(ctx, r.Tx, r.Org, in.Asset, parent, in.Body.AssetInput)
	if err != nil {
		return nil, err
	}
	return &api.VersionOutput{Status: http.StatusCreated, ETag: etag(av.Version), Body: av}, nil
}

func (s *Server) listAssetVersions(ctx context.Context, r *Request, in *api.ListVersionsInput) (*api.ListVersionsOutput, error) {
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	vs, err := s.Events.ListVersions(ctx, r.Tx, r.Org, in.Asset, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	out := &api.ListVersionsOutput{}
	if a, err := s.Events.GetAsset(ctx, r.Tx, r.Org, in.Asset); err == nil {
		users := []string{a.UserID} // GDPR Art. 18 (enforced by the wrapper): the asset's subject and each version's
		for _, v := range vs {
			users = append(users, v.UserID)
		}
		out.SetSubjects(users...)
	}
	out.Body = page(vs, limit, func(v episodic.AssetVersion) string { return strconv.FormatInt(v.Version, 10) })
	return out, nil
}
