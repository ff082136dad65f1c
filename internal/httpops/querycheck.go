package httpops

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// BadQueryParam names the first query parameter whose name or value Postgres could not
// store or compare (invalid UTF-8, NUL), or "" when all are fine. Found by fuzzing the
// cursors: `?cursor=%83` reached a query and came back as a 500.
func BadQueryParam(q url.Values) string {
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

// CheckQuery answers 422 for such a parameter, before any handler runs.
func CheckQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loc := BadQueryParam(r.URL.Query()); loc != "" {
			WriteProblem(w, r, http.StatusUnprocessableEntity, "invalid "+loc, nil,
				&huma.ErrorDetail{Location: loc, Message: "must be valid UTF-8 without NUL characters"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
