package semantic

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
)

// AccessLog counts memory accesses (access_count, last_accessed_at: ranking and eviction
// features) behind the requests that serve memories, and writes them in batches: every
// interval, one UPDATE per org adds up what each memory was served since the last flush.
//
// Why not in the request's transaction: a memory row carries its embedding and text, so a
// row version is ~2 KB, and every search served ten of them — ten wide-row UPDATEs per
// search, on the same few rows for every search of a scope. On 2 cores that tripled a
// search's CPU (docs/benchmarks.md). Batched, a memory served a hundred times in a second
// is written once.
//
// What it costs: the counters lag by up to one interval, and a replica that dies loses its
// unflushed accesses (at most one interval's worth). They are ranking features, not
// records; the retrieval log (memory_retrievals), which records every serve, is still
// written in the request's transaction. A memory deleted before the flush is simply not
// found by it.
type AccessLog struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	interval time.Duration
	max      int

	mu      sync.Mutex
	pending map[string]map[uuid.UUID]access // org → memory → accesses since the last flush
	n       int

	flushes, failures, dropped prometheus.Counter
	written                    prometheus.Counter

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals AccessLogTestSignals
}

// AccessLogTestSignals are the access log's points of interest for tests.
type AccessLogTestSignals struct {
	Flushed service.TestSignal[error] // the loop's periodic flush ended (with its error)
}

type access struct {
	n  int64
	at time.Time
}

// DefaultAccessLogMax bounds the memories an AccessLog holds between flushes; accesses of
// further memories are dropped (and counted) until the next flush.
const DefaultAccessLogMax = 200_000

// NewAccessLog returns an access log that flushes every interval once Start runs. reg may
// be nil (no metrics).
func NewAccessLog(pool *pgxpool.Pool, log *slog.Logger, interval time.Duration, reg prometheus.Registerer) *AccessLog {
	if log == nil {
		log = slog.Default()
	}
	a := &AccessLog{pool: pool, log: log, interval: interval, max: DefaultAccessLogMax,
		pending: map[string]map[uuid.UUID]access{},
		flushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_memory_access_flushes_total",
			Help: "Batched memory access-count flushes (one per org with accesses per interval)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_memory_access_flush_failures_total",
			Help: "Access-count flushes that failed; their counts are kept for the next flush."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_memory_access_dropped_total",
			Help: "Memory accesses not counted because the pending batch was full."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_memory_access_rows_total",
			Help: "Memory rows whose access count a flush updated."}),
	}
	if reg != nil {
		reg.MustRegister(a.flushes, a.failures, a.dropped, a.written)
	}
	return a
}

// Add counts one access of each of ids in org at at. It never blocks on the database.
func (a *AccessLog) Add(org string, ids []uuid.UUID, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addLocked(org, ids, nil, at)
}

// addLocked adds one access per id, or counts[i] when counts is set.
func (a *AccessLog) addLocked(org string, ids []uuid.UUID, counts []access, at time.Time) {
	m := a.pending[org]
	if m == nil {
		m = map[uuid.UUID]access{}
		a.pending[org] = m
	}
	for i, id := range ids {
		x := access{n: 1, at: at}
		if counts != nil {
			x = counts[i]
		}
		cur, ok := m[id]
		if !ok {
			if a.n >= a.max {
				a.dropped.Add(float64(x.n))
				continue
			}
			a.n++
		}
		cur.n += x.n
		if x.at.After(cur.at) {
			cur.at = x.at
		}
		m[id] = cur
	}
	if len(m) == 0 {
		delete(a.pending, org)
	}
}

// Pending is the number of memories with accesses not yet written.
func (a *AccessLog) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// Start flushes every interval until Stop.
func (a *AccessLog) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := a.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		t := time.NewTicker(a.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := a.Flush(context.WithoutCancel(ctx))
				if err != nil {
					a.log.Warn("memory access counts not written yet; kept for the next flush", "err", err)
				}
				a.TestSignals.Flushed.Signal(err)
			}
		}
	}()
	return nil
}

// Shutdown stops the loop and writes what is pending (bounded by ctx). Safe to call more
// than once, and without Start.
func (a *AccessLog) Shutdown(ctx context.Context) error {
	a.Stop()
	return a.Flush(ctx)
}

// Flush writes every pending access now: per org, one transaction that locks the rows in
// id order (so two replicas flushing the same memories cannot deadlock) and adds the
// counts. An org whose flush fails keeps its counts for the next one.
func (a *AccessLog) Flush(ctx context.Context) error {
	a.mu.Lock()
	batch := a.pending
	a.pending = map[string]map[uuid.UUID]access{}
	a.n = 0
	a.mu.Unlock()
	var first error
	for org, m := range batch {
		if err := a.flushOrg(ctx, org, m); err != nil {
			a.failures.Inc()
			if first == nil {
				first = err
			}
			ids := make([]uuid.UUID, 0, len(m))
			xs := make([]access, 0, len(m))
			for id, x := range m {
				ids, xs = append(ids, id), append(xs, x)
			}
			a.mu.Lock()
			a.addLocked(org, ids, xs, time.Time{})
			a.mu.Unlock()
			continue
		}
		a.flushes.Inc()
	}
	return first
}

func (a *AccessLog) flushOrg(ctx context.Context, org string, m map[uuid.UUID]access) error {
	ids := make([]uuid.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	ns := make([]int64, len(ids))
	ats := make([]time.Time, len(ids))
	for i, id := range ids {
		ns[i], ats[i] = m[id].n, m[id].at.UTC()
	}
	return pg.InOrgTx(ctx, a.pool, org, func(tx pgx.Tx) error {
		// A flush waits for no request for long: a memory row held by a long transaction
		// fails this flush (kept for the next) rather than holding the batch.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '2000', true)`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE memories m SET access_count = m.access_count + v.n,
				last_accessed_at = greatest(m.last_accessed_at, v.at)
			FROM (SELECT id FROM memories WHERE org_id = $1 AND id = ANY($2) ORDER BY id FOR NO KEY UPDATE) l,
				unnest($2::uuid[], $3::bigint[], $4::timestamptz[]) AS v(id, n, at)
			WHERE m.org_id = $1 AND m.id = l.id AND v.id = l.id`, org, ids, ns, ats)
		if err != nil {
			return pg.Interpret(err)
		}
		a.written.Add(float64(tag.RowsAffected()))
		return nil
	})
}
