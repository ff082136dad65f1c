package pg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/service"
)

// Replicas routes reads that tolerate a little lag to Postgres streaming standbys
// (STRATA_DATABASE_REPLICA_URL) and keeps every read that must see a caller's own write on
// the primary. The rule (docs/scaling.md, "Read replicas"):
//
//   - Every Interval the loop samples the primary's pg_current_wal_lsn() at time T and
//     each standby's pg_last_wal_replay_lsn(). A standby that has replayed the primary's LSN
//     of sample T holds every transaction committed before T: it is fresh as of T.
//   - A read by a writer (an API key) whose last acknowledged write ended at W may use a
//     standby only if it is fresh as of a time after W; while a write of the writer is in
//     flight, none may. So a caller always reads its own acknowledged writes, on any
//     standby, without an extra round trip per request (the cost: a read within about one
//     Interval of the same key's write goes to the primary).
//   - A standby fresh only as of more than MaxLag ago (replay paused, stuck or slow) is
//     skipped for everyone; one that does not answer is skipped until it answers again.
//
// With no standby usable the read goes to the primary: losing a standby costs capacity,
// never an error. Writer bookkeeping is per server process: a caller whose requests are
// spread over several API replicas reads its writes everywhere once MaxLag has passed
// (every usable standby is then fresh past the write), and sooner with
// X-Strata-Consistency: strong.
type Replicas struct {
	service.StartStop
	primary *pgxpool.Pool
	nodes   []*replica
	opt     ReplicaOptions
	next    atomic.Uint64

	mu      sync.Mutex
	samples []lsnSample // the primary's LSN over the last MaxLag and a little more, oldest first
	writers map[string]*writer
}

// ReplicaOptions tunes the router; zero values take defaults.
type ReplicaOptions struct {
	MaxLag   time.Duration // default 2s
	Interval time.Duration // default 100ms
	Log      *slog.Logger
	Now      func() time.Time
	// Sampled, if set, is called after every sampling round (a test signal).
	Sampled func()
}

type lsnSample struct {
	at  time.Time
	lsn int64
}

type writer struct {
	inFlight int
	last     time.Time
}

type replica struct {
	name  string
	pool  *pgxpool.Pool
	reads atomic.Int64
	mu    sync.Mutex
	up    bool
	fresh time.Time // fresh as of
}

// ReplicaStatus is what the router knows of one standby.
type ReplicaStatus struct {
	Name       string
	Up         bool
	FreshAsOf  time.Time
	Lag        time.Duration // now − FreshAsOf
	Usable     bool
	ReadsSoFar int64
}

// NewReplicas opens a pool per standby DSN (role strata_app, application_name
// strata-replica); it does not wait for them. Start begins sampling; until the first
// sample every read goes to the primary.
func NewReplicas(ctx context.Context, primary *pgxpool.Pool, dsns []string, po PoolOptions, o ReplicaOptions) (*Replicas, error) {
	if o.MaxLag <= 0 {
		o.MaxLag = 2 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Replicas{primary: primary, opt: o, writers: map[string]*writer{}}
	po.ApplicationName = "strata-replica"
	for i, dsn := range dsns {
		p, err := NewPool(ctx, dsn, po)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("STRATA_DATABASE_REPLICA_URL (#%d): %w", i+1, err)
		}
		r.nodes = append(r.nodes, &replica{name: fmt.Sprintf("replica-%d", i+1), pool: p})
	}
	return r, nil
}

// Close closes the standbys' pools (not the primary's). Stop the loop first.
func (r *Replicas) Close() {
	for _, n := range r.nodes {
		n.pool.Close()
	}
}

// Start runs the sampling loop until Stop.
func (r *Replicas) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		r.Sample(ctx)
		service.Every(ctx, r.opt.Interval, r.Sample)
	}()
	return nil
}

