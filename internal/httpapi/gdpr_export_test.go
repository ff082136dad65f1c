package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestGDPRExportBoundedMemory streams the export of a subject with 50,000 records of ~2 KB
// (≈100 MB of NDJSON) through the real HTTP stack and samples the process heap every 1,000
// lines: it must stay far below the export's size, which shows the export is streamed row
// by row (a buffered one would hold all of it). The server runs in this process, so the
// heap measured is the server's plus this reader's (which keeps one line at a time).
//
// Not parallel: the heap is the whole test process's, and parallel tests would allocate in
// it meanwhile. (Go runs top-level sequential tests before releasing the parallel ones.)
func TestGDPRExportBoundedMemory(t *testing.T) {
	// Timeouts far below the export's duration: an export is exempt from both.
	s := apptest.Start(t, apptest.Env("STRATA_REQUEST_TIMEOUT", "2s"), apptest.Env("STRATA_STORE_TIMEOUT", "500ms"))
	comp := s.NewKey("acme", "compliance")
	owner := testenvOwner(t, s)
	const user, half = "bulk-user", 25000
	ctx := context.Background()
	_, err := owner.Exec(ctx, `INSERT INTO working_turns (org_id, session_id, seq, user_id, role, content, created_at)
		SELECT 'acme', 'bulk-session', g, $1, 'user', repeat('turn text ', 200) || g, now() FROM generate_series(1, $2::int) g`, user, half)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `INSERT INTO episodic_jobs (org_id, job_id, last_seq) VALUES ('acme', 'bulk-job', $1::int)`, half)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint, user_id)
		SELECT 'acme', 'bulk-job', g, 'edit', jsonb_build_object('text', repeat('event text ', 200) || g), sha256(g::text::bytea), $1
		FROM generate_series(1, $2::int) g`, user, half)
	require.NoError(t, err)

	req, err := http.NewRequest("GET", s.URL+"/v1/gdpr/exports?user_id="+user, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+comp)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines, bytes int64
	var peak uint64
	var summary map[string]any
	for sc.Scan() {
		lines++
		bytes += int64(len(sc.Bytes())) + 1
		if lines%1000 == 0 {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak {
				peak = ms.HeapAlloc
			}
		}
		if len(sc.Bytes()) < 4096 && json.Valid(sc.Bytes()) {
			var m map[string]any
			_ = json.Unmarshal(sc.Bytes(), &m)
			if m["type"] == "summary" {
				summary = m
			}
		}
	}
	require.NoError(t, sc.Err())
	require.NotNil(t, summary, "the stream ended without its summary line; server log:\n%s", s.Logs())
	require.EqualValues(t, 2*half+1, summary["records"], "the turns, the events, and the audit record of this export")
	growth := int64(peak) - int64(base)
	t.Logf("exported %v records, %.1f MB in %v; heap before %.1f MB, peak %.1f MB (growth %.1f MB)",
		summary["records"], float64(bytes)/1e6, time.Since(began).Round(time.Millisecond), float64(base)/1e6, float64(peak)/1e6, float64(growth)/1e6)
	require.Greater(t, bytes, int64(90e6))
	require.Less(t, growth, int64(40e6), "the export must stream: heap growth stays far below its %d bytes", bytes)
}
