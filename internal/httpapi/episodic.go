package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/strata"
)

// stripSingle turns the tier's "[0].op" into "op" for a one-object body (the wrapper then
// locates it as body.op); for an array body "[3].op" stays and becomes body[3].op.
func stripSingle(err error, array bool) error {
	var fe *strata.FieldError
	if array || !errors.As(err, &fe) {
		return err
	}
	return &strata.FieldError{Field: strings.TrimPrefix(strings.TrimPrefix(fe.Field, "[0]"), "."), Msg: fe.Msg, Status: fe.Status, Kind: fe.Kind}
}

func (s *Server) appendEvents(ctx context.Context, r *Request, in *api.AppendEventsInput) (*api.AppendEventsOutput, error) {
	evs, array, err := (&api.AppendBody{Raw: in.RawBody}).Decode()
	if err != nil {
		return nil, err
	}
	stored, err := s.Events.Append(ctx, r.Tx, r.Org, in.Job, evs)
	if err != nil {
		return nil, stripSingle(err, array)
	}
	out := &api.AppendEventsOutput{Status: http.StatusOK}
	for _, e := range stored {
		if !e.Replayed {
			out.Status = http.StatusCreated
		}
	}
	if array {
		out.Body.Items = stored
	} else {
		out.Body.One = &stored[0]
	}
	return out, nil
}

func (s *Server) listEvents(ctx context.Context, r *Request, in *api.ListEventsInput) (*api.ListEventsOutput, error) {
	limit, err := api.Page{Limit: in.Limit}.Size()
	if err != nil {
		return nil, err
	}
	evs, err := s.Events.List(ctx, r.Tx, r.Org, in.Job, episodic.ListQuery{AfterSeq: in.AfterSeq, Cursor: in.Cursor,
		Limit: limit + 1, Op: in.Op, Since: in.Since, Until: in.Until, HideCompacted: !in.Raw})
	if err != nil {
		return nil, err
	}
	return &api.ListEventsOutput{Body: page(evs, limit, func(e episodic.Event) string { return strconv.FormatInt(e.Seq, 10) })}, nil
}

func (s *Server) eventApplied(ctx context.Context, r *Request, in *api.AppliedInput) (*api.AppliedOutput, error) {
	ev, fp, err := s.Events.AppliedEdit(ctx, r.Tx, r.Org, in.Job,
		episodic.AppliedQuery{Fingerprint: in.Fingerprint, Op: in.Op, Params: in.Params})
	if err != nil {
		return nil, err
	}
	return &api.AppliedOutput{Body: api.AppliedBody{Applied: ev != nil, Fingerprint: fp, Event: ev}}, nil
}

func (s *Server) revertEvent(ctx context.Context, r *Request, in *api.RevertInput) (*api.EventOutput, error) {
	var ri episodic.RevertInput
	if in.Body != nil {
		ri = episodic.RevertInput{AgentID: in.Body.AgentID, UserID: in.Body.UserID, SessionID: in.Body.SessionID, Reason: in.Body.Reason}
	}
	ev, created, err := s.Events.Revert(ctx, r.Tx, r.Org, in.Job, in.Seq, ri)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &api.EventOutput{Status: status, Body: ev}, nil
}
