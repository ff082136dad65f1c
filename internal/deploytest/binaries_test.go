package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The two binaries of a rolling deploy: the previous release's server and this tree's.

// goBin is the go command that runs this test.
func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(goBin(), "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// migrationSet maps each migrations/*.sql file of a tree (a commit, or "" for the working
// tree) to its blob hash.
func migrationSet(root, commit string) (map[string]string, error) {
	set := map[string]string{}
	if commit == "" {
		files, err := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("no migrations/*.sql under %s", root)
		}
		out, err := git(root, append([]string{"hash-object", "--"}, files...)...)
		if err != nil {
			return nil, err
		}
		hashes := strings.Fields(out)
		for i, f := range files {
			set[filepath.Base(f)] = hashes[i]
		}
		return set, nil
	}
	out, err := git(root, "ls-tree", commit, "--", "migrations/")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		// <mode> blob <hash>\tmigrations/<name>
		meta, path, ok := strings.Cut(line, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || f[1] != "blob" || !strings.HasSuffix(path, ".sql") {
			continue
		}
		set[filepath.Base(path)] = f[2]
	}
	return set, nil
}

// olderSet says whether old is a strict subset of cur with every shared file unchanged:
// a database migrated by old can be migrated on by cur. When a file was edited in place it
// names it (the migrator refuses a changed checksum).
func olderSet(old, cur map[string]string) (bool, string) {
	for name, h := range old {
		switch ch, ok := cur[name]; {
		case !ok:
			return false, name + " is gone from this tree"
		case ch != h:
			return false, name + " was edited after this commit (the migrator would refuse its changed checksum)"
		}
	}
	if len(old) == len(cur) {
		return false, "the same migration set"
	}
	return true, ""
}

// previousRelease finds the previous release's commit: the newest commit whose migration
// set is older than this tree's (HEAD itself when the working tree adds migrations, else
// the parent of the newest commit that touched migrations/, skipping back over commits
// that edited an existing file in place). The notes say what was skipped and why.
func previousRelease(t *testing.T, root string) (commit string, notes []string) {
	t.Helper()
	if _, err := git(root, "rev-parse", "--git-dir"); err != nil {
		// Failing, not skipping: a skip would pass CI without the rolling-deploy proof. The
		// explicit way out is STRATA_DEPLOY_TEST=off.
		t.Fatalf("%s is not a git checkout, so the previous release cannot be built (%v): run the suite from a git clone, or set STRATA_DEPLOY_TEST=off to leave the rolling-deploy test out", root, err)
	}
	cur, err := migrationSet(root, "")
	if err != nil {
		t.Fatal(err)
	}
	deepened := false
	for {
		var candidates []string
		if head, err := git(root, "rev-parse", "HEAD"); err == nil {
			candidates = append(candidates, head)
		}
		// --first-parent: on main a branch arrives by a merge, whose first parent is the release
		// before it (a commit inside the merged branch was never deployed).
		log, err := git(root, "log", "--first-parent", "--format=%H", "-n", "40", "--", "migrations/")
		if err != nil {
			t.Fatal(err)
		}
		shallowEnd := false
		for _, c := range strings.Fields(log) {
			p, err := git(root, "rev-parse", "--verify", "--quiet", c+"^")
			if err != nil || p == "" {
				shallowEnd = true
				break
			}
			candidates = append(candidates, p)
		}
		for _, c := range candidates {
			set, err := migrationSet(root, c)
			if err != nil {
				t.Fatal(err)
			}
			ok, why := olderSet(set, cur)
			if ok {
				return c, notes
			}
			if why != "the same migration set" {
				notes = append(notes, fmt.Sprintf("skipped %.12s: %s", c, why))
			}
		}
		if !shallowEnd {
			t.Fatalf("no commit in the last 40 that touched migrations/ has an older migration set than this tree")
		}
		if deepened {
			t.Fatalf("the clone is shallow and has no older release after one deepen: run `git fetch --deepen=200` (or `git fetch --unshallow`) in %s", root)
		}
		deepened = true
		if _, err := git(root, "fetch", "--deepen=100"); err != nil {
			t.Fatalf("the clone is shallow (the previous release is not in it) and `git fetch --deepen=100` failed: %v; run `git fetch --unshallow` in %s", err, root)
		}
		notes = nil
	}
}

// cacheDir holds built binaries of old commits across runs.
func cacheDir() string { return filepath.Join(os.TempDir(), "strata-deploytest") }

// buildAt builds ./cmd/server of commit in a temporary git worktree (removed afterwards)
// and caches the binary by commit hash, so reruns are fast.
func buildAt(t *testing.T, root, commit string) string {
	t.Helper()
	bin := filepath.Join(cacheDir(), commit+"-server")
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin
	}
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	wt, err := os.MkdirTemp("", "strata-deploytest-wt-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(wt) // git worktree add wants to create it
	if _, err := git(root, "worktree", "add", "--detach", wt, commit); err != nil {
		t.Fatalf("checking out the previous release: %v", err)
	}
	defer func() {
		if _, err := git(root, "worktree", "remove", "--force", wt); err != nil {
			t.Logf("removing the temporary worktree %s: %v", wt, err)
			_ = os.RemoveAll(wt)
			_, _ = git(root, "worktree", "prune")
		}
	}()
	tmp := bin + fmt.Sprintf(".%d.tmp", os.Getpid())
	goBuild(t, wt, tmp)
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildCurrent builds this tree's ./cmd/server (the Go build cache makes reruns fast).
func buildCurrent(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "server-current")
	goBuild(t, root, bin)
	return bin
}

func goBuild(t *testing.T, dir, out string) {
	t.Helper()
	cmd := exec.Command(goBin(), "build", "-trimpath", "-o", out, "./cmd/server")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/server in %s: %v\n%s", dir, err, b)
	}
}
