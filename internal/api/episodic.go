package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/strata"
)

// AppendBody is one event object or an array of them: the raw request body, decoded and
// validated by the handler so that errors name body[i].field. The OpenAPI document
// describes it as oneOf (AppendBodySchema).
type AppendBody struct {
	Raw json.RawMessage
}

// AppendBodySchema documents the body: an EventInput or an array of 1-1000 of them.
func AppendBodySchema(r huma.Registry) *huma.Schema {
	ev := r.Schema(reflect.TypeFor[episodic.EventInput](), true, "EventInput")
	one, maxItems := 1, episodic.MaxBatch
	return &huma.Schema{
		Description: "One event, or an array of 1-1000 events appended in one transaction.",
		OneOf:       []*huma.Schema{ev, {Type: huma.TypeArray, Items: ev, MinItems: &one, MaxItems: &maxItems}},
	}
}

// Decode parses the body into events; array reports whether it was an array.
func (b *AppendBody) Decode() (in []episodic.EventInput, array bool, err error) {
	raw := bytes.TrimSpace(b.Raw)
	if len(raw) == 0 {
		return nil, false, strata.Malformed("body", "an event object or an array of events is required")
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return nil, false, strata.Malformed("body", "%s", strata.MalformedJSON(raw, err))
	}
	var elems []json.RawMessage
	if raw[0] == '[' {
		array = true
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, true, strata.Malformed("body", "%s", err.Error())
		}
	} else {
		elems = []json.RawMessage{raw}
	}
	loc := func(i int) string {
		if array {
			return fmt.Sprintf("body[%d]", i)
		}
		return "body"
	}
	if array && len(elems) == 0 {
		return nil, true, strata.Invalid("body", "at least one event is required")
	}
	if len(elems) > episodic.MaxBatch {
		return nil, true, strata.Invalid("body", "at most %d events per request", episodic.MaxBatch)
	}
	in = make([]episodic.EventInput, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '{' {
			return nil, array, strata.Invalid(loc(i), "must be an event object")
		}
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in[i]); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				return nil, array, strata.Invalid(loc(i)+"."+te.Field, "must be a %s, not a JSON %s", JsonKind(te.Type), te.Value)
			}
			if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				return nil, array, strata.Invalid(loc(i)+"."+strings.Trim(f, `"`), "unknown field; allowed: %s", strings.Join(eventFields(), ", "))
			}
			return nil, array, strata.Invalid(loc(i), "%s", err.Error())
		}
	}
	return in, array, nil
}

// eventFields are the JSON names of an event's fields, sorted (for the problem of an unknown one).
func eventFields() []string {
	var names []string
	t := reflect.TypeFor[episodic.EventInput]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func JsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Bool:
		return "boolean"
	}
	return t.String()
}

// AppendResult answers an append: the event for a one-event body, a list for an array.
type AppendResult struct {
	One   *episodic.Event
	Items []episodic.Event
}

// MarshalJSON writes the event or {"items": [...]}.
func (r AppendResult) MarshalJSON() ([]byte, error) {
	if r.One != nil {
		return json.Marshal(r.One)
	}
	return json.Marshal(List[episodic.Event]{Items: r.Items})
}

// Schema documents the response: an Event, or {"items": [Event]} for an array body.
func (AppendResult) Schema(r huma.Registry) *huma.Schema {
	ev := r.Schema(reflect.TypeFor[episodic.Event](), true, "Event")
	return &huma.Schema{
		Description: "The stored event for a one-event body; {\"items\": [...]} in input order for an array body.",
		OneOf: []*huma.Schema{ev, {Type: huma.TypeObject, Required: []string{"items"},
			Properties: map[string]*huma.Schema{"items": {Type: huma.TypeArray, Items: ev}}}},
	}
}

type AppendEventsInput struct {
	Job     string `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job id (client-chosen)."`
	RawBody []byte `contentType:"application/json"`
}

type AppendEventsOutput struct {
	Status int
	Body   AppendResult
}

