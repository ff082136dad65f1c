package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the delivery attempts' counts and times (no org, URL or event label: nothing
// that names a tenant or a receiver).
type Metrics struct {
	attempts *prometheus.CounterVec
	duration prometheus.Histogram
	lag      prometheus.Histogram
}

// NewMetrics builds the delivery metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_webhook_attempts_total", Help: "Webhook delivery attempts, by outcome (delivered, retry, dead).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_webhook_attempt_duration_seconds", Help: "Time of one delivery attempt's request.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_webhook_delivery_lag_seconds", Help: "From a delivery's creation to its successful attempt.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60, 300, 3600},
		}),
	}
	reg.MustRegister(m.attempts, m.duration, m.lag)
	return m
}

func (m *Metrics) observe(o outcome) {
	outcome := o.status
	if outcome == "pending" {
		outcome = "retry"
	}
	m.attempts.WithLabelValues(outcome).Inc()
	m.duration.Observe(float64(o.latency) / 1000)
	if o.status == "delivered" {
		m.lag.Observe(max(o.at.Sub(o.c.d.CreatedAt), 0).Seconds())
	}
}
