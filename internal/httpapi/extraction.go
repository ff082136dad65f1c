package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/tracecause"
	"github.com/strata-mem/strata/internal/working"
)

// extractionProblem answers extraction's own errors. A refused model answer is a 502 that
// names the part of the answer and the rule that refused it (never the answer's text), and
// the log line of the request says the same.
func (s *Server) extractionProblem(ctx context.Context, err error) error {
	var rl *extraction.RateLimitedError
	var rej *extraction.RejectedError
	switch {
	case errors.As(err, &rej):
		s.Log.WarnContext(ctx, "extraction: the model's answer was rejected; nothing was applied", "where", rej.Where,
			"rule", rej.Rule, "attempts", rej.Attempts, "request_id", httpops.RequestID(ctx))
		return huma.NewError(http.StatusBadGateway, "the model's answers were malformed or out of scope; nothing was applied: "+
			"after "+strconv.Itoa(rej.Attempts)+" attempts, "+rej.Reason(), &huma.ErrorDetail{Location: "model." + rej.Where,
			Message: rej.Rule})
	case errors.Is(err, extraction.ErrNotConfigured):
		return huma.NewError(http.StatusServiceUnavailable, "extraction is off on this server: set STRATA_LLM_MODEL "+
			"(and OPENAI_BASE_URL, OPENAI_API_KEY for an OpenAI-compatible server) and restart it")
	case errors.Is(err, extraction.ErrDisabled):
		return huma.NewError(http.StatusConflict, "extraction is off in this org's policy: an admin turns it on with "+
			"PUT /v1/admin/policies {\"extraction\": {\"enabled\": true}}; the model was not called",
			&huma.ErrorDetail{Location: "policy.extraction.enabled", Message: "is false", Value: false})
	case errors.As(err, &rl):
		return huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests, rl.Error()),
			httpops.RetryAfter(int(rl.Wait.Seconds())+1))
	case errors.Is(err, extraction.ErrMalformed):
		return huma.NewError(http.StatusBadGateway, "the model's answers were malformed or out of scope; nothing was applied")
	}
	return err
}

func (s *Server) extractMemories(ctx context.Context, r *Request, in *api.ExtractInput) (*api.ExtractOutput, error) {
	if s.Extraction == nil {
		return nil, s.extractionProblem(ctx, extraction.ErrNotConfigured)
	}
	b := in.Body
	if (b.SessionID == "") == (len(b.Messages) == 0) {
		return nil, strata.Invalid("body.session_id", "send either session_id or messages")
	}
	var out api.ExtractOutput
	if b.SessionID != "" {
		if b.UserID != "" || b.AgentID != "" {
			return nil, strata.Invalid("body.user_id", "a session's user and agent are its own; send them only with messages")
		}
		res, err := s.Extraction.ExtractSession(ctx, r.Tx, r.AfterCommit, r.Org, b.SessionID, r.Caller.KeyID, b.DryRun)
		if err != nil {
			return nil, s.extractionProblem(ctx, err)
		}
		out.Body = api.ExtractBody{SessionID: b.SessionID, UserID: res.UserID, FromSeq: res.FromSeq, ToSeq: res.ToSeq,
			Decisions: res.Decisions}
		return &out, nil
	}
	req := extraction.Request{Org: r.Org, UserID: b.UserID, AgentID: b.AgentID, KeyID: r.Caller.KeyID}
	for i, m := range b.Messages {
		req.Turns = append(req.Turns, extraction.Turn{Seq: int64(i + 1), Role: m.Role, Content: m.Content})
	}
	d, err := s.Extraction.ExtractMessages(ctx, r.Tx, r.AfterCommit, req, b.DryRun)
	if err != nil {
		return nil, s.extractionProblem(ctx, err)
	}
	out.Body = api.ExtractBody{UserID: b.UserID, Decisions: d}
	return &out, nil
}