type ListEventsInput struct {
	Job      string    `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job id (client-chosen)."`
	AfterSeq int64     `query:"after_seq" minimum:"0" doc:"Only events with seq > after_seq."`
	Cursor   string    `query:"cursor" maxLength:"20" doc:"next_cursor of the previous page (a seq; same as after_seq)."`
	Limit    int       `query:"limit" minimum:"1" maximum:"1000" doc:"Page size (default 100, max 1000)."`
	Op       string    `query:"op" maxLength:"800" doc:"Only events with this op."`
	Since    time.Time `query:"since" doc:"Only events created at or after this time (RFC 3339)."`
	Until    time.Time `query:"until" doc:"Only events created before this time (RFC 3339)."`
	Raw      bool      `query:"raw" doc:"Include events that consolidation compacted (by default their summary event stands in for them)."`
}

type ListEventsOutput struct {
	Body List[episodic.Event]
}

type AppliedInput struct {
	Job         string `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job id (client-chosen)."`
	Op          string `query:"op" maxLength:"800" doc:"The op to look for (with params)."`
	Params      string `query:"params" doc:"The op's params as URL-encoded JSON (an object; absent means {})."`
	Fingerprint string `query:"fingerprint" pattern:"^[0-9a-f]{64}$" doc:"Or: the fingerprint an append returned."`
}

type AppliedBody struct {
	Applied     bool            `json:"applied" doc:"True when an event with this fingerprint is in the job's log and not reverted."`
	Fingerprint string          `json:"fingerprint"`
	Event       *episodic.Event `json:"event" doc:"The latest such event; null when not applied."`
}

type AppliedOutput struct {
	Body AppliedBody
}

type RevertInput struct {
	Job  string `path:"job" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job id (client-chosen)."`
	Seq  int64  `path:"seq" minimum:"1" doc:"The seq of the event to revert."`
	Body *struct {
		ScopeBody
		Reason string `json:"reason,omitempty" maxLength:"2000" doc:"Why (stored as the revert event's result)."`
	}
}

type EventOutput struct {
	Status int
	Body   episodic.Event
}

var OpAppendEvents = huma.Operation{
	OperationID: "append-events", Method: http.MethodPost, Path: "/v1/jobs/{job}/events", Tags: []string{"episodic"},
	Summary: "Append events to a job's log", DefaultStatus: http.StatusCreated, SkipValidateBody: true,
	Description: "Appends one event (object body) or several (array body) in one transaction; a job that has no log " +
		"yet gets one. The server assigns seq: strictly increasing and gap-free per job. Each event is fingerprinted " +
		"(SHA-256 of op and canonical params). An event whose idempotency_key the job already has is not appended " +
		"again: the original comes back with replayed=true. 201 when anything was appended, 200 when all were replays. " +
		"Errors name the element: body[3].op.",
}

var OpListEvents = huma.Operation{
	OperationID: "list-events", Method: http.MethodGet, Path: "/v1/jobs/{job}/events", Tags: []string{"episodic"},
	Summary:     "Read a job's log",
	Description: "Events in seq order (a fork shows its parent's events up to the fork point first). Page with after_seq or cursor; filter by op and creation time.",
}

var OpEventApplied = huma.Operation{
	OperationID: "event-applied", Method: http.MethodGet, Path: "/v1/jobs/{job}/applied", Tags: []string{"episodic"},
	Summary: "Has exactly this edit been applied?",
	Description: "Ask with op and params (URL-encoded JSON) or with a fingerprint. applied is true when the job's log " +
		"holds an event with that fingerprint that has not been reverted; event is the latest such event. A job " +
		"without a log has applied nothing.",
}

var OpRevertEvent = huma.Operation{
	OperationID: "revert-event", Method: http.MethodPost, Path: "/v1/jobs/{job}/events/{seq}/revert", Tags: []string{"episodic"},
	Summary: "Revert an event", DefaultStatus: http.StatusCreated,
	Description: "Appends a compensating event (op \"revert\", reverts_seq = seq); the reverted edit no longer counts as " +
		"applied, and the original stays in the log. Reverting again returns the existing revert event (200).",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go): a job's events are its
// subject's.

func (in *ListEventsInput) SubjectJob() string { return in.Job }

func (in *AppliedInput) SubjectJob() string { return in.Job }
