package policy

import (
	"time"

	"github.com/strata-mem/strata/internal/strata"
)

// ExtractionRules govern conversation-memory extraction (internal/extraction,
// docs/extraction.md): facts and preferences the org's LLM extracts from session turns.
type ExtractionRules struct {
	Enabled          *bool   `json:"enabled,omitempty" doc:"Extract memories from session turns in the background (needs STRATA_LLM_MODEL on the server). Default (unset) off; set to false, the org also refuses on-demand extraction (extract, /mem0 infer, graph: true) before any model call."`
	Debounce         *string `json:"debounce,omitempty" maxLength:"32" doc:"Extract once a session has been quiet this long (Go duration or days)."`
	EveryTurns       *int    `json:"every_turns,omitempty" minimum:"0" maximum:"10000" doc:"Also extract as soon as this many turns are waiting, quiet or not. 0: only after the debounce."`
	Model            *string `json:"model,omitempty" maxLength:"200" doc:"The chat model to ask (default: the server's STRATA_LLM_MODEL)."`
	MaxCallsPerHour  *int    `json:"max_calls_per_hour,omitempty" minimum:"0" maximum:"10000000" doc:"LLM calls extraction may make per hour for the org (0: none)."`
	MaxTokensPerHour *int    `json:"max_tokens_per_hour,omitempty" minimum:"0" maximum:"2000000000" doc:"Tokens (prompt + completion, as the model reports them) per hour for the org (0: none)."`
}

// Extraction is the compiled ExtractionRules.
type Extraction struct {
	// Enabled: extraction runs in the background (default off).
	Enabled bool
	// Off: the org's policy says "enabled": false itself, as opposed to leaving it unset.
	// Then nothing is extracted for the org at all: the on-demand routes (extract, /mem0's
	// infer, a memory's "graph": true) refuse before any model call. Left unset, background
	// extraction is off and on-demand extraction answers whoever asks (the Mem0 API's infer
	// works out of the box).
	Off              bool
	Debounce         time.Duration
	EveryTurns       int
	Model            string
	MaxCallsPerHour  int
	MaxTokensPerHour int
}

func defaultExtraction() ExtractionRules {
	return ExtractionRules{Enabled: bp(false), Debounce: sp("30s"), EveryTurns: ip(20), Model: sp(""),
		MaxCallsPerHour: ip(1000), MaxTokensPerHour: ip(2_000_000)}
}

func fillExtraction(p, d ExtractionRules) ExtractionRules {
	if d.Enabled == nil {
		d = defaultExtraction()
	}
	out := d
	if p.Enabled != nil {
		out.Enabled = p.Enabled
	}
	if p.Debounce != nil {
		out.Debounce = p.Debounce
	}
	if p.EveryTurns != nil {
		out.EveryTurns = p.EveryTurns
	}
	if p.Model != nil {
		out.Model = p.Model
	}
	if p.MaxCallsPerHour != nil {
		out.MaxCallsPerHour = p.MaxCallsPerHour
	}
	if p.MaxTokensPerHour != nil {
		out.MaxTokensPerHour = p.MaxTokensPerHour
	}
	return out
}

func compileExtraction(r ExtractionRules, errs *[]error) Extraction {
	x := defaultExtraction()
	r = fillExtraction(r, x)
	e := Extraction{Enabled: *r.Enabled, EveryTurns: *r.EveryTurns, Model: *r.Model,
		MaxCallsPerHour: *r.MaxCallsPerHour, MaxTokensPerHour: *r.MaxTokensPerHour}
	d, err := ParseDuration(*r.Debounce)
	if err != nil {
		*errs = append(*errs, strata.Invalid("extraction.debounce", "%s", err.Error()))
	}
	if d > 24*time.Hour {
		*errs = append(*errs, strata.Invalid("extraction.debounce", "must be at most 24h"))
	}
	e.Debounce = d
	if e.EveryTurns < 0 {
		*errs = append(*errs, strata.Invalid("extraction.every_turns", "must not be negative"))
	}
	if e.Model != "" && strata.CheckText("model", e.Model) != nil {
		*errs = append(*errs, strata.Invalid("extraction.model", "must be a model name"))
	}
	if e.MaxCallsPerHour < 0 || e.MaxTokensPerHour < 0 {
		*errs = append(*errs, strata.Invalid("extraction", "limits must not be negative"))
	}
	return e
}
