package reliability

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/testenv"
)

// The crash workload: concurrent clients appending event batches to shared jobs, writing
// checkpoints of their own jobs (If-Match chains) and memories, every write with an
// Idempotency-Key. A write that got no answer (transport error, 5xx, 502 from the proxy, or
// 409 "in progress") is retried with the same key until a live server answers it, except
// that some event batches and memories are abandoned instead: those must exist entirely or
// not at all.

const (
	sharedJobs = 4
	batchSize  = 3
)

type batch struct {
	job     string
	markers []string
}

type workload struct {
	t       *testing.T
	c       func(i int) *client // the client of worker i
	clients int
	ops     int
	seed    uint64
	abandon float64 // probability of abandoning an unanswered event batch or memory
	// more, when set, keeps the workers going past ops (up to maxOpsFactor × ops) while it
	// returns true: a fast machine must not finish the workload before the faults land.
	more func() bool

	mu           sync.Mutex
	ackedEvents  map[string]int64 // event marker → acknowledged seq
	ackedBatches int
	abandoned    []batch
	ackedMems    map[string]string // memory text → acknowledged id
	abandonMems  []string
	ackedCPs     map[string]map[int64]string // own job → version → next_action
	retries      int
	unanswered   map[string]int // why calls went unanswered
}

func newWorkload(t *testing.T, clients, ops int, s uint64, c func(i int) *client) *workload {
	return &workload{t: t, c: c, clients: clients, ops: ops, seed: s, abandon: 0.3,
		ackedEvents: map[string]int64{}, ackedMems: map[string]string{}, ackedCPs: map[string]map[int64]string{},
		unanswered: map[string]int{}}
}

// setup creates the jobs (retried through restarts).
func (w *workload) setup() {
	c := w.c(0)
	for j := 0; j < sharedJobs; j++ {
		r := c.must(w.t, "PUT", fmt.Sprintf("/v1/jobs/shared-%d", j), map[string]any{"goal": "shared"}, "Idempotency-Key", fmt.Sprintf("mk-shared-%d", j))
		require.Contains(w.t, []int{200, 201}, r.status, string(r.body))
	}
	for i := 0; i < w.clients; i++ {
		r := c.must(w.t, "PUT", fmt.Sprintf("/v1/jobs/own-%d", i), map[string]any{"goal": "own"}, "Idempotency-Key", fmt.Sprintf("mk-own-%d", i))
		require.Contains(w.t, []int{200, 201}, r.status, string(r.body))
	}
}

// call sends one write until it is answered; it returns nil when it gives up (abandon).
func (w *workload) call(c *client, rng interface{ Float64() float64 }, mayAbandon bool, method, path string, body any, hdr ...string) *reply {
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		r, err := c.do(method, path, body, hdr...)
		why := ""
		switch {
		case err != nil:
			why = "transport"
		case r.status >= 500:
			why = fmt.Sprint(r.status)
		case r.status == 409 && r.header.Get("Retry-After") != "":
			why = "409 in progress"
		default:
			return r
		}
		w.mu.Lock()
		w.unanswered[why]++
		w.retries++
		w.mu.Unlock()
		if mayAbandon && rng.Float64() < w.abandon {
			return nil
		}
		time.Sleep(25 * time.Millisecond) // kept: the workload client's retry backoff against a faulted server
	}
	w.t.Errorf("%s %s: unanswered for 90s", method, path)
	return nil
}

