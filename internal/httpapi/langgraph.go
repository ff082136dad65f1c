package httpapi

import (
	"context"
	"net/http"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/jobs"
)

func (s *Server) putLanggraphCheckpoint(ctx context.Context, r *Request, in *api.PutLangGraphCheckpointInput) (*api.PutLangGraphCheckpointOutput, error) {
	b := in.Body
	put := jobs.LangGraphPut{CheckpointNS: b.CheckpointNS, CheckpointID: b.CheckpointID, ParentCheckpointID: b.ParentCheckpointID,
		Checkpoint: b.Checkpoint, Metadata: b.Metadata, Blobs: b.Blobs, UserID: b.UserID, AgentID: b.AgentID, SessionID: b.SessionID}
	if in.Minimal() {
		// The answer is known before the statement runs: in COMMIT's round trip when it can.
		stmt, err := s.JobLog.LangGraphPutStatement(r.Org, in.Job, put)
		if err != nil {
			return nil, err
		}
		if !commitWith(ctx, stmt) {
			if _, err := s.JobLog.LangGraphPut(ctx, r.Tx, r.Org, in.Job, put); err != nil {
				return nil, err
			}
		}
		return &api.PutLangGraphCheckpointOutput{Status: http.StatusNoContent, PreferenceApplied: "return=minimal"}, nil
	}
	res, err := s.JobLog.LangGraphPut(ctx, r.Tx, r.Org, in.Job, put)
	if err != nil {
		return nil, err
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	return &api.PutLangGraphCheckpointOutput{Status: status, Body: res}, nil
}

func (s *Server) putLanggraphWrites(ctx context.Context, r *Request, in *api.PutLangGraphWritesInput) (*api.PutLangGraphWritesOutput, error) {
	b := in.Body
	w := jobs.LangGraphWrites{CheckpointNS: b.CheckpointNS, CheckpointID: b.CheckpointID, TaskID: b.TaskID, TaskPath: b.TaskPath,
		Writes: b.Writes, UserID: b.UserID, AgentID: b.AgentID, SessionID: b.SessionID}
	if in.Minimal() {
		stmt, err := s.JobLog.LangGraphPutWritesStatement(r.Org, in.Job, w)
		if err != nil {
			return nil, err
		}
		if !commitWith(ctx, stmt) {
			if _, _, err := s.JobLog.LangGraphPutWrites(ctx, r.Tx, r.Org, in.Job, w); err != nil {
				return nil, err
			}
		}
		return &api.PutLangGraphWritesOutput{Status: http.StatusNoContent, PreferenceApplied: "return=minimal"}, nil
	}
	n, _, err := s.JobLog.LangGraphPutWrites(ctx, r.Tx, r.Org, in.Job, w)
	if err != nil {
		return nil, err
	}
	out := &api.PutLangGraphWritesOutput{Status: http.StatusOK}
	out.Body.ThreadID, out.Body.CheckpointNS, out.Body.CheckpointID, out.Body.TaskID, out.Body.Stored =
		in.Job, b.CheckpointNS, b.CheckpointID, b.TaskID, n
	return out, nil
}

func (s *Server) getLanggraphCheckpoint(ctx context.Context, r *Request, in *api.GetLangGraphCheckpointInput) (*api.LangGraphTupleOutput, error) {
	t, err := s.Jobs.LangGraphGet(ctx, r.Tx, r.Org, in.Job, in.CheckpointNS, in.CheckpointID)
	if err != nil {
		return nil, err
	}
	return &api.LangGraphTupleOutput{Body: t}, nil
}

func (s *Server) listLanggraphCheckpoints(ctx context.Context, r *Request, in *api.ListLangGraphThreadInput) (*api.ListLangGraphOutput, error) {
	return s.listLangGraph(ctx, r, in.Job, in.LangGraphListQuery)
}

func (s *Server) searchLanggraphCheckpoints(ctx context.Context, r *Request, in *api.SearchLangGraphInput) (*api.ListLangGraphOutput, error) {
	return s.listLangGraph(ctx, r, in.ThreadID, in.LangGraphListQuery)
}

func (s *Server) deleteLanggraphThread(ctx context.Context, r *Request, in *api.JobPath) (*api.DeleteLangGraphThreadOutput, error) {
	deleted, err := s.Jobs.LangGraphDeleteThread(ctx, r.Tx, r.Org, in.Job)
	if err != nil {
		return nil, err
	}
	out := &api.DeleteLangGraphThreadOutput{}
	out.Body.ThreadID, out.Body.Deleted = in.Job, deleted
	return out, nil
}

// listLangGraph lists checkpoint tuples of one thread (or, thread "", of every thread).
func (s *Server) listLangGraph(ctx context.Context, r *Request, thread string, q api.LangGraphListQuery) (*api.ListLangGraphOutput, error) {
	limit, err := q.Page.Size()
	if err != nil {
		return nil, err
	}
	f := jobs.LangGraphListFilter{ThreadID: thread, CheckpointID: q.CheckpointID, Before: q.Before, Filter: q.Filter,
		Cursor: q.Cursor, Limit: limit + 1}
	if q.NamespaceSent() { // present and empty is the root graph; absent is every namespace
		f.CheckpointNS = &q.CheckpointNS
	}
	items, err := s.Jobs.LangGraphList(ctx, r.Tx, r.Org, f)
	if err != nil {
		return nil, err
	}
	return &api.ListLangGraphOutput{Body: page(items, limit, jobs.LangGraphTuple.Cursor)}, nil
}
