package httpops

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// ProblemContentType is the media type of an RFC 9457 problem.
const ProblemContentType = "application/problem+json"

// InternalDetail is the only detail a 5xx problem carries (the request id is in the
// X-Request-Id header; what went wrong is in the log).
const InternalDetail = "internal error: report the X-Request-Id of this response"

// WriteProblem writes a problem outside huma (middleware), in the shape huma writes them.
func WriteProblem(w http.ResponseWriter, r *http.Request, status int, detail string, hdr http.Header, details ...*huma.ErrorDetail) {
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&huma.ErrorModel{
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Errors: details,
	})
}

// RetryAfter is a Retry-After header of seconds.
func RetryAfter(seconds int) http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(seconds)}}
}