func (w *workload) worker(i int) {
	t := w.t
	c := w.c(i)
	rng := newRand(w.seed, uint64(i)+1)
	own := fmt.Sprintf("own-%d", i)
	var cpVersion int64
	for n := 0; w.keepGoing(n) && !t.Failed(); n++ {
		key := fmt.Sprintf("c%d-n%d", i, n)
		switch n % 3 {
		case 0: // a batch of events on a shared job
			b := batch{job: fmt.Sprintf("shared-%d", (i+n)%sharedJobs)}
			var evs []map[string]any
			for j := 0; j < batchSize; j++ {
				m := fmt.Sprintf("%s-e%d", key, j)
				b.markers = append(b.markers, m)
				evs = append(evs, map[string]any{"op": "render", "params": map[string]any{"m": m}, "agent_id": fmt.Sprintf("agent-%d", i)})
			}
			r := w.call(c, rng, true, "POST", "/v1/jobs/"+b.job+"/events", evs, "Idempotency-Key", key)
			if r == nil {
				w.mu.Lock()
				w.abandoned = append(w.abandoned, b)
				w.mu.Unlock()
				continue
			}
			require.Contains(t, []int{200, 201}, r.status, "%s: %s", key, r.body)
			var out struct {
				Items []struct {
					Seq    int64          `json:"seq"`
					Params map[string]any `json:"params"`
				} `json:"items"`
			}
			require.NoError(t, jsonUnmarshal(r.body, &out), string(r.body))
			require.Len(t, out.Items, batchSize, string(r.body))
			w.mu.Lock()
			w.ackedBatches++
			for _, e := range out.Items {
				w.ackedEvents[e.Params["m"].(string)] = e.Seq
			}
			w.mu.Unlock()
		case 1: // a memory in a scope of its own (no deduplication across writes)
			text := fmt.Sprintf("reliability memory %s %d", key, rng.IntN(1e9))
			r := w.call(c, rng, true, "POST", "/v1/memories", map[string]any{"text": text, "user_id": "u-" + key,
				"provenance": map[string]any{"agent_id": fmt.Sprintf("agent-%d", i)}}, "Idempotency-Key", key)
			w.mu.Lock()
			if r == nil {
				w.abandonMems = append(w.abandonMems, text)
			} else {
				require.Equal(t, 201, r.status, "%s: %s", key, r.body)
				w.ackedMems[text] = r.m()["id"].(string)
			}
			w.mu.Unlock()
		case 2: // the next checkpoint of the worker's own job
			next := "after " + key
			r := w.call(c, rng, false, "PUT", "/v1/jobs/"+own+"/checkpoint",
				map[string]any{"state": map[string]any{"n": n}, "next_action": next},
				"If-Match", fmt.Sprintf(`"%d"`, cpVersion), "Idempotency-Key", fmt.Sprintf("%s-cp%d", own, cpVersion))
			if r == nil {
				return
			}
			require.Equal(t, 201, r.status, "%s: %s", key, r.body)
			v := int64(r.m()["version"].(float64))
			require.Equal(t, cpVersion+1, v)
			cpVersion = v
			w.mu.Lock()
			if w.ackedCPs[own] == nil {
				w.ackedCPs[own] = map[int64]string{}
			}
			w.ackedCPs[own][v] = next
			w.mu.Unlock()
		}
	}
}

// maxOpsFactor bounds how far more can stretch a worker's run.
const maxOpsFactor = 50

func (w *workload) keepGoing(n int) bool {
	if n < w.ops {
		return true
	}
	return w.more != nil && n < maxOpsFactor*w.ops && w.more()
}

func (w *workload) run() {
	var wg sync.WaitGroup
	for i := 0; i < w.clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); w.worker(i) }()
	}
	wg.Wait()
}

