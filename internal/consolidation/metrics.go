package consolidation

import "github.com/prometheus/client_golang/prometheus"

// Metrics are consolidation's counters, registered on the registry the composition root
// passes in. A nil *Metrics counts nothing (tests that build a Consolidator by hand).
type Metrics struct {
	// Consolidated counts consolidation results, by task (job_summary, compacted_events,
	// merged, promoted).
	Consolidated *prometheus.CounterVec
	// SummarizerFailures counts LLM summaries that failed and fell back to the extractive one.
	SummarizerFailures prometheus.Counter
}

// NewMetrics builds consolidation's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consolidated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_consolidated_total", Help: "Items consolidated, by task: job_summary, compacted_events, merged, promoted.",
		}, []string{"task"}),
		SummarizerFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_consolidation_llm_failures_total", Help: "LLM job summaries that failed (the extractive summary was written instead).",
		}),
	}
	reg.MustRegister(m.Consolidated, m.SummarizerFailures)
	return m
}

func (m *Metrics) consolidated(task string, n int) {
	if m != nil {
		m.Consolidated.WithLabelValues(task).Add(float64(n))
	}
}

func (m *Metrics) summarizerFailed() {
	if m != nil {
		m.SummarizerFailures.Inc()
	}
}
