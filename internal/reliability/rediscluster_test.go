package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// clusterLoad drives working-state writes, turn appends (the multi-key append script) and
// key-value writes, one session and one key per worker, and remembers the last value each
// got acknowledged. Every answer must be 2xx or 503.
type clusterLoad struct {
	s      *apptest.Server
	key    string
	done   atomic.Int64 // answers so far
	mu     sync.Mutex
	bad    []string
	acked  map[int]int // worker → last acknowledged state value
	turns  map[int]int // worker → acknowledged appends
	kvAck  map[int]int
	n503   atomic.Int64
	n409   atomic.Int64 // state writes refused by the durable arbiter
	stop   chan struct{}
	wg     sync.WaitGroup
	worker func(i int) string
}

func newClusterLoad(s *apptest.Server, key string, session func(i int) string) *clusterLoad {
	return &clusterLoad{s: s, key: key, acked: map[int]int{}, turns: map[int]int{}, kvAck: map[int]int{},
		stop: make(chan struct{}), worker: session}
}

func (l *clusterLoad) check(r *apptest.Response, what string) bool {
	l.done.Add(1)
	switch {
	case r.Status >= 200 && r.Status < 300:
		return true
	case r.Status == 503:
		l.n503.Add(1)
	case r.Status == 409 && what == "PUT state":
		// Postgres is the arbiter of state versions: when the Redis copy was dropped and
		// restored (a script that failed mid-migration is compensated that way) while another
		// write's durable half was in flight, that write is refused, not stored: an honest
		// answer, not a loss (verify checks nothing acknowledged is missing).
		l.n409.Add(1)
	default:
		l.mu.Lock()
		l.bad = append(l.bad, fmt.Sprintf("%s: %d %s", what, r.Status, r.Body))
		l.mu.Unlock()
	}
	return false
}

// run starts n workers until stop; finish makes each worker's last write an acknowledged
// one (retrying 503s), so the final state is known exactly.
func (l *clusterLoad) run(n int) {
	for i := 0; i < n; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			sess := l.worker(i)
			for k := 1; ; k++ {
				select {
				case <-l.stop:
					l.settle(i, sess, k)
					return
				default:
				}
				l.step(i, sess, k)
			}
		}()
	}
}

func (l *clusterLoad) step(i int, sess string, k int) bool {
	ok := true
	if l.check(l.s.Do("PUT", "/v1/sessions/"+sess+"/state", l.key, map[string]any{"state": map[string]any{"n": k}, "user_id": "u1"}), "PUT state") {
		l.mu.Lock()
		l.acked[i] = k
		l.mu.Unlock()
	} else {
		ok = false
	}
	if l.check(l.s.Do("POST", "/v1/sessions/"+sess+"/messages", l.key, map[string]any{"role": "user", "content": fmt.Sprint("m", k)}), "POST message") {
		l.mu.Lock()
		l.turns[i]++
		l.mu.Unlock()
	} else {
		ok = false
	}
	if l.check(l.s.Do("PUT", fmt.Sprintf("/v1/kv/prefs/w%d", i), l.key, map[string]any{"value": k}), "PUT kv") {
		l.mu.Lock()
		l.kvAck[i] = k
		l.mu.Unlock()
	} else {
		ok = false
	}
	return ok
}

// settle retries the worker's state and kv writes until both are acknowledged (a 503 leaves
// the outcome of that write unknown; the next acknowledged one fixes it).
func (l *clusterLoad) settle(i int, sess string, k int) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st := l.check(l.s.Do("PUT", "/v1/sessions/"+sess+"/state", l.key, map[string]any{"state": map[string]any{"n": k}, "user_id": "u1"}), "PUT state")
		kv := l.check(l.s.Do("PUT", fmt.Sprintf("/v1/kv/prefs/w%d", i), l.key, map[string]any{"value": k}), "PUT kv")
		if st && kv {
			l.mu.Lock()
			l.acked[i], l.kvAck[i] = k, k
			l.mu.Unlock()
			return
		}
		k++
	}
	l.mu.Lock()
	l.bad = append(l.bad, fmt.Sprintf("worker %d never got an acknowledged write after the fault", i))
	l.mu.Unlock()
}

