package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/strata-mem/strata/internal/auth"
)

// apiResult is one in-process API exchange.
type apiResult struct {
	Status int
	Header http.Header
	Body   []byte
}

// OK reports a 2xx answer.
func (a *apiResult) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Map decodes the body as a JSON object (nil when it is not one).
func (a *apiResult) Map() map[string]any {
	var m map[string]any
	if json.Unmarshal(a.Body, &m) != nil {
		return nil
	}
	return m
}

// Items is the items array of a list answer.
func (a *apiResult) Items() []any {
	if m := a.Map(); m != nil {
		if it, ok := m["items"].([]any); ok {
			return it
		}
	}
	return nil
}

// Problem is the RFC 9457 problem of a failed answer.
func (a *apiResult) Problem() *problem {
	if a.OK() {
		return nil
	}
	p := &problem{Status: a.Status}
	if json.Unmarshal(a.Body, p) != nil || p.Detail == "" {
		p.Detail = fmt.Sprintf("the API answered %d %s", a.Status, http.StatusText(a.Status))
	}
	return p
}

// problem is an RFC 9457 problem as the API sends it.
type problem struct {
	Status int          `json:"status"`
	Title  string       `json:"title"`
	Detail string       `json:"detail"`
	Errors []fieldError `json:"errors"`
}

type fieldError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
	Value    any    `json:"value"`
}

// call sends one request to the API in-process for the signed-in principal. formID, for a
// state-changing form, becomes the request's Idempotency-Key: a form submitted twice (a
// double click, a retried POST) is one write, answered twice.
func (c *Console) call(r *http.Request, method, path string, q url.Values, body any, formID string) *apiResult {
	me := whoFrom(r.Context())
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &apiResult{Status: 500, Body: []byte(`{"status":500,"detail":"encoding the request: ` + err.Error() + `"}`)}
		}
		rd = bytes.NewReader(b)
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx := auth.WithInProcessPrincipal(r.Context(), me.P)
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return &apiResult{Status: 400, Body: []byte(`{"status":400,"detail":"bad request path"}`)}
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = r.Host
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if id := me.ReqID; id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	if formID != "" {
		req.Header.Set("Idempotency-Key", "console-"+formID)
	}
	rec := httptest.NewRecorder()
	c.d.API.ServeHTTP(rec, req)
	return &apiResult{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

// get is call for a read.
func (c *Console) get(r *http.Request, path string, q url.Values) *apiResult {
	return c.call(r, http.MethodGet, path, q, nil, "")
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(strings.TrimSpace(s)) }
