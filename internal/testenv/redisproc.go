package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProcess is a private redis-server for tests that stop and start Redis.
type RedisProcess struct {
	t    testing.TB
	Port int
	URL  string
	cmd  *exec.Cmd
}

// FreePort returns a TCP port that was free a moment ago on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartRedis starts a redis-server without persistence on a free port; it is killed when
// the test ends.
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	p := &RedisProcess{t: t, Port: FreePort(t)}
	p.URL = fmt.Sprintf("redis://127.0.0.1:%d/0", p.Port)
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start (re)starts the server on its port and waits until it answers.
func (p *RedisProcess) Start() {
	p.t.Helper()
	p.cmd = exec.Command("redis-server", "--port", fmt.Sprint(p.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("testenv: starting redis-server (is it installed? run `make stores`): %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.Port)})
	defer c.Close()
	for i := 0; i < 100; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("testenv: redis-server on port %d did not answer", p.Port)
}

// Stop kills the server (SIGKILL: like a crash) and waits for it to exit.
func (p *RedisProcess) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}
