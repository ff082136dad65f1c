package httpapi

import (
	"context"
	"strconv"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

func (s *Server) listSessions(ctx context.Context, r *Request, in *api.ListSessionsInput) (*api.ListSessionsOutput, error) {
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	ss, err := s.Working.ListSessions(ctx, r.Tx, r.Org, in.UserID, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &api.ListSessionsOutput{Body: page(ss, limit, working.SessionCursor)}, nil
}

func (s *Server) latestSummary(ctx context.Context, r *Request, kind, id string) (*api.SummaryOutput, error) {
	sm, err := summaries.Latest(ctx, r.Tx, r.Org, kind, id)
	if err != nil {
		return nil, err
	}
	return &api.SummaryOutput{ETag: etag(sm.Version), Body: sm}, nil
}

func (s *Server) summaryVersions(ctx context.Context, r *Request, kind, id string, p api.Page) (*api.SummaryVersionsOutput, error) {
	limit, err := p.Size()
	if err != nil {
		return nil, err
	}
	var before int64
	if p.Cursor != "" {
		if before, err = strconv.ParseInt(p.Cursor, 10, 64); err != nil || before < 1 {
			return nil, strata.Invalid("cursor", "must be a version (the next_cursor of the previous page)")
		}
	}
	vs, err := summaries.Versions(ctx, r.Tx, r.Org, kind, id, before, limit+1)
	if err != nil {
		return nil, err
	}
	return &api.SummaryVersionsOutput{Body: page(vs, limit, func(x summaries.Summary) string {
		return strconv.FormatInt(x.Version, 10)
	})}, nil
}

func (s *Server) sessionSummary(ctx context.Context, r *Request, in *struct{ api.SessionPath }) (*api.SummaryOutput, error) {
	return s.latestSummary(ctx, r, summaries.KindSession, in.Session)
}

func (s *Server) sessionSummaryVersions(ctx context.Context, r *Request, in *api.SessionSummaryVersionsInput) (*api.SummaryVersionsOutput, error) {
	return s.summaryVersions(ctx, r, summaries.KindSession, in.Session, in.Page)
}

func (s *Server) jobSummary(ctx context.Context, r *Request, in *struct{ api.JobPath }) (*api.SummaryOutput, error) {
	return s.latestSummary(ctx, r, summaries.KindJob, in.Job)
}

func (s *Server) jobSummaryVersions(ctx context.Context, r *Request, in *api.JobSummaryVersionsInput) (*api.SummaryVersionsOutput, error) {
	return s.summaryVersions(ctx, r, summaries.KindJob, in.Job, in.Page)
}
