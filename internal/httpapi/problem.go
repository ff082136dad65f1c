package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/answercap"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// scrubInternal is a response transformer: internal error text never reaches a client, so a
// 5xx problem (other than 503/504, which say what to retry, and 502, which only
// extractionProblem answers: which part of the model's answer broke which rule, never its
// text) carries only a generic detail; the request id is in the X-Request-Id header.
func scrubInternal(_ huma.Context, _ string, v any) (any, error) {
	if em, ok := v.(*huma.ErrorModel); ok && em.Status >= 500 && em.Status != http.StatusBadGateway &&
		em.Status != http.StatusServiceUnavailable && em.Status != http.StatusGatewayTimeout {
		em.Detail, em.Errors = httpops.InternalDetail, nil
	}
	return v, nil
}

// clarifyProblems is a response transformer for the problems huma writes itself when a
// request fails validation ("validation failed"), before any handler runs:
//   - no detail repeats what was submitted (huma puts the offending value, often the whole
//     body, in errors[].value: a 900 KB body would come back in a 900 KB problem, personal
//     data included) — the location names the field instead;
//   - a missing required property is located at the property ("body.text"), not at the
//     object that lacks it ("body");
//   - 400 says the JSON is malformed and where (jsonFormat's message), 415 says to send
//     application/json;
//   - an unexpected property's problem lists the properties allowed there (reg resolves the
//     body schema's references).
func clarifyProblems(reg huma.Registry) huma.Transformer {
	return func(ctx huma.Context, _ string, v any) (any, error) { return clarifyProblem(ctx, reg, v), nil }
}

func clarifyProblem(ctx huma.Context, reg huma.Registry, v any) any {
	em, ok := v.(*huma.ErrorModel)
	if !ok || em.Detail != "validation failed" {
		return v
	}
	for _, d := range em.Errors {
		d.Value = nil
		if d.Message == "unexpected property" {
			if allowed := allowedProperties(reg, ctx.Operation(), d.Location); len(allowed) > 0 {
				d.Message = "unexpected property; allowed: " + strings.Join(allowed, ", ")
			}
		}
		var name string
		if _, err := fmt.Sscanf(d.Message, "expected required property %s to be present", &name); err == nil && name != "" {
			if d.Location == "" {
				d.Location = "body"
			}
			d.Location += "." + name
			d.Message = "is required"
		}
	}
	switch em.Status {
	case http.StatusBadRequest:
		em.Detail = "the request body is not valid JSON"
		for _, d := range em.Errors {
			if d.Location == "body" && d.Message != "" {
				em.Detail = d.Message
				break
			}
		}
	case http.StatusUnsupportedMediaType:
		got := ctx.Header("Content-Type")
		if len(got) > 80 { // a media type, not a place to hand text back
			got = got[:80] + "…"
		}
		em.Detail = "send the request body as JSON with Content-Type: application/json (this request's was " + fmt.Sprintf("%q", got) + ")"
		for _, d := range em.Errors {
			d.Location, d.Message = "header.Content-Type", "must be application/json"
		}
	}
	return v
}

// allowedProperties lists the properties the request body's schema allows in the object
// that holds the property at location ("body.input.bogus" → the properties of input),
// sorted; nil when the schema cannot be followed there.
func allowedProperties(reg huma.Registry, op *huma.Operation, location string) []string {
	rest, ok := strings.CutPrefix(location, "body.")
	if op == nil || op.RequestBody == nil || !ok {
		return nil
	}
	mt := op.RequestBody.Content["application/json"]
	if mt == nil || mt.Schema == nil {
		return nil
	}
	resolve := func(sc *huma.Schema) *huma.Schema {
		if sc != nil && sc.Ref != "" {
			return reg.SchemaFromRef(sc.Ref)
		}
		return sc
	}
	sc := resolve(mt.Schema)
	segs := strings.Split(rest, ".")
	for _, seg := range segs[:len(segs)-1] {
		name, idx, _ := strings.Cut(seg, "[")
		if sc = resolve(sc); sc == nil {
			return nil
		}
		if name != "" {
			sc = resolve(sc.Properties[name])
		}
		for ; idx != "" && sc != nil; _, idx, _ = strings.Cut(idx, "[") {
			sc = resolve(sc.Items)
		}
	}
	if sc = resolve(sc); sc == nil || len(sc.Properties) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(sc.Properties))
}

// jsonFormat is huma's JSON format with a syntax error that says where: "malformed JSON at
// line 3, column 7 (byte 42): invalid character '}' looking for beginning of object key string".
var jsonFormat = huma.Format{
	Marshal: huma.DefaultJSONFormat.Marshal,
	Unmarshal: func(data []byte, v any) error {
		err := json.Unmarshal(data, v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return errors.New(strata.MalformedJSON(data, err))
		}
		return err
	},
}

// problem turns a tier error into the huma error the client sees, logging what the client
// must not see.
func (s *Server) problem(ctx context.Context, err error) error { return s.problemAt(ctx, err, nil) }

