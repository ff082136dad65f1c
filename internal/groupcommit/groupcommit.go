// Package groupcommit writes concurrent event appends (POST /v1/jobs/{job}/events, the
// busiest write of an agent turn) of one org together. Appends that arrive while an earlier
// group of their org is being written wait and are written together: one transaction, one
// statement for all their events (any jobs), one for their audit records, one claiming and
// one completing their Idempotency-Keys, one COMMIT. Each member still gets exactly what it
// would have alone — its events at gap-free seqs, its audit record, its idempotency record,
// the same response, released only after the COMMIT — and nothing changes for one that
// cannot join:
//
//   - a member whose key has a live record (replay, mismatch or in progress), or whose key
//     another member of its group claims, is sent back (ErrFallback) to the single-request
//     path, which answers exactly as before;
//   - when a group fails before its COMMIT was sent (a statement failed, a lock wait ran
//     over lockTimeout), it rolled back as a whole and every member is sent back, so one
//     bad member costs the others a retry, never a write;
//   - when the COMMIT's outcome is unknown (the connection broke), every member gets the
//     *strata.UnavailableError the single-request path would.
//
// There is no timer: the first append of an idle org is written at once (a group of one);
// groups form only from appends that arrive while earlier ones are in flight, so a group
// adds no latency of its own. Deciding which requests may join, and encoding their
// responses, is the HTTP layer's (internal/httpapi/groupcommit.go).
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

const (
	maxMembers   = 64                     // requests in one group
	maxGroupsOrg = 2                      // groups of one org in flight at once
	lockTimeout  = 500 * time.Millisecond // a group waits no longer for a row lock
)

// ErrFallback sends a member back to the single-request path: nothing of it was written.
var ErrFallback = errors.New("groupcommit: take the single-request path")

// Member is one append request joining a group.
type Member struct {
	Item  *episodic.GroupItem
	Audit audit.Entry
	Claim *idempotency.Claimant // nil without Idempotency-Key
	// Deadline is the request's (zero: none): a group ends by its earliest member's
	// deadline, so no request waits longer for its group than for its own transaction.
	Deadline time.Time
	// Response renders the member's response from Item.Out once its events are written
	// (Key is filled in); the idempotency record stores it and Body is its body.
	Response func(*episodic.GroupItem) (idempotency.Completion, error)

	// Body is the response body, set when Submit returns with Err nil.
	Body []byte
	// Err is ErrFallback, or why the commit failed, once Submit returns.
	Err error

	done chan struct{}
	// callTimeout is the request's bound on each Postgres call (pg.WithCallTimeout): the
	// group's calls take the shortest of its members'.
	callTimeout time.Duration
}

type orgQueue struct {
	pending []*Member
	running int
}

// Committer queues appends per org and writes each org's queue a group at a time.
type Committer struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	ttl     time.Duration // of idempotency records
	mu      sync.Mutex
	orgs    map[string]*orgQueue

	size      prometheus.Histogram
	fallbacks *prometheus.CounterVec
}

// New makes a Committer writing on pool. A group gets at most timeout (less when a member's
// deadline is earlier); idempotency records live ttl. Its metrics (group sizes, fallbacks
// by reason) are registered on reg.
func New(pool *pgxpool.Pool, timeout, ttl time.Duration, reg prometheus.Registerer) *Committer {
	g := &Committer{pool: pool, timeout: timeout, ttl: ttl, orgs: map[string]*orgQueue{},
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

// Submit queues m for org's next group and returns once m was committed or sent back (see
// m.Err). A member whose ctx ends while it still waits in the queue leaves it (ErrFallback:
// the single-request path then answers the ended context as it always does); once its
// group is being written it waits for the outcome.
func (g *Committer) Submit(ctx context.Context, org string, m *Member) {
	m.done = make(chan struct{})
	m.callTimeout = pg.CallTimeout(ctx)
	g.mu.Lock()
	q := g.orgs[org]
	if q == nil {
		q = &orgQueue{}
		g.orgs[org] = q
	}
	q.pending = append(q.pending, m)
	start := q.running < maxGroupsOrg
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
		m.Err = ErrFallback
		g.fallbacks.WithLabelValues("context").Inc()
		return
	}
	g.mu.Unlock()
	<-m.done
}

// drain writes org's queued appends, a group at a time, until none are left.
func (g *Committer) drain(org string, q *orgQueue) {
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
		n := min(len(q.pending), maxMembers)
		group := q.pending[:n:n]
		q.pending = append([]*Member(nil), q.pending[n:]...)
		g.mu.Unlock()
		g.size.Observe(float64(n))
		g.write(org, group)
		for _, m := range group {
			close(m.done)
		}
	}
}

