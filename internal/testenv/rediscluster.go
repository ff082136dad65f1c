package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real Redis Cluster of three masters (no replicas) made of Debian's
// redis-server on free ports of 127.0.0.1, without persistence. The cluster configuration
// (nodes.conf) lives in a directory per node, so a node killed and started again rejoins
// with its slots and no data: a master restarted empty.
type RedisCluster struct {
	Nodes []*ClusterNode
	URL   string // STRATA_REDIS_URL for it: redis://first?addr=second&addr=third
	dir   string
}

// ClusterNode is one master of a RedisCluster.
type ClusterNode struct {
	Port int
	Addr string
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartRedisCluster starts a cluster of the test's own, stopped when the test ends: for
// tests that kill nodes or move slots. Suites that only need a cluster share one
// (SharedRedisCluster).
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c, err := startRedisCluster(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

var shared struct {
	once sync.Once
	c    *RedisCluster
	err  error
}

// SharedRedisCluster is one cluster per test process, started on first use. Its servers
// get SIGKILL when the process exits (Pdeathsig), so nothing outlives the test binary;
// packages that use it call StopShared from TestMain to remove its directory as well.
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	shared.once.Do(func() {
		removeStaleClusterDirs()
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("strata-redis-cluster-%d", os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			shared.err = err
			return
		}
		shared.c, shared.err = startRedisCluster(dir)
	})
	if shared.err != nil {
		t.Fatalf("testenv: shared Redis Cluster: %v", shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if one was started, and removes its files.
func StopShared() {
	if shared.c != nil {
		shared.c.Stop()
		_ = os.RemoveAll(shared.c.dir)
	}
}

// Exit is goleak.Cleanup's function for packages that may start the shared cluster: it
// stops it and exits with code.
func Exit(code int) {
	StopShared()
	os.Exit(code)
}

// removeStaleClusterDirs removes the shared-cluster directories of test processes that
// exited without StopShared (their servers died with them).
func removeStaleClusterDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "strata-redis-cluster-*"))
	for _, d := range dirs {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(d), "strata-redis-cluster-%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

func startRedisCluster(dir string) (*RedisCluster, error) {
	c := &RedisCluster{dir: dir}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	for i, p := range ports {
		n := &ClusterNode{Port: p, Addr: fmt.Sprintf("127.0.0.1:%d", p), dir: filepath.Join(dir, fmt.Sprint(i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		if err := n.Start(); err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// What `redis-cli --cluster create` does, without its prompt: each master takes a third
	// of the 16384 slots, then they meet.
	per := 16384 / len(c.Nodes)
	for i, n := range c.Nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.Nodes)-1 {
			hi = 16383
		}
		if err := n.do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			c.Stop()
			return nil, fmt.Errorf("assigning slots to %s: %w", n.Addr, err)
		}
		if i > 0 {
			if err := n.do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.Nodes[0].Port); err != nil {
				c.Stop()
				return nil, fmt.Errorf("%s meeting %s: %w", n.Addr, c.Nodes[0].Addr, err)
			}
		}
	}
	if err := c.WaitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	addrs := make([]string, 0, len(c.Nodes)-1)
	for _, n := range c.Nodes[1:] {
		addrs = append(addrs, "addr="+n.Addr)
	}
	c.URL = "redis://" + c.Nodes[0].Addr + "?" + strings.Join(addrs, "&")
	return c, nil
}

// WaitOK waits until every running node reports cluster_state:ok and knows every node.
func (c *RedisCluster) WaitOK(ctx context.Context) error {
	for {
		ok := true
		for _, n := range c.Nodes {
			cl := n.Client()
			info, err := cl.ClusterInfo(ctx).Result()
			nodes, nerr := cl.ClusterNodes(ctx).Result()
			cl.Close()
			if err != nil || nerr != nil || !strings.Contains(info, "cluster_state:ok") ||
				strings.Count(strings.TrimSpace(nodes), "\n")+1 != len(c.Nodes) || strings.Contains(nodes, "handshake") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Redis Cluster did not converge: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // kept: polling another process's gossip
		}
	}
}

// Client is a cluster client for c.
func (c *RedisCluster) Client() *redis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// NodeForSlot is the node that serves slot now.
func (c *RedisCluster) NodeForSlot(ctx context.Context, slot int) (*ClusterNode, error) {
	for _, n := range c.Nodes {
		cl := n.Client()
		slots, err := cl.ClusterSlots(ctx).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if slot >= int(s.Start) && slot <= int(s.End) && len(s.Nodes) > 0 {
				for _, m := range c.Nodes {
					if m.Addr == s.Nodes[0].Addr {
						return m, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("no node serves slot %d", slot)
	}
	return nil, fmt.Errorf("no node answers CLUSTER SLOTS")
}

// Stop kills every node.
func (c *RedisCluster) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Start (re)starts the node on its port with its cluster configuration and no data, and
// waits until it answers.
func (n *ClusterNode) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(n.Port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "no",
		"--dir", n.dir, "--save", "", "--appendonly", "no", "--logfile", filepath.Join(n.dir, "log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server (is it installed? run `make stores`): %w", err)
	}
	n.cmd = cmd
	cl := n.Client()
	defer cl.Close()
	for i := 0; i < 200; i++ {
		if cl.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(25 * time.Millisecond) // kept: waiting for another process to listen
	}
	return fmt.Errorf("redis-server on port %d did not answer", n.Port)
}

// Kill stops the node with SIGKILL (a crash: its data is gone) and waits for it.
func (n *ClusterNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// Client is a plain client of this node alone.
func (n *ClusterNode) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
}

// ID is the node's cluster id.
func (n *ClusterNode) ID(ctx context.Context) (string, error) {
	cl := n.Client()
	defer cl.Close()
	return cl.Do(ctx, "CLUSTER", "MYID").Text()
}

func (n *ClusterNode) do(ctx context.Context, args ...any) error {
	cl := n.Client()
	defer cl.Close()
	return cl.Do(ctx, args...).Err()
}

func freePorts(k int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < k {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		// A cluster node also listens on port+10000 (the bus).
		if !seen[p] && p+10000 < 65536 {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}