// waitAnswers waits until the load has got n more answers.
func (l *clusterLoad) waitAnswers(t *testing.T, n int64) {
	t.Helper()
	target := l.done.Load() + n
	require.Eventually(t, func() bool { return l.done.Load() >= target }, 60*time.Second, 5*time.Millisecond)
}

func (l *clusterLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	require.Empty(t, l.bad, "every answer is 2xx, 503, or (a state write) a 409 from the durable arbiter")
}

// verify reads back every worker's session and key: the last acknowledged state, every
// acknowledged turn (gap-free seqs), the last acknowledged kv value.
func (l *clusterLoad) verify(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		sess := l.worker(i)
		r := l.s.Do("GET", "/v1/sessions/"+sess+"/state", l.key, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var st struct {
			State struct {
				N int `json:"n"`
			} `json:"state"`
		}
		r.JSON(t, &st)
		require.Equal(t, l.acked[i], st.State.N, "session %s: the last acknowledged state", sess)

		r = l.s.Do("GET", fmt.Sprintf("/v1/kv/prefs/w%d", i), l.key, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var kv struct {
			Value int `json:"value"`
		}
		r.JSON(t, &kv)
		require.Equal(t, l.kvAck[i], kv.Value, "kv w%d: the last acknowledged value", i)

		var seqs []int64
		after := int64(0)
		for {
			r = l.s.Do("GET", fmt.Sprintf("/v1/sessions/%s/messages?after_seq=%d&limit=1000", sess, after), l.key, nil)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			var page struct {
				Items []struct {
					Seq int64 `json:"seq"`
				} `json:"items"`
			}
			r.JSON(t, &page)
			if len(page.Items) == 0 {
				break
			}
			for _, it := range page.Items {
				seqs = append(seqs, it.Seq)
			}
			after = page.Items[len(page.Items)-1].Seq
		}
		// Acknowledged appends are all there; a 503'd append may or may not have landed.
		require.GreaterOrEqual(t, len(seqs), l.turns[i], "session %s: every acknowledged turn", sess)
		for j, s := range seqs {
			require.Equal(t, int64(j+1), s, "session %s: seqs are gap-free", sess)
		}
	}
}

// slotOf is the cluster slot of a working session's keys (hash tag {org/session}).
func slotOf(t *testing.T, c *testenv.RedisCluster, org, session string) int {
	t.Helper()
	cl := c.Nodes[0].Client()
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(context.Background(), "{"+org+"/"+session+"}").Result()
	require.NoError(t, err)
	return int(slot)
}

// A master of the cluster is killed mid-load and comes back empty (its slots, no data):
// every answer is 2xx or 503, nothing acknowledged is lost, and the sessions it held are
// rehydrated from Postgres.
func TestRedisClusterMasterRestartedEmpty(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisCluster(t)
	s := apptest.Start(t, apptest.Env("STRATA_REDIS_URL", c.URL))
	key := s.NewKey("acme", "agent")
	const workers = 6
	l := newClusterLoad(s, key, func(i int) string { return fmt.Sprintf("s%d", i) })
	victim, err := c.NodeForSlot(context.Background(), slotOf(t, c, "acme", "s0"))
	require.NoError(t, err)

	l.run(workers)
	l.waitAnswers(t, 60)
	victim.Kill()
	l.waitAnswers(t, 30) // answers while the master is down
	require.NoError(t, victim.Start())
	l.waitAnswers(t, 60) // and after it came back empty
	l.finish(t)
	t.Logf("answers %d, 503s %d, state 409s %d", l.done.Load(), l.n503.Load(), l.n409.Load())
	require.Positive(t, l.n503.Load(), "the dead master's sessions answered 503 meanwhile")
	l.verify(t, workers)

	// Once more without load: the node loses s0's keys; the next read rehydrates them.
	ctx := context.Background()
	victim.Kill()
	require.NoError(t, victim.Start())
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, c.WaitOK(wctx))
	vc := victim.Client()
	defer vc.Close()
	n, err := vc.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the master came back empty")
	l.verify(t, workers)
	n, err = vc.Exists(ctx, s.Prefix+"ws:{acme/s0}:m").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the read rehydrated s0 from Postgres into its master")
}