// verify checks the database against what was acknowledged.
func (w *workload) verify(dsn, org string) {
	t := w.t
	ctx := context.Background()
	db := testenv.OwnerConn(t, dsn)

	// Events: per job, seqs 1..n gap-free; every acknowledged event exactly once at its seq;
	// an abandoned batch entirely or not at all; nothing else.
	present := map[string][]int64{}
	for j := 0; j < sharedJobs; j++ {
		job := fmt.Sprintf("shared-%d", j)
		rows, err := db.Query(ctx, `SELECT seq, params->>'m' FROM episodic_events WHERE org_id = $1 AND job_id = $2 ORDER BY seq`, org, job)
		require.NoError(t, err)
		var want int64 = 1
		for rows.Next() {
			var seq int64
			var m string
			require.NoError(t, rows.Scan(&seq, &m))
			require.Equal(t, want, seq, "seqs of %s are gap-free", job)
			want++
			present[m] = append(present[m], seq)
		}
		require.NoError(t, rows.Err())
	}
	for m, seq := range w.ackedEvents {
		require.Equal(t, []int64{seq}, present[m], "acknowledged event %s exactly once at its seq", m)
	}
	committedAbandoned := 0
	known := map[string]bool{}
	for m := range w.ackedEvents {
		known[m] = true
	}
	for _, b := range w.abandoned {
		n := 0
		for _, m := range b.markers {
			known[m] = true
			require.LessOrEqual(t, len(present[m]), 1, "event %s twice", m)
			n += len(present[m])
		}
		require.Contains(t, []int{0, batchSize}, n, "abandoned batch %v half-exists", b.markers)
		if n > 0 {
			committedAbandoned++
		}
	}
	for m := range present {
		require.True(t, known[m], "event %s was never sent", m)
	}
	// The audit record commits with the write: one per committed batch, none for replays.
	var audited int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'append-events'`, org).Scan(&audited))
	require.Equal(t, w.ackedBatches+committedAbandoned, audited, "audit rows of append-events")

	// Memories: acknowledged ones exactly once with their id; abandoned ones at most once.
	mems := map[string][]string{}
	rows, err := db.Query(ctx, `SELECT text, id::text FROM memories WHERE org_id = $1 AND text LIKE 'reliability memory %'`, org)
	require.NoError(t, err)
	for rows.Next() {
		var text, id string
		require.NoError(t, rows.Scan(&text, &id))
		mems[text] = append(mems[text], id)
	}
	require.NoError(t, rows.Err())
	for text, id := range w.ackedMems {
		require.Equal(t, []string{id}, mems[text], "acknowledged memory %q exactly once", text)
	}
	committedMems := 0
	for _, text := range w.abandonMems {
		require.LessOrEqual(t, len(mems[text]), 1)
		committedMems += len(mems[text])
	}
	require.Equal(t, len(w.ackedMems)+committedMems, len(mems), "no memory that was never sent")
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'create-memory'`, org).Scan(&audited))
	require.Equal(t, len(mems), audited, "audit rows of create-memory")

	// Checkpoints: versions 1..n gap-free per job; every acknowledged one with its content.
	for job, acked := range w.ackedCPs {
		rows, err := db.Query(ctx, `SELECT version, next_action FROM job_checkpoints WHERE org_id = $1 AND job_id = $2 ORDER BY version`, org, job)
		require.NoError(t, err)
		got := map[int64]string{}
		var want int64 = 1
		for rows.Next() {
			var v int64
			var next string
			require.NoError(t, rows.Scan(&v, &next))
			require.Equal(t, want, v, "checkpoint versions of %s are gap-free", job)
			want++
			got[v] = next
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(acked), len(got), "checkpoints of %s: one per acknowledged write", job)
		for v, next := range acked {
			require.Equal(t, next, got[v], "%s checkpoint %d", job, v)
		}
	}
}

func (w *workload) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	cps := 0
	for _, m := range w.ackedCPs {
		cps += len(m)
	}
	keys := make([]string, 0, len(w.unanswered))
	for k := range w.unanswered {
		keys = append(keys, fmt.Sprintf("%s=%d", k, w.unanswered[k]))
	}
	sort.Strings(keys)
	return fmt.Sprintf("acked: %d event batches, %d memories, %d checkpoints; abandoned: %d batches, %d memories; retries %d %v",
		w.ackedBatches, len(w.ackedMems), cps, len(w.abandoned), len(w.abandonMems), w.retries, keys)
}
