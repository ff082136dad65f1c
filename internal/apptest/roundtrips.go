package apptest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/httpops"
)

// RoundTrips is a pgx tracer (pass it with Tracer) that records, per request, what the server
// sends to Postgres on the request's behalf: a batch (one pipeline) is one round trip
// whatever it holds, a statement sent on its own is one. Requests are told apart by their
// X-Request-Id, so a test sends one; statements of the server's background work carry none
// and are not recorded. Not seen: the one-time description of a statement new to a
// connection (pgx caches statements per connection and traces no describe of a batch's), so
// a test counts warm calls.
type RoundTrips struct {
	mu  sync.Mutex
	req map[string]*Trips
}

// NewRoundTrips returns an empty recorder.
func NewRoundTrips() *RoundTrips { return &RoundTrips{req: map[string]*Trips{}} }

// Trips is what one request sent: its round trips in order, each the statements it carried
// (whitespace collapsed).
type Trips [][]string

// Statements is the number of statements over every round trip.
func (t Trips) Statements() int {
	n := 0
	for _, trip := range t {
		n += len(trip)
	}
	return n
}

// Fewer reports whether t sent fewer round trips than u, or as many with fewer statements:
// the call a test keeps of several warm ones (a call on a connection new to a statement
// pays its description once, untraced). Anything is fewer than no call (nil).
func (t Trips) Fewer(u Trips) bool {
	return u == nil || len(t) < len(u) || (len(t) == len(u) && t.Statements() < u.Statements())
}

// String is one line per round trip, its statements shortened.
func (t Trips) String() string {
	var b strings.Builder
	for i, trip := range t {
		short := make([]string, len(trip))
		for j, s := range trip {
			if len(s) > 90 {
				s = s[:90] + "…"
			}
			short[j] = s
		}
		fmt.Fprintf(&b, "  %d: [%s]\n", i+1, strings.Join(short, " | "))
	}
	return b.String()
}

// ended reports whether the request's transaction ended (a COMMIT or ROLLBACK was sent).
func (t Trips) ended() bool {
	for _, trip := range t {
		for _, s := range trip {
			if u := strings.ToUpper(s); u == "COMMIT" || u == "ROLLBACK" {
				return true
			}
		}
	}
	return false
}

// Of returns what the request with id sent so far.
func (r *RoundTrips) Of(id string) Trips {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.req[id]; t != nil {
		out := make(Trips, len(*t))
		for i, trip := range *t {
			out[i] = append([]string(nil), trip...)
		}
		return out
	}
	return nil
}

// Ended waits until the request with id has ended its transaction (a read may roll back
// after its response, off the request's path), then a moment more for anything sent after
// that, and returns what it sent.
func (r *RoundTrips) Ended(t testing.TB, id string) Trips {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r.Of(id).ended() {
			time.Sleep(50 * time.Millisecond)
			return r.Of(id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("apptest: request %s did not end its transaction within 10s; it sent:\n%s", id, r.Of(id))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type tripKey struct{}

// trip is the round trip a batch's statements are added to.
type trip struct {
	id string
	i  int
}

func normalize(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// add starts a round trip of request id, with its first statement when sql is not "".
func (r *RoundTrips) add(id, sql string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.req[id]
	if t == nil {
		t = &Trips{}
		r.req[id] = t
	}
	var stmts []string
	if sql != "" {
		stmts = []string{normalize(sql)}
	}
	*t = append(*t, stmts)
	return len(*t) - 1
}

// TraceQueryStart records a statement sent on its own: one round trip.
func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if id := httpops.RequestID(ctx); id != "" {
		r.add(id, d.SQL)
	}
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a batch: one round trip, its statements added as pgx reads them.
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	id := httpops.RequestID(ctx)
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, tripKey{}, trip{id: id, i: r.add(id, "")})
}

// TraceBatchQuery adds one statement to its batch's round trip.
func (r *RoundTrips) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	tr, ok := ctx.Value(tripKey{}).(trip)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := *r.req[tr.id]
	t[tr.i] = append(t[tr.i], normalize(d.SQL))
}

// TraceBatchEnd is part of pgx.BatchTracer.
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
