package pythontest

import (
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// python is Debian's interpreter: the python3 first on PATH may be another build without
// Debian's python3-httpx and python3-pytest.
const python = "/usr/bin/python3"

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func requirePython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import httpx, pytest; print(httpx.__version__, pytest.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s with httpx and pytest is needed for the Python client tests: run scripts/test-deps.sh "+
			"(apt-get install -y python3-httpx python3-pytest): %v\n%s", python, err, out)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// junit is the part of pytest's --junitxml report we read.
type junit struct {
	Suites []struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Skipped  int `xml:"skipped,attr"`
	} `xml:"testsuite"`
}

func TestPythonClient(t *testing.T) {
	t.Parallel()
	requirePython(t)
	root := repoRoot(t)
	s := apptest.Start(t)
	org := "py-" + testenv.RandomID(8)
	key := s.NewKey(org, "agent")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	report := filepath.Join(t.TempDir(), "pytest.xml")
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "clients/python/tests", "-q", "-rfEs",
		"-p", "no:cacheprovider", "--junitxml="+report)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"STRATA_URL="+s.URL, "STRATA_API_KEY="+key, "STRATA_ADMIN_KEY="+s.AdminKey, "STRATA_ORG_ID="+org,
		"PYTHONPATH="+filepath.Join(root, "clients", "python", "src"),
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("the Python client's pytest suite failed (%v) after %s:\n%s", err, elapsed.Round(time.Millisecond), tail(out, 20000))
	}
	b, rerr := os.ReadFile(report)
	require.NoError(t, rerr, "pytest wrote no report:\n%s", tail(out, 4000))
	var rep junit
	require.NoError(t, xml.Unmarshal(b, &rep))
	require.Len(t, rep.Suites, 1)
	r := rep.Suites[0]
	require.Zero(t, r.Failures+r.Errors, tail(out, 4000))
	require.Zero(t, r.Skipped, "no Python test may be skipped:\n%s", tail(out, 4000))
	require.GreaterOrEqual(t, r.Tests, 36, "the suite ran fewer tests than it has:\n%s", tail(out, 4000))
	require.Less(t, elapsed, 90*time.Second, "the Python suite must stay under 90 s")
	t.Logf("Python client: %d/%d pytest tests passed in %s", r.Tests, r.Tests, elapsed.Round(time.Millisecond))
}
