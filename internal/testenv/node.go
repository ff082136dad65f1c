package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"
)

var (
	npmMu   sync.Mutex
	npmDone = map[string]error{}
)

// NodeProject returns the directory of a Node project of this repository (rel from the
// repository root, e.g. "clients/typescript") with its npm dependencies installed: it checks
// for Node 20+ and npm, and runs `npm ci` once per process when node_modules lacks vitest.
func NodeProject(t testing.TB, rel string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", rel)
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not on PATH: the tests of %s need Node 20+ and npm", bin, rel)
		}
	}
	out, err := exec.Command("node", "-e", "process.stdout.write(process.versions.node)").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	var major int
	_, _ = fmt.Sscanf(string(out), "%d", &major)
	if major < 20 {
		t.Fatalf("node %s is too old: the tests of %s need Node 20+", out, rel)
	}
	npmMu.Lock()
	defer npmMu.Unlock()
	err, done := npmDone[dir]
	if !done {
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", ".bin", "vitest")); serr != nil {
			cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
			cmd.Dir = dir
			if b, cerr := cmd.CombinedOutput(); cerr != nil {
				err = fmt.Errorf("npm ci in %s: %v\n%s", dir, cerr, b)
			}
		}
		npmDone[dir] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// VitestResult is one test of a vitest run.
type VitestResult struct {
	Suite  string // the outermost describe ("" at the top level)
	Title  string
	Status string // passed, failed, skipped, ...
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// Vitest runs `vitest run` in dir (a NodeProject) with env added to the process
// environment, within timeout. A failing run fails the test with the tail of its output; it
// returns every test's result and the output without colours.
func Vitest(t testing.TB, dir string, timeout time.Duration, env ...string) ([]VitestResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	report := filepath.Join(t.TempDir(), "vitest.json")
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "vitest"), "run",
		"--reporter=default", "--reporter=json", "--outputFile.json="+report)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1", "CI=true"), env...)
	out, err := cmd.CombinedOutput()
	clean := ansi.ReplaceAllString(string(out), "")
	if err != nil {
		t.Fatalf("vitest in %s failed (%v):\n%s", dir, err, Tail(clean, 20000))
	}
	var rep struct {
		TestResults []struct {
			AssertionResults []struct {
				AncestorTitles []string `json:"ancestorTitles"`
				Title          string   `json:"title"`
				Status         string   `json:"status"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("vitest wrote no report: %v\n%s", err, Tail(clean, 4000))
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("vitest report: %v", err)
	}
	var res []VitestResult
	for _, f := range rep.TestResults {
		for _, a := range f.AssertionResults {
			r := VitestResult{Title: a.Title, Status: a.Status}
			if len(a.AncestorTitles) > 0 {
				r.Suite = a.AncestorTitles[0]
			}
			res = append(res, r)
		}
	}
	return res, clean
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