// write commits one group, or sends its members back (ErrFallback), or fails them.
func (g *Committer) write(org string, group []*Member) {
	deadline := time.Now().Add(g.timeout)
	for _, m := range group {
		if !m.Deadline.IsZero() && m.Deadline.Before(deadline) {
			deadline = m.Deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var bound time.Duration
	for _, m := range group {
		if m.callTimeout > 0 && (bound == 0 || m.callTimeout < bound) {
			bound = m.callTimeout
		}
	}
	ctx = pg.WithCallTimeout(ctx, bound)
	// One member per key: a second request with a key the group claims goes alone (and
	// waits for this group, as two such requests always do).
	live := make([]*Member, 0, len(group))
	var claims []idempotency.Claimant
	keyed := map[string]*Member{}
	for _, m := range group {
		if m.Claim != nil {
			if keyed[m.Claim.Key] != nil {
				m.Err = ErrFallback
				g.fallbacks.WithLabelValues("same_key").Inc()
				continue
			}
			keyed[m.Claim.Key] = m
			claims = append(claims, *m.Claim)
		}
		live = append(live, m)
	}
	fallback := func(reason string, ms []*Member) {
		for _, m := range ms {
			m.Err = ErrFallback
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
	items := func(ms []*Member) []*episodic.GroupItem {
		out := make([]*episodic.GroupItem, len(ms))
		for i, m := range ms {
			out[i] = m.Item
		}
		return out
	}
	// First round trip: BEGIN, the org, the lock bound, and the claims — or, with no keys
	// to claim, the events themselves.
	b := &pgx.Batch{}
	b.Queue("SET LOCAL lock_timeout = " + pgDuration(lockTimeout))
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
	// Postgres unreachable before COMMIT was sent: nothing was written, and the
	// single-request path would only wait for it once more. Answer the 503 now.
	unavailable := func(err error) bool {
		var ue *strata.UnavailableError
		if !errors.As(err, &ue) {
			return false
		}
		for _, m := range live {
			m.Err = err
		}
		g.fallbacks.WithLabelValues("unavailable").Add(float64(len(live)))
		return true
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if !unavailable(pg.Interpret(err)) {
			fallback("statement", live)
		}
		return
	}
	if len(claims) > 0 {
		// Keys with a live record (replays, mismatches, requests in flight) go alone.
		kept := live[:0]
		for _, m := range live {
			if m.Claim != nil && !claimed[m.Claim.Key] {
				fallback("key_exists", []*Member{m})
				continue
			}
			kept = append(kept, m)
		}
		live = kept
		if len(live) == 0 {
			return
		}
		if err := episodic.AppendGroup(ctx, tx, org, items(live)); err != nil {
			if !unavailable(pg.Interpret(err)) {
				fallback("statement", live)
			}
			return
		}
	}

	// The responses, then the audit records and idempotency records with the COMMIT.
	entries := make([]audit.Entry, len(live))
	var done []idempotency.Completion
	for i, m := range live {
		res, err := m.Response(m.Item)
		if err != nil {
			fallback("encode", live)
			return
		}
		m.Body = res.Body
		entries[i] = m.Audit
		if m.Claim != nil {
			res.Key = m.Claim.Key
			done = append(done, res)
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
				m.Err = err
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
