package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// emit queues e in the request's transaction, at COMMIT (internal/outbox): the event exists
// exactly when the request's writes commit, and costs no round trip of its own. Once the
// request has committed, Emitted (or the broker) is told the org has news; a request that
// rolls back tells nobody.
func (s *Server) emit(r *Request, e outbox.New) {
	if s.Options.NoEvents {
		return
	}
	sql, args, err := outbox.EmitSQL(r.Org, e)
	if err != nil { // only an unencodable payload, which our own fixed payloads never are
		s.Log.Error("event not emitted", "type", e.Type, "err", err)
		return
	}
	r.AtCommit(sql, args...)
	if !r.emitted {
		r.emitted = true
		org := r.Org
		r.AfterCommit(func() {
			if s.Emitted != nil {
				s.Emitted(org)
			} else {
				s.EventBroker.Notify(org)
			}
		})
	}
}

// EventBroker wakes the SSE streams of an org when its outbox has new events (app calls
// Notify once a request of this server that emitted has committed, and for the outbox's
// notifications: workers' emissions, other replicas' writes). Streams also poll, so a lost
// notification only delays them.
type EventBroker struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
	// ending is closed by EndStreams: every stream tells its client to reconnect and ends.
	ending  chan struct{}
	endOnce sync.Once
}

// NewEventBroker returns an empty broker.
func NewEventBroker() *EventBroker {
	return &EventBroker{subs: map[string]map[chan struct{}]struct{}{}, ending: make(chan struct{})}
}

// EndStreams ends every open stream of this server, and any opened after: each sends a
// retry hint and ends, so its client resumes with Last-Event-ID (on another replica). The
// server calls it when it starts to drain at shutdown, so streams do not hold the drain.
func (b *EventBroker) EndStreams() {
	if b == nil {
		return
	}
	b.endOnce.Do(func() { close(b.ending) })
}

// ended is closed once EndStreams was called (never for a nil broker).
func (b *EventBroker) ended() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.ending
}

// Notify wakes org's streams.
func (b *EventBroker) Notify(org string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.subs[org] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (b *EventBroker) subscribe(org string) (chan struct{}, func()) {
	c := make(chan struct{}, 1)
	if b == nil {
		return c, func() {}
	}
	b.mu.Lock()
	if b.subs[org] == nil {
		b.subs[org] = map[chan struct{}]struct{}{}
	}
	b.subs[org][c] = struct{}{}
	b.mu.Unlock()
	return c, func() {
		b.mu.Lock()
		delete(b.subs[org], c)
		if len(b.subs[org]) == 0 {
			delete(b.subs, org)
		}
		b.mu.Unlock()
	}
}

// streamEvents serves GET /v1/events/stream: Server-Sent Events of the caller's org, from the
// outbox (so a stream resumes after a restart of any server): "id" is the event's seq,
// "event" its type, "data" the event as JSON. Filters: types (comma-separated or repeated),
// job. Resume with the Last-Event-ID header (or ?after=): events after it, none skipped, none
// repeated (an org's seqs grow in commit order, internal/outbox). A ": heartbeat" comment keeps idle
// connections open. The stream holds no transaction between reads. It lives until its
// client leaves, its key is revoked or the server drains (EndStreams: a retry hint, then
// the end): not bounded by the request timeout, while each read of the outbox is bounded by
// the store timeout.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	q := r.URL.Query()
	var types []string
	for _, v := range q["types"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
	}
	bad := func(err error) { // a field error of the query (or the Last-Event-ID header)
		var fe *strata.FieldError
		if errors.As(err, &fe) {
			loc := "query." + fe.Field
			if fe.Field == "Last-Event-ID" {
				loc = "header.Last-Event-ID"
			}
			httpops.WriteProblem(w, r, http.StatusUnprocessableEntity, "invalid "+loc, nil, &huma.ErrorDetail{Location: loc, Message: fe.Msg})
			return
		}
		httpops.WriteProblem(w, r, http.StatusUnprocessableEntity, err.Error(), nil)
	}
	if err := outbox.CheckTypes("types", types); err != nil {
		bad(err)
		return
	}
	job := q.Get("job")
	if err := strata.CheckID("job", job, true); err != nil {
		bad(err)
		return
	}
	after := int64(0)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("after")
	}
	if last != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(last), 10, 64)
		if err != nil || n < 0 {
			bad(strata.Invalid("Last-Event-ID", "must be an event id (seq) this stream sent"))
			return
		}
		after = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		httpops.WriteProblem(w, r, http.StatusInternalServerError, "streaming is not supported on this connection", nil)
		return
	}
	// The stream outlives the request timeout: it ends with its client, its key or the
	// server's drain.
	ctx, cancel := httpops.WithoutRequestTimeout(r.Context())
	defer cancel()
	wake, unsubscribe := s.EventBroker.subscribe(p.OrgID)
	defer unsubscribe()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 1000\n: strata events after %d\n\n", after)
	flusher.Flush()

	heartbeat := s.Options.EventsHeartbeat
	if heartbeat <= 0 {
		heartbeat = 15 * time.Second
	}
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	ending := s.EventBroker.ended()
	// The stream lives as long as its key: a revocation heard on this replica (every
	// replica hears it, internal/auth) makes it check the key; while revocations are not
	// heard (the listener reconnecting) it checks on every poll.
	revoked := s.Keys.Revoked()
	keyGone := func() bool {
		kctx, cancel := context.WithTimeout(ctx, s.Options.StoreTimeout+time.Second)
		defer cancel()
		ok, err := s.Keys.Active(kctx, p.KeyID)
		if err != nil || !ok { // fail closed: the client reconnects and authenticates afresh
			fmt.Fprint(w, ": the key was revoked or could not be checked; the stream ends\n\n")
			flusher.Flush()
			return true
		}
		return false
	}
	for {
		for {
			evs, err := s.readEvents(ctx, p.OrgID, outbox.Filter{After: after, Types: types, JobID: job, Limit: 500})
			if err != nil {
				if ctx.Err() == nil {
					s.Log.WarnContext(ctx, "event stream read failed; closing the stream", "err", err)
				}
				return
			}
			for _, e := range evs {
				b, _ := json.Marshal(e)
				fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
				after = e.Seq
			}
			if len(evs) > 0 {
				flusher.Flush()
			}
			if len(evs) < 500 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ending:
			// The server drains: the client reconnects (to another replica) after a second and
			// resumes after the last id it got.
			fmt.Fprint(w, ": the server is shutting down; reconnect with Last-Event-ID\nretry: 1000\n\n")
			flusher.Flush()
			return
		case <-revoked:
			revoked = s.Keys.Revoked()
			if keyGone() {
				return
			}
		case <-wake:
		case <-poll.C:
			if !s.Keys.Listening() && keyGone() {
				return
			}
		case <-hb.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

// readEvents reads a page of events in a short transaction of its own.
func (s *Server) readEvents(ctx context.Context, org string, f outbox.Filter) ([]outbox.Event, error) {
	var out []outbox.Event
	rctx, cancel := context.WithTimeout(ctx, s.Options.StoreTimeout+time.Second)
	defer cancel()
	err := pg.InOrgTx(rctx, s.Pool, org, func(tx pgx.Tx) error {
		var err error
		out, err = outbox.List(rctx, tx, org, f)
		return err
	})
	return out, err
}
