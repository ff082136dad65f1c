package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Group commit for event appends (POST /v1/jobs/{job}/events), the busiest write of an
// agent turn. Appends of one org that arrive while an earlier group is being written wait
// and are written together: one transaction, one statement for all their events (any jobs),
// one for their audit records, one claiming and one completing their Idempotency-Keys, one
// COMMIT. Each request still gets exactly what it would have alone — its events at gap-free
// seqs, its audit record, its idempotency record, the same response, sent only after the
// COMMIT — and nothing changes for a request that cannot join:
//
//   - anything the single-request path would refuse (bad body, bad job id, wrong role,
//     events with per-event idempotency keys, a key whose record exists: replay, mismatch or
//     in progress), and anything but plain JSON in and out, takes the single-request path,
//     which answers exactly as before;
//   - when a group fails before its COMMIT was sent (a statement failed, a lock wait ran
//     over groupLockTimeout), it rolled back as a whole and every member runs again on the
//     single-request path, so one bad member costs the others a retry, never a write;
//   - when the COMMIT's outcome is unknown (the connection broke), every member is answered
//     503, as the single-request path would be.
//
// There is no timer: the first append of an idle org is written at once (a group of one);
// groups form only from appends that arrive while earlier ones are in flight, so a group
// adds no latency of its own. STRATA_GROUP_COMMIT=false turns it off.

// appendRoute is the route group commit serves.
const appendRoute = "/v1/jobs/{job}/events"

const (
	maxGroupMembers  = 64                     // requests in one group
	maxGroupsPerOrg  = 2                      // groups of one org in flight at once
	groupLockTimeout = 500 * time.Millisecond // a group waits no longer for a row lock
)

// errFallback sends a member back to the single-request path.
var errFallback = errors.New("httpapi: take the single-request path")

type groupMember struct {
	item  *episodic.GroupItem
	array bool
	audit audit.Entry
	claim *idempotency.Claimant // nil without Idempotency-Key
	// deadline is the request's: a group ends by its earliest member's deadline, so no
	// request waits longer for its group than it would for its own transaction.
	deadline time.Time

	body []byte // the response, once committed
	err  error  // errFallback, or why the commit failed
	done chan struct{}
}

type groupQueue struct {
	pending []*groupMember
	running int
}

type groupCommitter struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	ttl     time.Duration // of idempotency records
	mu      sync.Mutex
	orgs    map[string]*groupQueue

	size      prometheus.Histogram
	fallbacks *prometheus.CounterVec
}

func newGroupCommitter(pool *pgxpool.Pool, timeout, ttl time.Duration, reg prometheus.Registerer) *groupCommitter {
	g := &groupCommitter{pool: pool, timeout: timeout, ttl: ttl, orgs: map[string]*groupQueue{},
		size: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_group_commit_size",
			Help:    "Event-append requests written per group commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_group_commit_fallbacks_total",
			Help: "Event appends a group sent back to the single-request path, by reason.",
		}, []string{"reason"}),
	}
	reg.MustRegister(g.size, g.fallbacks)
	return g
}

