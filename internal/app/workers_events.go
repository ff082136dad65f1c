package app

import (
	"time"

	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/telemetry"
	"github.com/strata-mem/strata/internal/watch"
	"github.com/strata-mem/strata/internal/webhooks"
)

// eventWorkers registers the webhook delivery worker (pings and redeliveries, docs/events.md)
// on workers and returns the dispatcher (outbox → deliveries sent by its Deliverer's
// senders, retries, and the sweep of interrupted deliveries) and the
// watcher (stalled jobs, erasure deadlines → events); serve starts and stops them with the
// other background services. Call it before the River client is created.
func (p *parts) eventWorkers(workers *river.Workers) (*webhooks.Dispatcher, *watch.Watcher) {
	cfg, log := p.cfg, p.log.With("component", "events")
	client := webhooks.NewClient(cfg.WebhookTimeout, cfg.WebhookAllowPrivate)
	if p.tracing { // deliveries carry the traceparent of the job that sends them
		client.Transport = telemetry.Transport(client.Transport)
	}
	deliverer := &webhooks.Deliverer{Pool: p.pool, Store: p.webhooks, Client: client, Metrics: webhooks.NewMetrics(p.metrics),
		MaxAttempts: cfg.WebhookMaxAttempts, Backoff: cfg.WebhookBackoff, RequestTimeout: cfg.WebhookTimeout, Log: log}
	river.AddWorker(workers, deliverer) // pings and redeliveries
	d := &webhooks.Dispatcher{Pool: p.pool, Store: p.webhooks, Deliverer: deliverer, ExtraOrg: cfg.AdminOrg, Log: log,
		SweepEvery: max(cfg.WebhookTimeout, time.Second)}
	w := &watch.Watcher{Pool: p.pool, Jobs: p.jobs, Interval: cfg.EventsWatchInterval, Retention: cfg.EventsRetention, ExtraOrg: cfg.AdminOrg, Log: log}
	return d, w
}
