package extraction

import "github.com/prometheus/client_golang/prometheus"

// Metrics count extraction (no labels carry content or subjects).
type Metrics struct {
	runs      *prometheus.CounterVec
	decisions *prometheus.CounterVec
	graph     *prometheus.CounterVec
	calls     prometheus.Counter
	tokens    *prometheus.CounterVec
	refused   *prometheus.CounterVec
}

// NewMetrics registers the extraction metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_extraction_runs_total",
			Help: "Extraction runs by outcome (extracted, failed, restricted, rate_limited, stale)."}, []string{"status"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_extraction_decisions_total",
			Help: "Applied extraction decisions by kind and op."}, []string{"kind", "op"}),
		graph: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_extraction_graph_total",
			Help: "Entities and relations extraction applied, by kind (entity, relation) and result."}, []string{"kind", "result"}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_extraction_llm_calls_total",
			Help: "Chat-completion calls made by extraction."}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_extraction_llm_tokens_total",
			Help: "Tokens the model reported for extraction calls."}, []string{"type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_extraction_rate_limited_total",
			Help: "Extraction calls refused by the org's hourly limits."}, []string{"limit"}),
	}
	reg.MustRegister(m.runs, m.decisions, m.graph, m.calls, m.tokens, m.refused)
	return m
}

func (m *Metrics) run(status string) {
	if m != nil {
		m.runs.WithLabelValues(status).Inc()
	}
}

func (m *Metrics) call(u Usage) {
	if m != nil {
		m.calls.Add(float64(u.Calls))
		m.tokens.WithLabelValues("prompt").Add(float64(u.PromptTokens))
		m.tokens.WithLabelValues("completion").Add(float64(u.CompletionTokens))
	}
}

func (m *Metrics) decided(d Decisions) {
	if m != nil {
		for _, x := range d.Decisions {
			m.decisions.WithLabelValues(x.Kind, x.Op).Inc()
		}
		for _, e := range d.Entities {
			if e.Result != "" {
				m.graph.WithLabelValues("entity", e.Result).Inc()
			}
		}
		for _, r := range d.Relations {
			if r.Result != "" {
				m.graph.WithLabelValues("relation", r.Result).Inc()
			}
		}
	}
}

func (m *Metrics) limited(which string) {
	if m != nil {
		m.refused.WithLabelValues(which).Inc()
	}
}
