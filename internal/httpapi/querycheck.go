package httpapi

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// badQueryParam names the first query parameter whose name or value Postgres could not
// store or compare (invalid UTF-8, NUL), or "" when all are fine. Found by fuzzing the
// cursors: `?cursor=%83` reached a query and came back as a 500.
func badQueryParam(q url.Values) string {
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
			return "query"
		}
		for _, v := range q[k] {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				return "query." + k
			}
		}
	}
	return ""
}

// checkQuery answers 422 for such a parameter, before any handler runs.
func checkQuery(w http.ResponseWriter, r *http.Request) bool {
	loc := badQueryParam(r.URL.Query())
	if loc == "" {
		return true
	}
	writeProblem(w, r, http.StatusUnprocessableEntity, "invalid "+loc, nil,
		&huma.ErrorDetail{Location: loc, Message: "must be valid UTF-8 without NUL characters"})
	return false
}
