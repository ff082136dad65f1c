package deploytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// replica is one server process.
type replica struct {
	name, release string // release: "old" or "new"
	url, logPath  string
	cmd           *exec.Cmd
	exited        chan error
	gone          atomic.Bool

	ready time.Duration // start → /readyz 200
	drain time.Duration // SIGTERM → exit
	exit  string
}

// freePort asks the kernel for a port nobody listens on.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startReplica runs bin with the stack's environment and waits for /readyz 200.
func startReplica(t *testing.T, name, release, bin string, env []string, logDir string) *replica {
	t.Helper()
	port := freePort(t)
	r := &replica{name: name, release: release, url: fmt.Sprintf("http://127.0.0.1:%d", port),
		logPath: filepath.Join(logDir, name+".log"), exited: make(chan error, 1)}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("STRATA_HTTP_ADDR=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = logf, logf
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	go func() {
		err := cmd.Wait()
		r.gone.Store(true)
		r.exited <- err
	}()
	t.Cleanup(func() { r.stop(5 * time.Second) })
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // kept: polls a real child process until it serves
		select {
		case err := <-r.exited:
			r.exited <- err
			t.Fatalf("%s (%s release) exited before it was ready: %v\n%s", name, release, err, tail(r.logPath))
		default:
		}
		if resp, err := hc.Get(r.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.ready = time.Since(began)
				return r
			}
		}
	}
	t.Fatalf("%s (%s release) was not ready within 90s\n%s", name, release, tail(r.logPath))
	return nil
}

func (r *replica) alive() bool { return !r.gone.Load() }

// term sends SIGTERM and waits for the exit (at most bound), recording the drain time.
func (r *replica) term(bound time.Duration) error {
	if r.cmd == nil {
		return nil
	}
	began := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		r.drain = time.Since(began)
		r.cmd = nil
		r.exit = exitText(err)
		if err != nil {
			return fmt.Errorf("%s exited after SIGTERM with %s", r.name, r.exit)
		}
		return nil
	case <-time.After(bound):
		_ = r.cmd.Process.Kill()
		r.exit = "killed: no exit within " + bound.String()
		<-r.exited
		r.cmd = nil
		return fmt.Errorf("%s did not exit within %s of SIGTERM", r.name, bound)
	}
}

// kill sends SIGKILL.
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
	r.exit = "SIGKILL"
}

func (r *replica) stop(bound time.Duration) {
	if r.cmd != nil {
		_ = r.term(bound)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}