// Sample runs one sampling round: the primary's LSN, then every standby's replay LSN.
func (r *Replicas) Sample(ctx context.Context) {
	defer func() {
		if r.opt.Sampled != nil {
			r.opt.Sampled()
		}
	}()
	timeout := max(r.opt.Interval, r.opt.MaxLag/2) // a slow answer is still an answer
	at := r.opt.Now()
	var lsn int64
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := r.primary.QueryRow(pctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn)
	cancel()
	if err != nil {
		// Without a primary sample no standby can be shown fresh; they age past MaxLag.
		r.opt.Log.Debug("replica router: primary LSN not sampled", "err", err)
	} else {
		r.mu.Lock()
		r.samples = append(r.samples, lsnSample{at: at, lsn: lsn})
		keep := at.Add(-r.opt.MaxLag - 4*r.opt.Interval)
		i := 0
		for i < len(r.samples)-1 && r.samples[i].at.Before(keep) {
			i++
		}
		r.samples = r.samples[i:]
		r.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.sampleReplica(ctx, n, timeout)
		}()
	}
	wg.Wait()
	r.pruneWriters()
}

func (r *Replicas) sampleReplica(ctx context.Context, n *replica, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var replay *int64
	err := n.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery()
		THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, '0/0')::bigint`).Scan(&replay)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil || replay == nil {
		if n.up {
			r.opt.Log.Warn("read replica unavailable: its reads go to the primary", "replica", n.name, "err", err)
		}
		n.up = false
		return
	}
	if !n.up {
		r.opt.Log.Info("read replica available", "replica", n.name)
	}
	n.up = true
	r.mu.Lock()
	for _, s := range r.samples {
		if s.lsn <= *replay && s.at.After(n.fresh) {
			n.fresh = s.at
		}
	}
	r.mu.Unlock()
}

// pruneWriters forgets writers whose last write every usable standby has long replayed.
func (r *Replicas) pruneWriters() {
	cut := r.opt.Now().Add(-2*r.opt.MaxLag - time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, w := range r.writers {
		if w.inFlight == 0 && w.last.Before(cut) {
			delete(r.writers, k)
		}
	}
}

// BeginWrite marks a write of the writer key in flight: its reads go to the primary until
// EndWrite.
func (r *Replicas) BeginWrite(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.writers[key]
	if w == nil {
		w = &writer{}
		r.writers[key] = w
	}
	w.inFlight++
}

// EndWrite ends a write of key begun by BeginWrite (after its response was sent, so
// after its commit).
func (r *Replicas) EndWrite(key string) {
	now := r.opt.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.writers[key]; w != nil {
		w.inFlight--
		w.last = now
	}
}

// ForRead returns a standby pool that may serve a read by the writer key, or nil for the primary.
func (r *Replicas) ForRead(key string) *pgxpool.Pool {
	if len(r.nodes) == 0 {
		return nil
	}
	now := r.opt.Now()
	var after time.Time
	r.mu.Lock()
	if w := r.writers[key]; w != nil {
		if w.inFlight > 0 {
			r.mu.Unlock()
			return nil
		}
		after = w.last
	}
	r.mu.Unlock()
	start := r.next.Add(1)
	for i := range r.nodes {
		n := r.nodes[(int(start)+i)%len(r.nodes)]
		n.mu.Lock()
		ok := n.up && n.fresh.After(after) && now.Sub(n.fresh) <= r.opt.MaxLag
		n.mu.Unlock()
		if ok {
			n.reads.Add(1)
			return n.pool
		}
	}
	return nil
}

// Status reports every standby.
func (r *Replicas) Status() []ReplicaStatus {
	now := r.opt.Now()
	out := make([]ReplicaStatus, 0, len(r.nodes))
	for _, n := range r.nodes {
		n.mu.Lock()
		st := ReplicaStatus{Name: n.name, Up: n.up, FreshAsOf: n.fresh, ReadsSoFar: n.reads.Load()}
		n.mu.Unlock()
		if !st.FreshAsOf.IsZero() {
			st.Lag = now.Sub(st.FreshAsOf)
		}
		st.Usable = st.Up && !st.FreshAsOf.IsZero() && st.Lag <= r.opt.MaxLag
		out = append(out, st)
	}
	return out
}
