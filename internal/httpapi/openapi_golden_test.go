package httpapi_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

var updateGolden = flag.Bool("update-openapi", false, "rewrite testdata/openapi.golden.json from the running server")

// TestOpenAPIMatchesGolden pins the API contract: /openapi.json must be byte-identical to the
// committed copy. A deliberate API change regenerates it with
// `go test ./internal/httpapi/ -run TestOpenAPIMatchesGolden -update-openapi` and shows in review.
func TestOpenAPIMatchesGolden(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	r := s.Do("GET", "/openapi.json", "", nil)
	require.Equal(t, 200, r.Status)
	golden := filepath.Join("testdata", "openapi.golden.json")
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, r.Body, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	if !bytes.Equal(want, r.Body) {
		got := filepath.Join(t.TempDir(), "openapi.json")
		require.NoError(t, os.WriteFile(got, r.Body, 0o644))
		t.Fatalf("/openapi.json differs from %s (%d vs %d bytes); diff it with %s", golden, len(want), len(r.Body), got)
	}
}
