package consoletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// The browser tests the suite must have run and passed (a renamed or skipped one fails here).
var wantBrowser = []string{
	"sign in, and an unknown key is refused with its field",
	"erase a subject end to end and read the clean receipt",
	"download and open an export",
	"restrict and lift",
	"find a stalled job (its worker killed) and read the failing step's input and error",
	"admin creates a key (shown once) and revokes it, ending its console sessions",
	"search memories and see the ranking breakdown; user content is escaped",
	"stored markup in every field the console shows is text, and no script runs",
	"a form posted without its CSRF token is refused",
	"an agent key gets no GDPR pages",
	"an expired session is sent to sign-in",
	"a compliance officer alone: nothing held, the memories themselves, a confirmed erasure, a plain receipt",
	"usable at 390 px: no horizontal scroll of the page, navigation reachable",
}

// TestConsoleInChromium runs tests/console (vitest + playwright-core driving Debian's
// Chromium) against a live server. CONSOLE_SCREENSHOTS=dir also saves the main pages there
// (make console-screenshots).
func TestConsoleInChromium(t *testing.T) {
	t.Parallel()
	chromium := "/usr/bin/chromium"
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("%s is missing: run scripts/test-deps.sh (apt-get install chromium)", chromium)
	}
	dir := testenv.NodeProject(t, "tests/console")
	// Jobs stall 2 s after their last progress here, so the killed worker's job is listed soon.
	s := apptest.Start(t, apptest.NoAutoConsolidation(), apptest.Env("STRATA_STALLED_AFTER", "2s"))
	org := "console-browser"
	env := []string{"STRATA_URL=" + s.URL, "STRATA_DB_URL=" + s.DBURL, "CHROMIUM=" + chromium,
		"STRATA_COMPLIANCE_KEY=" + s.NewKey(org, "compliance"), "STRATA_AGENT_KEY=" + s.NewKey(org, "agent"),
		"STRATA_ORG_ADMIN_KEY=" + s.NewKey(org, "admin"), "STRATA_EXPIRING_KEY=" + s.NewKey("console-expiring", "compliance")}
	if shots := os.Getenv("CONSOLE_SCREENSHOTS"); shots != "" {
		abs, err := filepath.Abs(shots)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(abs, 0o755))
		env = append(env, "CONSOLE_SCREENSHOTS="+abs)
	}
	start := time.Now()
	results, clean := testenv.Vitest(t, dir, 5*time.Minute, env...)
	status := map[string]string{}
	for _, r := range results {
		status[r.Title] = r.Status
	}
	for _, name := range wantBrowser {
		require.Equal(t, "passed", status[name], "%q did not pass:\n%s", name, testenv.Tail(clean, 6000))
	}
	t.Logf("console in Chromium: %d tests passed in %s", len(status), time.Since(start).Round(time.Millisecond))
}