// A slot moves between masters (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE key by key,
// SETSLOT NODE) while the multi-key working-state scripts run on it: the scripts meet ASK,
// TRYAGAIN (keys split across the two nodes) and then MOVED; every answer is 2xx or 503 (or 409 for a state write the durable arbiter refused),
// nothing acknowledged is lost, and afterwards the client follows the slot to its new node.
func TestRedisClusterSlotMigrationDuringScripts(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisCluster(t)
	s := apptest.Start(t, apptest.Env("STRATA_REDIS_URL", c.URL))
	key := s.NewKey("acme", "agent")
	ctx := context.Background()
	const workers = 4
	// Every worker on the same session: all load lands on the migrating slot.
	l := newClusterLoad(s, key, func(i int) string { return "mig" })
	slot := slotOf(t, c, "acme", "mig")
	src, err := c.NodeForSlot(ctx, slot)
	require.NoError(t, err)
	var dst *testenv.ClusterNode
	for _, n := range c.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	srcID, err := src.ID(ctx)
	require.NoError(t, err)
	dstID, err := dst.ID(ctx)
	require.NoError(t, err)
	sc, dc := src.Client(), dst.Client()
	defer sc.Close()
	defer dc.Close()

	l.run(workers)
	l.waitAnswers(t, 40)
	require.NoError(t, dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	require.NoError(t, sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		err := sc.Migrate(ctx, "127.0.0.1", fmt.Sprint(dst.Port), k, 0, 5*time.Second).Err()
		if err != nil && err.Error() != "NOKEY" {
			require.NoError(t, err)
		}
		l.waitAnswers(t, 20) // scripts run while the slot's keys are split across two nodes
	}
	// Keys the load created on src after the listing move too, then the slot is dst's.
	for {
		rest, err := sc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		require.NoError(t, err)
		if len(rest) == 0 {
			break
		}
		for _, k := range rest {
			_ = sc.Migrate(ctx, "127.0.0.1", fmt.Sprint(dst.Port), k, 0, 5*time.Second).Err()
		}
	}
	for _, n := range []*redis.Client{dc, sc} {
		require.NoError(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	for _, n := range c.Nodes {
		if n != src && n != dst {
			cl := n.Client()
			require.NoError(t, cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
			cl.Close()
		}
	}
	l.waitAnswers(t, 40) // after the move: MOVED, followed
	l.finish(t)
	t.Logf("answers %d, 503s %d, state 409s %d", l.done.Load(), l.n503.Load(), l.n409.Load())

	owner, err := c.NodeForSlot(ctx, slot)
	require.NoError(t, err)
	require.Equal(t, dst.Addr, owner.Addr, "the slot moved")
	cnt, err := dc.ClusterCountKeysInSlot(ctx, slot).Result()
	require.NoError(t, err)
	require.Positive(t, cnt, "the session's keys live on the new master")
	cnt, err = sc.ClusterCountKeysInSlot(ctx, slot).Result()
	require.NoError(t, err)
	require.Zero(t, cnt)

	// One session, several workers: the final state is one of the workers' last
	// acknowledged values, and every acknowledged append is in the gap-free log.
	r := s.Do("GET", "/v1/sessions/mig/state", key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var st struct {
		State struct {
			N int `json:"n"`
		} `json:"state"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &st))
	var last []int
	total := 0
	for i := 0; i < workers; i++ {
		last = append(last, l.acked[i])
		total += l.turns[i]
	}
	require.Contains(t, last, st.State.N)
	var n int
	var distinct, maxSeq int64
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(ctx,
		`SELECT count(*), count(DISTINCT seq), coalesce(max(seq), 0) FROM working_turns WHERE session_id = 'mig'`).Scan(&n, &distinct, &maxSeq))
	require.GreaterOrEqual(t, n, total, "every acknowledged append is durable")
	require.EqualValues(t, n, distinct)
	require.EqualValues(t, n, maxSeq, "seqs are gap-free")
}
