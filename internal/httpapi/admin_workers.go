package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/pg"
)

type evictionOutput struct {
	Body eviction.EvictionReport
}

type consolidationInput struct {
	Body *struct {
		Tasks []string `json:"tasks,omitempty" maxItems:"4" doc:"Any of job_summaries, compaction, merge, promotion (default all, in that order)."`
	}
}

type consolidationOutput struct {
	Body consolidation.ConsolidationReport
}

// registerLifecycleAdmin registers the policy, eviction and consolidation endpoints and
// the worker metrics.
func (s *Server) registerLifecycleAdmin() {
	s.metrics.reg.MustRegister(eviction.Collectors(s.pool)...)
	s.registerPolicies()

	ev := eviction.FromConfig(s.cfg, s.pool, s.rdb, s.log, nil)
	emb := s.emb
	if emb == nil {
		e, err := embed.New(s.cfg)
		if err != nil {
			e = embed.NewLexical(s.cfg.EmbeddingDims)
		}
		emb = e
	}
	cons, err := consolidation.FromConfig(s.cfg, s.pool, emb, s.log, nil)
	if err != nil {
		// The configuration was validated at start; an LLM client that cannot be built
		// leaves the extractive summaries.
		s.log.Warn("consolidation: LLM summarizer unavailable; using extractive summaries", "err", err)
		cfg := s.cfg
		cfg.LLMModel = ""
		cons, _ = consolidation.FromConfig(cfg, s.pool, emb, s.log, nil)
	}
	tags := []string{"admin"}

	runEviction := func(ctx context.Context, apply bool) (*evictionOutput, error) {
		tx, err := pg.TxFrom(ctx)
		if err != nil {
			return nil, err
		}
		p, _ := auth.FromContext(ctx)
		rep, after, err := ev.Run(ctx, tx, p.OrgID, apply, eviction.Actor{KeyID: p.KeyID, Role: string(p.Role), RequestID: requestID(ctx)})
		if err != nil {
			return nil, err
		}
		pg.SessionFrom(ctx).AfterCommit(func() { after(context.WithoutCancel(ctx)) })
		return &evictionOutput{Body: rep}, nil
	}
	register(s, adminRoles, huma.Operation{
		OperationID: "preview-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/preview", Tags: tags,
		Summary: "What eviction would remove now (changes nothing)",
		Description: "Evaluates the org's policy now and answers, per tier, reason and memory kind, how many items a run " +
			"would remove and up to 10 of their ids. POST /v1/admin/eviction/run at the same moment removes exactly these.",
	}, func(ctx context.Context, _ *struct{}) (*evictionOutput, error) { return runEviction(ctx, false) })
	register(s, adminRoles, huma.Operation{
		OperationID: "run-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/run", Tags: tags,
		Summary: "Apply the eviction policy now",
		Description: "Removes what the preview reports (up to 5000 items per rule per call; `more: true` says a rule has " +
			"more) and writes one audit record per rule (action evict: ids, policy, reason, counts; never content). " +
			"The periodic job does the same every STRATA_EVICTION_INTERVAL.",
	}, func(ctx context.Context, _ *struct{}) (*evictionOutput, error) { return runEviction(ctx, true) })

	register(s, adminRoles, huma.Operation{
		OperationID: "run-consolidation", Method: http.MethodPost, Path: "/v1/admin/consolidation/run", Tags: tags,
		Summary: "Consolidate now",
		Description: "Runs, in this request, the org's pending job summaries (job_outbox rows another worker is not " +
			"holding), episodic compaction, near-duplicate merge and promotion, and answers what each did (with the " +
			"promotion score of each evaluated cluster). Background workers do the same continuously.",
	}, func(ctx context.Context, in *consolidationInput) (*consolidationOutput, error) {
		var tasks []string
		if in.Body != nil {
			tasks = in.Body.Tasks
		}
		tasks, err := consolidation.ValidTasks(tasks)
		if err != nil {
			return nil, err
		}
		tx, err := pg.TxFrom(ctx)
		if err != nil {
			return nil, err
		}
		rep, after, err := cons.RunTx(ctx, tx, orgOf(ctx), tasks)
		if err != nil {
			return nil, err
		}
		pg.SessionFrom(ctx).AfterCommit(after)
		return &consolidationOutput{Body: rep}, nil
	})
}
