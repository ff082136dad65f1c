package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/eviction"
)

type EvictionOutput struct {
	Body eviction.EvictionReport
}

type ConsolidationInput struct {
	Body *struct {
		Tasks []string `json:"tasks,omitempty" maxItems:"4" doc:"Any of job_summaries, compaction, merge, promotion (default all, in that order)."`
	}
}

type ConsolidationOutput struct {
	Body consolidation.ConsolidationReport
}

var OpPreviewEviction = huma.Operation{
	OperationID: "preview-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/preview", Tags: []string{"admin"},
	Summary: "What eviction would remove now (changes nothing)",
	Description: "Evaluates the org's policy now and answers, per tier, reason and memory kind, how many items a run " +
		"would remove and up to 10 of their ids. POST /v1/admin/eviction/run at the same moment removes exactly these.",
}

var OpRunEviction = huma.Operation{
	OperationID: "run-eviction", Method: http.MethodPost, Path: "/v1/admin/eviction/run", Tags: []string{"admin"},
	Summary: "Apply the eviction policy now",
	Description: "Removes what the preview reports (up to 5000 items per rule per call; `more: true` says a rule has " +
		"more) and writes one audit record per rule (action evict: ids, policy, reason, counts; never content). " +
		"The periodic job does the same every STRATA_EVICTION_INTERVAL.",
}

var OpRunConsolidation = huma.Operation{
	OperationID: "run-consolidation", Method: http.MethodPost, Path: "/v1/admin/consolidation/run", Tags: []string{"admin"},
	Summary: "Consolidate now",
	Description: "Runs, in this request, the org's pending job summaries (job_outbox rows another worker is not " +
		"holding), episodic compaction, near-duplicate merge and promotion, and answers what each did (with the " +
		"promotion score of each evaluated cluster). Background workers do the same continuously.",
}