// submit queues m for org's next group and returns once m was committed or sent back. A
// request whose context ends while it still waits in the queue leaves it (errFallback: the
// single-request path then answers the ended context as it always does); once its group
// is being written it waits for the outcome.
func (g *groupCommitter) submit(ctx context.Context, org string, m *groupMember) {
	m.done = make(chan struct{})
	g.mu.Lock()
	q := g.orgs[org]
	if q == nil {
		q = &groupQueue{}
		g.orgs[org] = q
	}
	q.pending = append(q.pending, m)
	start := q.running < maxGroupsPerOrg
	if start {
		q.running++
	}
	g.mu.Unlock()
	if start {
		go g.drain(org, q)
	}
	select {
	case <-m.done:
		return
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(q.pending, m); i >= 0 {
		q.pending = slices.Delete(q.pending, i, i+1)
		g.mu.Unlock()
		m.err = errFallback
		g.fallbacks.WithLabelValues("context").Inc()
		return
	}
	g.mu.Unlock()
	<-m.done
}

// drain writes org's queued appends, a group at a time, until none are left.
func (g *groupCommitter) drain(org string, q *groupQueue) {
	for {
		g.mu.Lock()
		if len(q.pending) == 0 {
			q.running--
			if q.running == 0 {
				delete(g.orgs, org)
			}
			g.mu.Unlock()
			return
		}
		n := min(len(q.pending), maxGroupMembers)
		group := q.pending[:n:n]
		q.pending = append([]*groupMember(nil), q.pending[n:]...)
		g.mu.Unlock()
		g.size.Observe(float64(n))
		g.write(org, group)
		for _, m := range group {
			close(m.done)
		}
	}
}

// write commits one group, or sends its members back (errFallback), or fails them.
func (g *groupCommitter) write(org string, group []*groupMember) {
	deadline := time.Now().Add(g.timeout)
	for _, m := range group {
		if !m.deadline.IsZero() && m.deadline.Before(deadline) {
			deadline = m.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// One member per key: a second request with a key the group claims goes alone (and
	// waits for this group, as two such requests always do).
	live := make([]*groupMember, 0, len(group))
	var claims []idempotency.Claimant
	keyed := map[string]*groupMember{}
	for _, m := range group {
		if m.claim != nil {
			if keyed[m.claim.Key] != nil {
				m.err = errFallback
				g.fallbacks.WithLabelValues("same_key").Inc()
				continue
			}
			keyed[m.claim.Key] = m
			claims = append(claims, *m.claim)
		}
		live = append(live, m)
	}
	fallback := func(reason string, ms []*groupMember) {
		for _, m := range ms {
			m.err = errFallback
		}
		g.fallbacks.WithLabelValues(reason).Add(float64(len(ms)))
	}

	sess := pg.NewSession(g.pool, org)
	defer sess.Rollback(context.WithoutCancel(ctx))
	tx, err := sess.Tx(ctx)
	if err != nil {
		fallback("begin", live)
		return
	}
	items := func(ms []*groupMember) []*episodic.GroupItem {
		out := make([]*episodic.GroupItem, len(ms))
		for i, m := range ms {
			out[i] = m.item
		}
		return out
	}
	// First round trip: BEGIN, the org, the lock bound, and the claims — or, with no keys
	// to claim, the events themselves.
	b := &pgx.Batch{}
	b.Queue("SET LOCAL lock_timeout = " + pgDuration(groupLockTimeout))
	claimed := map[string]bool{}
	if len(claims) > 0 {
		sql, args := idempotency.ClaimManyStatement(org, claims, g.ttl)
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				claimed[k] = true
			}
			return rows.Err()
		})
	} else {
		episodic.QueueAppendGroup(b, org, items(live))
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		fallback("statement", live)
		return
	}
	if len(claims) > 0 {
		// Keys with a live record (replays, mismatches, requests in flight) go alone.
		kept := live[:0]
		for _, m := range live {
			if m.claim != nil && !claimed[m.claim.Key] {
				fallback("key_exists", []*groupMember{m})
				continue
			}
			kept = append(kept, m)
		}
		live = kept
		if len(live) == 0 {
			return
		}
		if err := episodic.AppendGroup(ctx, tx, org, items(live)); err != nil {
			fallback("statement", live)
			return
		}
	}

	// The responses, exactly as the single-request path encodes them, then the audit
	// records and idempotency records with the COMMIT.
	entries := make([]audit.Entry, len(live))
	var done []idempotency.Completion
	hdr := http.Header{"Content-Type": {"application/json"}}
	for i, m := range live {
		res := appendResult{items: m.item.Out}
		if !m.array {
			res = appendResult{one: &m.item.Out[0]}
		}
		var buf bytes.Buffer
		if err := huma.DefaultJSONFormat.Marshal(&buf, res); err != nil {
			fallback("encode", live)
			return
		}
		m.body = buf.Bytes()
		entries[i] = m.audit
		if m.claim != nil {
			done = append(done, idempotency.Completion{Key: m.claim.Key, Status: http.StatusCreated, Header: hdr, Body: m.body})
		}
	}
	sql, args, err := audit.InsertMany(org, entries)
	if err != nil {
		fallback("encode", live)
		return
	}
	sess.AtCommit(sql, args...)
	if len(done) > 0 {
		sql, args, err := idempotency.CompleteManyStatement(org, done)
		if err != nil {
			fallback("encode", live)
			return
		}
		sess.AtCommit(sql, args...)
	}
	if err := sess.Commit(ctx); err != nil {
		var ue *strata.UnavailableError
		if errors.As(err, &ue) {
			// The COMMIT may or may not have happened: answer what one request would.
			for _, m := range live {
				m.err = err
			}
			g.fallbacks.WithLabelValues("commit_unknown").Add(float64(len(live)))
			return
		}
		fallback("commit", live) // refused by the server: nothing was written
		return
	}
}

// pgDuration renders d for SET (milliseconds).
func pgDuration(d time.Duration) string { return fmt.Sprintf("'%dms'", d.Milliseconds()) }

// serveGroupedAppend serves an event append through group commit and reports whether it
// did; false means nothing was written to w and the request takes the single-request path.
func (s *Server) serveGroupedAppend(w http.ResponseWriter, r *http.Request, p auth.Principal, body []byte, key string) bool {
	if s.groups == nil || r.Method != http.MethodPost || chi.RouteContext(r.Context()).RoutePattern() != appendRoute ||
		!p.Can(agentRoles...) || !plainJSON(r) {
		return false
	}
	evs, array, err := (&appendBody{raw: body}).decode()
	if err != nil {
		return false
	}
	item, ok := s.events.NewGroupItem(chi.URLParam(r, "job"), evs)
	if !ok {
		return false
	}
	entry, err := s.auditEntry(r.Context(), r, p, http.StatusCreated, body)
	if err != nil {
		return false
	}
	m := &groupMember{item: item, array: array, audit: entry}
	m.deadline, _ = r.Context().Deadline()
	if key != "" {
		m.claim = &idempotency.Claimant{Key: key, Method: r.Method, Path: r.URL.Path, UserID: subjectOf(r, body),
			Hash: idempotency.Fingerprint(r.Method, r.URL.Path, r.URL.RawQuery, body)}
	}
	s.groups.submit(r.Context(), p.OrgID, m)
	switch {
	case errors.Is(m.err, errFallback):
		return false
	case m.err != nil:
		s.writeErr(w, r, m.err)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(m.body)
	return true
}

// plainJSON reports whether the request sends JSON (or says nothing) and accepts JSON, so
// the response is what content negotiation would pick anyway.
func plainJSON(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return false
	}
	a := r.Header.Get("Accept")
	return a == "" || a == "*/*" || strings.Contains(a, "application/json")
}
