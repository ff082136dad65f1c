package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOverdueAndTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Hour).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)
	require.True(t, overdue(map[string]any{"status": "running", "deadline": past}, now))
	require.True(t, overdue(map[string]any{"status": "failed", "deadline": past}, now))
	require.False(t, overdue(map[string]any{"status": "completed", "deadline": past}, now))
	require.False(t, overdue(map[string]any{"status": "pending", "deadline": future}, now))
	h := string(when("2026-12-02T07:15:06.5+01:00"))
	require.Equal(t, `<time datetime="2026-12-02T06:15:06.5Z" title="2026-12-02 06:15:06 UTC">2026-12-02 06:15:06 UTC</time>`, h)
	require.Equal(t, "&lt;b&gt;", string(when("<b>")), "not a time: escaped text")
	require.Equal(t, "—", string(when(nil)))
}

func TestDiffJSON(t *testing.T) {
	t.Parallel()
	d := diffJSON(map[string]any{"version": 1.0, "state": map[string]any{"a": 1.0, "b": "x"}},
		map[string]any{"version": 2.0, "state": map[string]any{"a": 2.0, "c": true}})
	var lines []string
	for _, c := range d {
		lines = append(lines, c.Path+" "+c.Kind+" "+c.Before+" "+c.After)
	}
	require.Equal(t, "state.a changed 1 2|state.b removed \"x\" |state.c added  true", strings.Join(lines, "|"))
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"/console/jobs?x=1": "/console/jobs?x=1", "https://evil/": "",
		"//evil/console/": "", "/console/..\\evil": "", "/consolex": "", "": ""} {
		require.Equal(t, want, safeNext(in), in)
	}
}
