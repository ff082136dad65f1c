package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/strata"
)

// ProblemType is the `type` URI prefix of Strata's problems.
const problemContentType = "application/problem+json"

func init() {
	// Internal error text never reaches a client: 5xx problems carry only a generic detail
	// and the request id (set by writeProblem / the request-id middleware header).
	orig := huma.NewError
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		if status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout {
			return orig(status, "internal error: report the X-Request-Id of this response")
		}
		return orig(status, msg, errs...)
	}
}

// problem turns a tier error into the huma error the client sees, logging what the client
// must not see.
func (s *Server) problem(ctx context.Context, err error) error {
	var se huma.StatusError
	if errors.As(err, &se) {
		return err
	}
	var fe *strata.FieldError
	var ce *strata.ConflictError
	var ue *strata.UnavailableError
	switch {
	case errors.As(err, &fe):
		status := fe.Status
		if status == 0 {
			status = http.StatusUnprocessableEntity
		}
		return huma.NewError(status, "invalid "+fe.Field, &huma.ErrorDetail{Location: fe.Field, Message: fe.Msg})
	case errors.As(err, &ce):
		var details []error
		if len(ce.Details) > 0 {
			details = append(details, &huma.ErrorDetail{Message: "current state", Value: ce.Details})
		}
		return huma.NewError(http.StatusConflict, ce.Msg, details...)
	case errors.Is(err, strata.ErrConflict):
		return huma.NewError(http.StatusConflict, "conflict")
	case errors.Is(err, strata.ErrNotFound):
		return huma.Error404NotFound("not found")
	case errors.Is(err, strata.ErrForbidden):
		return huma.Error403Forbidden("this key's role may not do this")
	case errors.As(err, &ue):
		s.log.WarnContext(ctx, "store unavailable", "store", ue.Store, "err", ue.Err, "request_id", requestID(ctx))
		s.metrics.storeErrors.WithLabelValues(ue.Store).Inc()
		return huma.ErrorWithHeaders(huma.NewError(http.StatusServiceUnavailable, ue.Store+" is unavailable; retry later"),
			http.Header{"Retry-After": {"2"}})
	case errors.Is(err, context.DeadlineExceeded):
		return huma.NewError(http.StatusGatewayTimeout, "the request timed out; retry later")
	case errors.Is(err, context.Canceled):
		return huma.NewError(499, "client closed request")
	}
	s.log.ErrorContext(ctx, "internal error", "err", err, "request_id", requestID(ctx))
	return huma.NewError(http.StatusInternalServerError, "internal error")
}

// writeProblem writes a problem outside huma (middleware), in the same shape.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string, hdr http.Header, details ...*huma.ErrorDetail) {
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", problemContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&huma.ErrorModel{
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Errors: details,
	})
}

func retryAfter(seconds int) http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(seconds)}}
}

// logAttrs are the request's identifying attributes for log lines.
func logAttrs(ctx context.Context) []any {
	return []any{slog.String("request_id", requestID(ctx))}
}