func (s *Server) memoryProvenance(ctx context.Context, r *Request, in *api.MemoryIDInput) (*api.ExtractedFromOutput, error) {
	id, err := in.UUID()
	if err != nil {
		return nil, err
	}
	m, err := s.Memories.Get(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	recs, err := extraction.MemoryProvenance(ctx, r.Tx, r.Org, id)
	if err != nil {
		return nil, err
	}
	out := &api.ExtractedFromOutput{Body: api.ExtractedFromBody{MemoryID: id.String(), Items: []api.ExtractedFromItem{}}}
	out.SetSubjects(m.UserID)
	for _, p := range recs {
		item := api.ExtractedFromItem{ProvenanceRecord: p, Turns: []working.Turn{}}
		if p.SessionID != "" && len(p.TurnSeqs) > 0 {
			ts, err := s.Working.TurnsBySeq(ctx, r.Tx, r.Org, p.SessionID, p.TurnSeqs)
			if err != nil {
				return nil, err
			}
			for _, t := range ts {
				item.Turns = append(item.Turns, t.Turn)
			}
		}
		out.Body.Items = append(out.Body.Items, item)
	}
	return out, nil
}

func (s *Server) sessionExtraction(ctx context.Context, r *Request, in *struct{ api.SessionPath }) (*api.ExtractionStateOutput, error) {
	uid, err := s.Working.SessionUser(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	st, err := extraction.GetState(ctx, r.Tx, r.Org, in.Session)
	if err != nil {
		return nil, err
	}
	out := &api.ExtractionStateOutput{Body: st}
	out.SetSubjects(uid)
	return out, nil
}

// markExtraction records, in the append's COMMIT round trip, that the session has turns up
// to seq waiting for extraction (when the server has an LLM; the statement itself checks
// the org's policy), with the request's trace context when it is traced (the extraction
// job's span links to it). Nothing else of extraction happens on the request path.
func (s *Server) markExtraction(ctx context.Context, r *Request, session string, a *working.Appended) {
	if s.Extraction == nil {
		return
	}
	r.AtCommit(extraction.MarkPendingSQL, r.Org, session, a.UserID, a.AgentID, a.Turn.Seq, s.ExtractionDefaultOn,
		tracecause.Traceparent(ctx))
}

// postSessionMessages appends a batch of turns (POST /v1/sessions/{s}/messages with
// messages): all in one transaction, answered like a single append of the last turn plus
// items with every turn.
func (s *Server) postSessionMessages(ctx context.Context, r *Request, in *api.PostMessageInput) (*api.MessageOutput, error) {
	b := in.Body
	if b.Role != "" || b.Content != "" || len(b.Metadata) > 0 {
		return nil, strata.Invalid("body.messages", "send either role/content/metadata or messages, not both")
	}
	turns := make([]working.NewTurn, len(b.Messages))
	for i, m := range b.Messages {
		turns[i] = working.NewTurn{Role: m.Role, Content: m.Content, Metadata: json.RawMessage(m.Metadata),
			UserID: b.UserID, AgentID: b.AgentID, TTL: b.TTL(), KeyID: r.Caller.KeyID}
	}
	as, err := s.Working.AppendMany(ctx, r.Tx, r.Org, in.Session, turns)
	if err != nil {
		var fe *strata.FieldError
		if errors.As(err, &fe) {
			c := *fe
			c.Field = "body." + fe.Field
			return nil, &c
		}
		return nil, err
	}
	last := as[len(as)-1]
	r.AfterCommit(func() {
		for _, a := range as {
			if err := a.Confirm(context.WithoutCancel(ctx)); err != nil {
				s.Log.WarnContext(ctx, "confirming turns (the next append re-spills them)", "err", err, "request_id", httpops.RequestID(ctx))
				return
			}
		}
	})
	s.markExtraction(ctx, r, in.Session, last)
	out := &api.MessageOutput{Status: http.StatusCreated, Body: api.MessageBody{SessionID: in.Session, Turn: last.Turn,
		ExpiresAt: last.ExpiresAt, Items: make([]working.Turn, len(as))}}
	for i, a := range as {
		out.Body.Items[i] = a.Turn
	}
	return out, nil
}
