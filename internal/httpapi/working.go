package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

func stateStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

func (s *Server) putSessionState(ctx context.Context, r *Request, in *api.PutStateInput) (*api.StateOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	st, created, p, err := s.Working.PreparePut(ctx, r.Tx, r.Org, in.Session, working.Write{State: json.RawMessage(in.Body.State),
		UserID: in.Body.UserID, AgentID: in.Body.AgentID, TTL: in.Body.TTL(), IfMatch: im})
	if err != nil {
		return nil, err
	}
	if err := s.sendState(ctx, r, created, p); err != nil {
		return nil, err
	}
	return &api.StateOutput{Status: stateStatus(created), ETag: etag(st.Version), Body: st}, nil
}

func (s *Server) patchSessionState(ctx context.Context, r *Request, in *api.PatchStateInput) (*api.StateOutput, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	st, created, p, err := s.Working.PreparePatch(ctx, r.Tx, r.Org, in.Session, working.Write{State: json.RawMessage(in.Body.State),
		UserID: in.Body.UserID, AgentID: in.Body.AgentID, TTL: in.Body.TTL(), IfMatch: im})
	if err != nil {
		return nil, err
	}
	if err := s.sendState(ctx, r, created, p); err != nil {
		return nil, err
	}
	return &api.StateOutput{Status: stateStatus(created), ETag: etag(st.Version), Body: st}, nil
}

func (s *Server) getSessionState(ctx context.Context, r *Request, in *struct{ api.SessionPath }) (*api.StateOutput, error) {
	st, err := s.Working.Get(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	return &api.StateOutput{Status: http.StatusOK, ETag: etag(st.Version), Body: st}, nil
}

func (s *Server) deleteSession(ctx context.Context, r *Request, in *api.DeleteStateInput) (*struct{}, error) {
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	if err := s.Working.Delete(ctx, r.Tx, r.Org, in.Session, im); err != nil {
		return nil, err
	}
	// The turns are gone, so is their rolling summary (docs/summaries.md).
	if _, err := summaries.EraseSubject(ctx, r.Tx, r.Org, summaries.KindSession, in.Session); err != nil {
		return nil, err
	}
	return &struct{}{}, nil
}

func (s *Server) postSessionMessage(ctx context.Context, r *Request, in *api.PostMessageInput) (*api.MessageOutput, error) {
	if len(in.Body.Messages) > 0 {
		return s.postSessionMessages(ctx, r, in)
	}
	a, err := s.Working.Append(ctx, r.Tx, r.Org, in.Session, working.NewTurn{Role: in.Body.Role, Content: in.Body.Content,
		Metadata: json.RawMessage(in.Body.Metadata), UserID: in.Body.UserID, AgentID: in.Body.AgentID, TTL: in.Body.TTL(),
		KeyID: r.Caller.KeyID})
	if err != nil {
		return nil, err
	}
	s.markExtraction(ctx, r, in.Session, a)
	r.AfterCommit(func() {
		if err := a.Confirm(context.WithoutCancel(ctx)); err != nil {
			s.Log.WarnContext(ctx, "confirming turns (the next append re-spills them)", "err", err, "request_id", httpops.RequestID(ctx))
		}
	})
	return &api.MessageOutput{Status: http.StatusCreated, Body: api.MessageBody{SessionID: in.Session, Turn: a.Turn, ExpiresAt: a.ExpiresAt}}, nil
}

func (s *Server) popSessionMessage(ctx context.Context, r *Request, in *struct{ api.SessionPath }) (*api.PopOutput, error) {
	uid, err := s.Working.SessionUser(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	p, err := s.Working.Pop(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	r.AfterCommit(func() {
		if err := p.Invalidate(context.WithoutCancel(ctx)); err != nil {
			s.Log.WarnContext(ctx, "dropping a popped session's Redis copy", "err", err, "request_id", httpops.RequestID(ctx))
		}
	})
	out := &api.PopOutput{}
	out.SetSubjects(uid)
	out.Body.SessionID, out.Body.Turn = in.Session, p.Turn
	return out, nil
}

func (s *Server) listSessionMessages(ctx context.Context, r *Request, in *api.ListMessagesInput) (*api.MessagesOutput, error) {
	uid, err := s.Working.SessionUser(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	out := &api.MessagesOutput{}
	out.SetSubjects(uid)
	out.Body.SessionID = in.Session
	if in.AfterSeq < 0 {
		b, err := s.Working.Turns(ctx, r.Tx, r.Org, in.Session)
		if err != nil {
			return nil, err
		}
		out.Body.Items, out.Body.Restored, out.Body.ExpiresAt = b.Turns, b.Restored, &b.ExpiresAt
		return out, nil
	}
	limit, err := api.Page{Limit: in.Limit}.Size()
	if err != nil {
		return nil, err
	}
	turns, err := s.Working.Log(ctx, r.Tx, r.Org, in.Session, in.AfterSeq, limit)
	if err != nil {
		return nil, err
	}
	out.Body.Items = turns
	if len(turns) == limit {
		out.Body.NextCursor = strconv.FormatInt(turns[len(turns)-1].Seq, 10)
	}
	return out, nil
}
