package extraction

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/strata"
)

// SessionResult is an on-demand extraction of a session.
type SessionResult struct {
	UserID         string
	FromSeq, ToSeq int64
	Decisions      Decisions
}

// ExtractSession extracts the session's turns after its cursor (at most BatchTurns) on tx,
// the caller's transaction: unless dryRun it locks the session's cursor, applies the
// decisions and advances the cursor on tx, so they commit (or not) together with the
// caller's request. No waiting turns answer an empty decision set without calling the model.
// An org whose policy has extraction off gets ErrDisabled, before any model call.
func (x *Extractor) ExtractSession(ctx context.Context, tx pgx.Tx, ac AfterCommit, org, session, keyID string, dryRun bool) (SessionResult, error) {
	si, err := x.Working.Session(ctx, tx, org, session, false)
	if err != nil {
		return SessionResult{}, err
	}
	if err := x.CheckEnabled(ctx, tx, org); err != nil {
		return SessionResult{}, err
	}
	res := SessionResult{UserID: si.UserID, Decisions: Decisions{Decisions: []Decision{}, PromptVersion: PromptVersion}}
	var cursor int64
	if dryRun {
		st, err := GetState(ctx, tx, org, session)
		if err != nil && !errors.Is(err, strata.ErrNotFound) {
			return res, err
		}
		cursor = st.ExtractedSeq
	} else {
		st, err := ensureState(ctx, tx, org, session, si.UserID, si.AgentID, x.now())
		if err != nil {
			return res, err
		}
		cursor = st.ExtractedSeq
	}
	turns, err := x.Working.TurnsAfter(ctx, tx, org, session, cursor, BatchTurns)
	if err != nil {
		return res, err
	}
	res.FromSeq, res.ToSeq = cursor, cursor
	if len(turns) == 0 {
		return res, nil
	}
	req := Request{Org: org, UserID: si.UserID, AgentID: si.AgentID, SessionID: session, KeyID: keyID}
	for _, t := range turns {
		req.Turns = append(req.Turns, Turn{Seq: t.Seq, Role: t.Role, Content: t.Content, WrittenBy: t.WrittenBy})
	}
	res.FromSeq, res.ToSeq = turns[0].Seq, turns[len(turns)-1].Seq
	d, err := x.Extract(ctx, tx, req)
	res.Decisions = d
	if err != nil || dryRun {
		return res, err
	}
	if err := x.Apply(ctx, tx, ac, req, &res.Decisions); err != nil {
		return res, err
	}
	if err := advance(ctx, tx, org, session, res.ToSeq, x.now()); err != nil {
		return res, err
	}
	return res, x.AuditRequest(ctx, tx, req, res.Decisions)
}

// ExtractMessages extracts from turns the caller sent (POST /v1/memories/extract with
// messages, Mem0's add(messages)): the decisions, applied and audited in tx unless dryRun.
// An org whose policy has extraction off gets ErrDisabled, before any model call.
func (x *Extractor) ExtractMessages(ctx context.Context, tx pgx.Tx, ac AfterCommit, r Request, dryRun bool) (Decisions, error) {
	for i, t := range r.Turns {
		if err := strata.CheckText("content", t.Content); err != nil {
			return Decisions{}, strata.Invalid("messages["+strconv.Itoa(i)+"].content", "must be text without NUL characters")
		}
	}
	if err := x.CheckEnabled(ctx, tx, r.Org); err != nil {
		return Decisions{}, err
	}
	d, err := x.Extract(ctx, tx, r)
	if err != nil || dryRun {
		return d, err
	}
	if err := x.Apply(ctx, tx, ac, r, &d); err != nil {
		return d, err
	}
	return d, x.AuditRequest(ctx, tx, r, d)
}

// AuditRequest records an applied on-demand extraction (counts and usage, no content).
func (x *Extractor) AuditRequest(ctx context.Context, tx pgx.Tx, r Request, d Decisions) error {
	entity, id := "session", r.SessionID
	if id == "" {
		entity, id = "messages", "request"
	}
	return audit.Append(ctx, tx, audit.Entry{OrgID: r.Org, ActorKeyID: cmpOr(r.KeyID, WorkerKey), ActorRole: "agent",
		AgentID: r.AgentID, Action: "extract-memories", EntityType: entity, EntityID: id, Status: 200,
		Details: map[string]any{"turns": len(r.Turns), "decisions": d.Counts(), "entities": len(d.Entities),
			"relations": len(d.Relations), "model": d.Model,
			"prompt_version": d.PromptVersion, "llm_calls": d.Usage.Calls, "tokens": d.Usage.Tokens()}})
}
