package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// createMemories writes a batch (POST /v1/memories/batch): items the tier refuses are
// answered failed, the rest are written by one IngestBatch, which embeds them chunk by chunk
// while the previous chunk's rows are inserted.
func (s *Server) createMemories(ctx context.Context, r *Request, in *api.CreateMemoriesInput) (*api.CreateMemoriesOutput, error) {
	items := in.Body.Memories
	out := &api.CreateMemoriesOutput{}
	out.Body.Items = make([]api.BatchMemoryResult, len(items))
	var news []semantic.NewMemory
	var at []int // news[k] is items[at[k]]
	for i, b := range items {
		n := semantic.NewMemory{Scope: b.Scope(r.Org), Kind: cmp.Or(b.Kind, semantic.KindFact), Text: b.Text,
			Metadata: b.Metadata, Importance: 0.5, Pinned: b.Pinned, Trust: b.Trust,
			Provenance: provenance(ctx, b.Provenance), Space: s.space}
		if b.Importance != nil {
			n.Importance = *b.Importance
		}
		out.Body.Items[i].Index = i
		if err := n.Validate(); err != nil {
			p, perr := s.itemProblem(ctx, i, err)
			if perr != nil {
				return nil, perr
			}
			out.Body.Items[i].Status, out.Body.Items[i].Error = "failed", p
			out.Body.Failed++
			continue
		}
		news = append(news, n)
		at = append(at, i)
	}
	res, err := s.Memories.IngestBatch(ctx, r.Tx, news, s.Embedder.Embed)
	if err != nil {
		return nil, err
	}
	// New memories of a restricted subject are stored (Art. 18(2)); an item that found a
	// stored duplicate of theirs acted on it and would answer with it: the batch is
	// refused and rolls back.
	var dupUsers []string
	for k, rr := range res {
		if rr.Dedup != nil && rr.DuplicateOf < 0 {
			dupUsers = append(dupUsers, news[k].Scope.UserID)
		}
	}
	if err := s.Restrictions.Refuse(ctx, r.sess, r.Org, dupUsers...); err != nil {
		return nil, err
	}
	for k, rr := range res {
		item := &out.Body.Items[at[k]]
		m := rr.Memory
		item.Memory, item.Dedup = &m, rr.Dedup
		if rr.Dedup == nil {
			item.Status = "created"
			out.Body.Created++
			continue
		}
		item.Status = "deduplicated"
		out.Body.Deduplicated++
		if rr.DuplicateOf >= 0 {
			j := at[rr.DuplicateOf]
			item.DuplicateOf = &j
		}
	}
	return out, nil
}

// itemProblem is a batch item's field error as the problem its single write would answer,
// located in the batch (body.memories[3].metadata). Any other error fails the batch.
func (s *Server) itemProblem(ctx context.Context, i int, err error) (*api.BatchItemProblem, error) {
	var fe *strata.FieldError
	if !errors.As(err, &fe) {
		return nil, err
	}
	located := *fe
	located.Field = fmt.Sprintf("body.memories[%d].%s", i, fe.Field)
	var em *huma.ErrorModel
	if !errors.As(s.problem(ctx, &located), &em) {
		return nil, err
	}
	return &api.BatchItemProblem{Status: em.Status, Detail: em.Detail, Errors: em.Errors}, nil
}
