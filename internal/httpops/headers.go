package httpops

import (
	"net/http"
	"strings"
)

// apiCSP is the policy of every response that is not the console's: the API answers data
// (JSON, NDJSON, Server-Sent Events, Prometheus text), never a page, so a browser that is
// made to open one (a link to an export, a memory, an audit record) runs nothing, loads
// nothing and frames nothing from it.
const apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// The two headers' values, shared by every response instead of a new slice each (Header.Set
// allocates one); len == cap, so an Add to either copies instead of writing into them.
var (
	nosniffValue = []string{"nosniff"}
	apiCSPValue  = []string{apiCSP}
)

// SecurityHeaders sets, on every response, X-Content-Type-Options: nosniff (no browser guesses
// HTML into stored text) and, outside the console (which sets its own, stricter-for-pages
// policy), a Content-Security-Policy that allows nothing.
func SecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Content-Type-Options"] = nosniffValue
		if r.URL.Path != "/console" && !strings.HasPrefix(r.URL.Path, "/console/") {
			h["Content-Security-Policy"] = apiCSPValue
		}
		next.ServeHTTP(w, r)
	})
}
