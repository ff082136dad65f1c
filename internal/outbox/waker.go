package outbox

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/service"
)

// PeerChannel is the NOTIFY channel a Waker tells the other replicas on (payload: the
// sending Waker's Instance, a space, the org id).
const PeerChannel = "strata_outbox_peers"

// PeerPayload returns the notification a Waker sends for org.
func PeerPayload(instance, org string) string { return instance + " " + org }

// ParsePeer splits a PeerChannel payload into the sending instance and the org.
func ParsePeer(payload string) (instance, org string) {
	instance, org, _ = strings.Cut(payload, " ")
	return instance, org
}

// Waker tells the outbox's readers that a request committed events for an org, without a
// NOTIFY in the request's transaction (a NOTIFY takes a database-wide lock for the rest of
// the commit and writes the notification queue; on every write that is a measurable part of
// the write path, docs/benchmarks.md). Emitted, called once the request has committed, wakes
// this process's readers (Local: its webhook dispatcher and SSE streams) at once, and queues
// the org for the other replicas: a background loop sends one NOTIFY statement on
// PeerChannel per Every for the orgs queued meanwhile, in a transaction of its own that does
// not wait for the WAL flush (a lost notification only delays a reader until its poll).
// Replicas ignore their own notifications.
type Waker struct {
	Pool     *pgxpool.Pool
	Instance string           // this process's id (no spaces), in every notification it sends
	Local    func(org string) // wakes this process's readers
	Every    time.Duration    // the coalescing window; default 50ms
	Log      *slog.Logger

	mu      sync.Mutex
	pending map[string]struct{}
	kick    chan struct{}

	service.StartStop
}

// Emitted reports that org has new committed events. It never blocks on the database.
func (w *Waker) Emitted(org string) {
	if w.Local != nil {
		w.Local(org)
	}
	w.mu.Lock()
	kick := w.kick
	if kick != nil { // started: queue it for the peers
		w.pending[org] = struct{}{}
	}
	w.mu.Unlock()
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// Start runs the loop that notifies the peers, until Stop.
func (w *Waker) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := w.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	kick := make(chan struct{}, 1)
	w.mu.Lock()
	w.pending, w.kick = map[string]struct{}{}, kick
	w.mu.Unlock()
	every := w.Every
	if every <= 0 {
		every = 50 * time.Millisecond
	}
	go func() {
		started()
		defer stopped()
		defer func() {
			w.mu.Lock()
			w.pending, w.kick = nil, nil
			w.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			w.mu.Lock()
			orgs := make([]string, 0, len(w.pending))
			for o := range w.pending {
				orgs = append(orgs, PeerPayload(w.Instance, o))
			}
			clear(w.pending)
			w.mu.Unlock()
			if len(orgs) > 0 {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := w.Pool.Exec(sctx, `SELECT set_config('synchronous_commit', 'off', true),
					pg_notify('`+PeerChannel+`', p) FROM unnest($1::text[]) p`, orgs)
				cancel()
				if err != nil && ctx.Err() == nil && w.Log != nil {
					w.Log.Warn("events: notifying the other replicas failed (their streams catch up at their next poll)", "err", err)
				}
			}
			select { // at most one notification statement per window
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return nil
}
