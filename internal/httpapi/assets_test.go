package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

type epAsset struct {
	AssetID   string         `json:"asset_id"`
	Version   int64          `json:"version"`
	URI       string         `json:"uri"`
	MediaType string         `json:"media_type"`
	SHA256    string         `json:"sha256"`
	Metadata  map[string]any `json:"metadata"`
	JobID     string         `json:"job_id"`
	Seq       int64          `json:"seq"`
	UserID    string         `json:"user_id"`
}

type epVersion struct {
	Version       int64  `json:"version"`
	ParentVersion int64  `json:"parent_version"`
	URI           string `json:"uri"`
	JobID         string `json:"job_id"`
	Seq           int64  `json:"seq"`
}

func TestAssetLifecycle(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	sum := strings.Repeat("ab", 32)
	require.Equal(t, 201, s.Do("POST", "/v1/jobs/edit/events", key, `[{"op":"import"},{"op":"crop","params":{"x":1}}]`).Status)

	// PUT creates at version 1, ETag "1".
	r := s.Do("PUT", "/v1/assets/clip-1", key, map[string]any{"uri": "s3://b/clip.mp4", "media_type": "video/mp4",
		"sha256": sum, "metadata": map[string]any{"fps": 25}, "user_id": "u1", "job_id": "edit", "seq": 1})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	var a epAsset
	r.JSON(t, &a)
	require.Equal(t, epAsset{AssetID: "clip-1", Version: 1, URI: "s3://b/clip.mp4", MediaType: "video/mp4", SHA256: sum,
		Metadata: map[string]any{"fps": float64(25)}, JobID: "edit", Seq: 1, UserID: "u1"}, a)

	// The same content again changes nothing.
	r = s.Do("PUT", "/v1/assets/clip-1", key, map[string]any{"uri": "s3://b/clip.mp4", "media_type": "video/mp4",
		"sha256": sum, "metadata": map[string]any{"fps": 25.0}})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))

	// A new version names its parent and the event that produced it.
	r = s.Do("POST", "/v1/assets/clip-1/versions", key, map[string]any{"parent_version": 1, "uri": "s3://b/clip-v2.mp4",
		"media_type": "video/mp4", "job_id": "edit", "seq": 2})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	var v epVersion
	r.JSON(t, &v)
	require.Equal(t, epVersion{Version: 2, ParentVersion: 1, URI: "s3://b/clip-v2.mp4", JobID: "edit", Seq: 2}, v)

	// A stale parent → 409 with the current version; nothing written.
	r = s.Do("POST", "/v1/assets/clip-1/versions", key, map[string]any{"parent_version": 1, "uri": "s3://b/lost.mp4"})
	require.Equal(t, 409, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"current_version":2`)
	r = s.Do("POST", "/v1/assets/clip-1/versions", key, map[string]any{"uri": "s3://b/lost.mp4"})
	require.Equal(t, 409, r.Status, "no parent = create, but the asset exists")
	// ... also through If-Match, on PUT and POST.
	r = s.Do("PUT", "/v1/assets/clip-1", key, map[string]any{"uri": "s3://b/lost.mp4"}, "If-Match", `"1"`)
	require.Equal(t, 409, r.Status, string(r.Body))
	r = s.Do("POST", "/v1/assets/clip-1/versions", key, map[string]any{"uri": "s3://b/v3.mp4"}, "If-Match", `"2"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	r = s.Do("PUT", "/v1/assets/clip-1", key, map[string]any{"uri": "s3://b/v4.mp4"}, "If-Match", `"3"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"4"`, r.Header.Get("ETag"))

	// GET answers the current version; its scope carries over.
	r = s.Do("GET", "/v1/assets/clip-1", key, nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, `"4"`, r.Header.Get("ETag"))
	r.JSON(t, &a)
	require.Equal(t, "s3://b/v4.mp4", a.URI)
	require.Equal(t, "u1", a.UserID)

	// The lineage, paginated.
	var page struct {
		Items      []epVersion `json:"items"`
		NextCursor string      `json:"next_cursor"`
	}
	s.Do("GET", "/v1/assets/clip-1/versions?limit=3", key, nil).JSON(t, &page)
	require.Len(t, page.Items, 3)
	require.Equal(t, "3", page.NextCursor)
	require.Equal(t, []int64{0, 1, 2}, []int64{page.Items[0].ParentVersion, page.Items[1].ParentVersion, page.Items[2].ParentVersion})
	page.NextCursor = ""
	s.Do("GET", "/v1/assets/clip-1/versions?limit=3&cursor=3", key, nil).JSON(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, int64(4), page.Items[0].Version)
	require.Empty(t, page.NextCursor)

	// POST versions with no parent creates a new asset.
	r = s.Do("POST", "/v1/assets/new-one/versions", key, map[string]any{"uri": "file:///x"})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, 404, s.Do("GET", "/v1/assets/missing", key, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/assets/missing/versions", key, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/assets/missing/versions", key, map[string]any{"parent_version": 3, "uri": "file:///x"}).Status)
}

// Concurrent writers that all name the same parent: exactly one wins, the others get 409.
func TestAssetVersionConflict(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/assets/a", key, map[string]any{"uri": "s3://x/0"}).Status)
	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = s.Do("POST", "/v1/assets/a/versions", key, map[string]any{"parent_version": 1, "uri": fmt.Sprintf("s3://x/%d", i+1)}).Status
		}()
	}
	wg.Wait()
	won := 0
	for _, st := range statuses {
		require.Contains(t, []int{201, 409}, st)
		if st == 201 {
			won++
		}
	}
	require.Equal(t, 1, won, "%v", statuses)
	require.Equal(t, 2, epCount(t, s, "asset_versions"))
}

func TestAssetBadInput(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	cases := []struct {
		name, method, path string
		body               any
		hdr                []string
		status             int
		loc                string
	}{
		// A missing required property is located at itself.
		{"missing uri", "PUT", "/v1/assets/a", map[string]any{"media_type": "video/mp4"}, nil, 422, "body.uri"},
		{"bad sha256", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x", "sha256": "XYZ"}, nil, 422, "body.sha256"},
		{"bad media type", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x", "media_type": "mp4"}, nil, 422, "body.media_type"},
		{"metadata not an object", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x", "metadata": []int{1}}, nil, 422, "body.metadata"},
		{"NUL in uri", "PUT", "/v1/assets/a", `{"uri":"s3://x\u0000"}`, nil, 422, "body.uri"},
		{"seq without job", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x", "seq": 3}, nil, 422, "body.job_id"},
		{"unknown event", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x", "job_id": "j", "seq": 3}, nil, 422, "body.seq"},
		{"bad asset id", "PUT", "/v1/assets/a%20b", map[string]any{"uri": "s3://x"}, nil, 422, "path.asset"},
		{"bad If-Match", "PUT", "/v1/assets/a", map[string]any{"uri": "s3://x"}, []string{"If-Match", "nope"}, 400, "header.If-Match"},
		{"negative parent", "POST", "/v1/assets/a/versions", map[string]any{"uri": "s3://x", "parent_version": -1}, nil, 422, "body.parent_version"},
		{"limit too big", "GET", "/v1/assets/a/versions?limit=5000", nil, nil, 422, "query.limit"},
	}
	for _, c := range cases {
		r := s.Do(c.method, c.path, key, c.body, c.hdr...)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Contains(t, epLocations(t, r), c.loc, "%s: %s", c.name, r.Body)
	}
	require.Equal(t, 0, epCount(t, s, "assets"))
	require.Equal(t, 0, epCount(t, s, "asset_versions"))
}
