package httpapi

import (
	"strconv"
	"strings"

	"github.com/strata-mem/strata/internal/strata"
)

// etag renders a version as a strong ETag: "7".
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch parses an If-Match header carrying one of our ETags (quoted or bare, optionally
// W/-prefixed). ok is false when the header is absent or "*".
func ifMatch(h string) (version int64, ok bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" || h == "*" {
		return 0, false, nil
	}
	h = strings.TrimPrefix(h, "W/")
	h = strings.Trim(h, `"`)
	v, perr := strconv.ParseInt(h, 10, 64)
	if perr != nil || v < 0 {
		return 0, false, &strata.FieldError{Field: "header.If-Match", Msg: `must be an ETag this API returned, such as "3"`, Status: 400}
	}
	return v, true, nil
}