// problemAt is problem for an operation whose parameters locs names: a field error's bare
// field name ("text", "params[3].op", "session") gets the location it travelled in
// ("body.text", "path.session"); names that carry one already keep it.
func (s *Server) problemAt(ctx context.Context, err error, locs map[string]string) error {
	var se huma.StatusError
	if errors.As(err, &se) {
		return err
	}
	var fe *strata.FieldError
	var ce *strata.ConflictError
	var ue *strata.UnavailableError
	var tooLarge *answercap.TooLargeError
	var pe *answercap.ProviderError
	var cu *pg.CommitUnknownError
	switch {
	case errors.As(err, &fe):
		status := fe.Status
		if status == 0 {
			status = fieldStatus[fe.Kind]
		}
		field := locate(fe.Field, locs)
		return huma.NewError(status, "invalid "+field, &huma.ErrorDetail{Location: field, Message: fe.Msg})
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
	case errors.Is(err, strata.ErrRestricted):
		return huma.Error403Forbidden("processing of this data subject's data is restricted (GDPR Art. 18): it is kept, " +
			"but not served to agents until the restriction is lifted (POST/DELETE /v1/gdpr/restrictions/{user})")
	case errors.Is(err, strata.ErrForbidden):
		return huma.Error403Forbidden("this key's role may not do this")
	case errors.As(err, &tooLarge): // before ue: the embedder's wraps it
		// The model or the embedder answered beyond what was asked for; its size and the
		// limit, never its content (issue 57).
		s.Log.WarnContext(ctx, "answer refused for its size", "err", tooLarge.Error(), "request_id", httpops.RequestID(ctx))
		return huma.NewError(http.StatusBadGateway, tooLarge.Error()+"; nothing was applied")
	case errors.As(err, &cu): // before ue, which it wraps
		s.Log.WarnContext(ctx, "commit outcome unknown", "err", cu.Err, "request_id", httpops.RequestID(ctx))
		s.metrics.StoreErrors.WithLabelValues("postgres").Inc()
		return commitUnknownProblem(ctx)
	case errors.As(err, &ue):
		s.Log.WarnContext(ctx, "store unavailable", "store", ue.Store, "err", ue.Err, "request_id", httpops.RequestID(ctx))
		s.metrics.StoreErrors.WithLabelValues(ue.Store).Inc()
		return huma.ErrorWithHeaders(huma.NewError(http.StatusServiceUnavailable, ue.Store+" is unavailable; retry later"),
			http.Header{"Retry-After": {"2"}})
	case errors.As(err, &pe): // after ue: the embedder's transient failures are a 503 there
		// The model or the embedder refused the call or answered malformed: what happened
		// (status, provider error type/code, the rule), never its message or body (issue 57).
		s.Log.WarnContext(ctx, "model or embedder call failed", "err", pe.Error(), "request_id", httpops.RequestID(ctx))
		if pe.Status == http.StatusTooManyRequests {
			return huma.ErrorWithHeaders(huma.NewError(http.StatusServiceUnavailable, pe.Error()+"; nothing was applied; retry later"),
				http.Header{"Retry-After": {"2"}})
		}
		return huma.NewError(http.StatusBadGateway, pe.Error()+"; nothing was applied")
	case errors.Is(err, strata.ErrUnavailable): // the sentinel without a store named
		s.Log.WarnContext(ctx, "unavailable", "err", err, "request_id", httpops.RequestID(ctx))
		return huma.ErrorWithHeaders(huma.NewError(http.StatusServiceUnavailable, "a store is unavailable; retry later"),
			http.Header{"Retry-After": {"2"}})
	case errors.Is(err, context.DeadlineExceeded):
		return huma.NewError(http.StatusGatewayTimeout, "the request timed out; retry later")
	case errors.Is(err, context.Canceled):
		return huma.NewError(499, "client closed request")
	}
	s.Log.ErrorContext(ctx, "internal error", "err", logSafe(err), "request_id", httpops.RequestID(ctx))
	return huma.NewError(http.StatusInternalServerError, httpops.InternalDetail)
}

// logSafe is an error's text for the log with Postgres's own message and detail left out:
// they may quote the statement's values (a name, a memory's text, a key that collided).
// The SQLSTATE, table and constraint stay, and so does our own wrapping.
func logSafe(err error) string {
	msg := err.Error()
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg = strings.ReplaceAll(msg, pe.Error(), fmt.Sprintf("postgres error SQLSTATE %s (table %q, constraint %q)",
			pe.Code, pe.TableName, pe.ConstraintName))
	}
	return msg
}

// fieldStatus answers a tier's field error by its kind.
var fieldStatus = map[strata.FieldKind]int{
	strata.FieldInvalid:   http.StatusUnprocessableEntity,
	strata.FieldMalformed: http.StatusBadRequest,
	strata.FieldTooLarge:  http.StatusRequestEntityTooLarge,
	strata.FieldNotFound:  http.StatusNotFound,
}

// ProblemCommitOutcomeUnknown is the type of the 503 problem of a write whose COMMIT was
// sent to Postgres and whose answer was lost with the connection: the write may have been
// applied. A client tests the type, not the detail's wording.
const ProblemCommitOutcomeUnknown = "urn:strata:problem:commit-outcome-unknown"

// commitUnknownProblem is that problem. With an Idempotency-Key the retry tells the truth:
// the stored answer if the write committed, the write run once if it did not, 409 while
// the first attempt's transaction may still be open on the server.
func commitUnknownProblem(ctx context.Context) error {
	detail := "postgres did not confirm the commit: the write may have been applied; " +
		"check before retrying it (send an Idempotency-Key to make a retry safe)"
	var details []*huma.ErrorDetail
	if st, ok := ctx.Value(uowKey{}).(*uowState); ok && st.keyed {
		detail = "postgres did not confirm the commit: the write may have been applied; " +
			"retry with the same Idempotency-Key to learn its outcome (the committed answer is replayed, " +
			"or the write runs once if it was not applied)"
		details = append(details, &huma.ErrorDetail{Location: "header.Idempotency-Key",
			Message: "retry with this same key: the outcome of this request is unknown"})
	}
	return huma.ErrorWithHeaders(&huma.ErrorModel{Type: ProblemCommitOutcomeUnknown, Title: http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable, Detail: detail, Errors: details}, http.Header{"Retry-After": {"2"}})
}
