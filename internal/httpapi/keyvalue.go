package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/keyvalue"
)

func kvIfMatch(h string) (*int64, error) {
	v, ok, err := ifMatch(h)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

func entryOut(e keyvalue.KVEntry, created bool) *api.KvEntryOutput {
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return &api.KvEntryOutput{Status: status, ETag: etag(e.Version), Body: e}
}

func (s *Server) putKv(ctx context.Context, r *Request, in *api.KvPutInput) (*api.KvEntryOutput, error) {
	im, err := kvIfMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	inm, err := keyvalue.ParseIfNoneMatch(in.IfNoneMatch)
	if err != nil {
		return nil, err
	}
	e, created, err := s.KV.Put(ctx, r.Tx, r.AfterCommit, keyvalue.WriteInput{
		Namespace: in.Namespace, Key: in.Key, Scope: in.Body.Scope(r.Org), Value: in.Body.Value,
		TTL: time.Duration(in.Body.TTLSeconds) * time.Second, IfMatch: im, IfNoneMatch: inm, Actor: r.Caller.KeyID,
	})
	if err != nil {
		return nil, err
	}
	return entryOut(e, created), nil
}

func (s *Server) getKv(ctx context.Context, r *Request, in *api.KvGetInput) (*api.KvEntryOutput, error) {
	e, err := s.KV.Get(ctx, in.Namespace, in.Key, in.Scope(r.Org), in.Exact)
	if err != nil {
		return nil, err
	}
	return entryOut(e, false), nil
}

func (s *Server) deleteKv(ctx context.Context, r *Request, in *api.KvDeleteInput) (*api.KvEntryOutput, error) {
	im, err := kvIfMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	e, err := s.KV.Delete(ctx, r.Tx, r.AfterCommit, in.Namespace, in.Key, in.Scope(r.Org), im, r.Caller.KeyID)
	if err != nil {
		return nil, err
	}
	return entryOut(e, false), nil
}

func (s *Server) kvHistory(ctx context.Context, r *Request, in *api.KvHistoryInput) (*api.KvHistoryOutput, error) {
	l, err := listPage(in.Page, func(v keyvalue.KVVersion) string { return strconv.FormatInt(v.Version, 10) }, func(n int) ([]keyvalue.KVVersion, error) {
		return s.KV.History(ctx, in.Namespace, in.Key, in.Scope(r.Org), in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.KvHistoryOutput{Body: l}, nil
}

func (s *Server) restoreKv(ctx context.Context, r *Request, in *api.KvRestoreInput) (*api.KvEntryOutput, error) {
	im, err := kvIfMatch(in.IfMatch)
	if err != nil {
		return nil, err
	}
	e, created, err := s.KV.Restore(ctx, r.Tx, r.AfterCommit, keyvalue.WriteInput{
		Namespace: in.Namespace, Key: in.Key, Scope: in.Body.Scope(r.Org), RestoreVersion: in.Body.Version,
		TTL: time.Duration(in.Body.TTLSeconds) * time.Second, IfMatch: im, Actor: r.Caller.KeyID,
	})
	if err != nil {
		return nil, err
	}
	return entryOut(e, created), nil
}

func (s *Server) listKv(ctx context.Context, r *Request, in *api.KvListInput) (*api.KvListOutput, error) {
	l, err := listPage(in.Page, func(e keyvalue.KVEntry) string { return e.Key }, func(n int) ([]keyvalue.KVEntry, error) {
		return s.KV.List(ctx, in.Namespace, in.Scope(r.Org), in.Resolve, in.Cursor, n)
	})
	if err != nil {
		return nil, err
	}
	return &api.KvListOutput{Body: l}, nil
}

func (s *Server) batchGetKv(ctx context.Context, r *Request, in *api.KvBatchGetInput) (*api.KvBatchGetOutput, error) {
	es, err := s.KV.GetMany(ctx, in.Namespace, in.Body.Keys, in.Body.Scope(r.Org), in.Body.Exact)
	if err != nil {
		return nil, err
	}
	out := &api.KvBatchGetOutput{}
	out.Body.Items, out.Body.Missing = []keyvalue.KVEntry{}, []string{}
	for i, e := range es {
		if e == nil {
			out.Body.Missing = append(out.Body.Missing, in.Body.Keys[i])
			continue
		}
		out.Body.Items = append(out.Body.Items, *e)
	}
	return out, nil
}
