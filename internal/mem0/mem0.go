// Package mem0 serves the routes and shapes of Mem0's hosted API (the calls the `mem0ai`
// package's MemoryClient makes) under /mem0, so code written for Mem0 points at Strata by
// changing its host (docs/mem0.md). It is a translation layer and nothing more: every call
// becomes one or more requests to Strata's own /v1 API, in-process, with the caller's key —
// so roles, Art. 18 restrictions, idempotency, audit records and org isolation are the
// API's, not a second implementation of them.
//
// Mapping: Mem0's user_id, agent_id and run_id are Strata's user, agent and session scope
// levels; a Mem0 memory id is the Strata memory's root id (stable across versions: an update
// writes a new version, history lists them); infer=true runs Strata's extraction
// (POST /v1/memories/extract) and answers its decisions as ADD / UPDATE / DELETE events;
// infer=false stores each non-system message as a memory.
package mem0

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/strata-mem/strata/internal/auth"
)

// Handler is the Mem0-compatible API.
type Handler struct {
	api    http.Handler
	log    *slog.Logger
	router chi.Router
}

// New serves the Mem0 routes (relative to the /mem0 mount point) on top of api, Strata's
// /v1 API entered afresh for each call.
func New(api http.Handler, log *slog.Logger) *Handler {
	h := &Handler{api: api, log: log, router: chi.NewRouter()}
	r := h.router
	r.Use(middleware.StripSlashes) // the client ends every path with "/"
	r.Get("/v1/ping", h.ping)
	for _, p := range []string{"/v1/memories", "/v3/memories/add"} {
		r.Post(p, h.add)
	}
	r.Get("/v1/memories", h.getAllV1)
	for _, p := range []string{"/v2/memories", "/v3/memories"} {
		r.Post(p, h.getAll)
	}
	r.Delete("/v1/memories", h.deleteAll)
	for _, p := range []string{"/v1/memories/search", "/v2/memories/search", "/v3/memories/search"} {
		r.Post(p, h.search)
	}
	r.Get("/v1/memories/{id}", h.get)
	r.Put("/v1/memories/{id}", h.update)
	r.Delete("/v1/memories/{id}", h.delete)
	r.Get("/v1/memories/{id}/history", h.history)
	r.Put("/v1/batch", h.batchUpdate)
	r.Delete("/v1/batch", h.batchDelete)
	r.Delete("/v1/entities/{type}/{name}", h.deleteEntity)
	r.Delete("/v2/entities/{type}/{name}", h.deleteEntity)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "this Mem0 route is not served by Strata's compatibility API (docs/mem0.md lists what is): "+
			r.Method+" "+r.URL.Path, "")
	})
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.router.ServeHTTP(w, r) }

// --- calls into /v1 -------------------------------------------------------------------

type result struct {
	status int
	body   []byte
}

func (res result) ok() bool { return res.status < 300 }

// call sends one request to /v1 in-process with the caller's credentials (Mem0 clients send
// "Authorization: Token <key>"; Strata's keys are bearer tokens) and request id.
func (h *Handler) call(r *http.Request, method, path string, q url.Values, body any, extra ...string) result {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return result{status: 500, body: problemBody(500, "encoding the request: "+err.Error(), "")}
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(auth.WithVia(r.Context(), auth.ViaMem0), method, u, rd)
	if err != nil {
		return result{status: 400, body: problemBody(400, "bad request path", "")}
	}
	req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Token "); ok {
			a = "Bearer " + strings.TrimSpace(k)
		}
		req.Header.Set("Authorization", a)
	}
	if v := r.Header.Get("X-Request-Id"); v != "" {
		req.Header.Set("X-Request-Id", v)
	}
	for i := 0; i+1 < len(extra); i += 2 { // header name, value
		if extra[i+1] != "" {
			req.Header.Set(extra[i], extra[i+1])
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.api.ServeHTTP(rec, req)
	return result{status: rec.Code, body: rec.Body.Bytes()}
}

// relay answers a failed /v1 call as it is: its status and RFC 9457 problem (the mem0ai
// client raises the error class of the status with the body as its message).
func relay(w http.ResponseWriter, res result) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body)
}

func problemBody(status int, detail, field string) []byte {
	p := map[string]any{"title": http.StatusText(status), "status": status, "detail": detail}
	if field != "" {
		p["errors"] = []map[string]string{{"location": field, "message": detail}}
	}
	b, _ := json.Marshal(p)
	return b
}

func problem(w http.ResponseWriter, status int, detail, field string) {
	relay(w, result{status: status, body: problemBody(status, detail, field)})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON body (an empty body is {}).
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 4<<20)); err != nil {
		problem(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable", "body")
		return false
	}
	if buf.Len() == 0 {
		return true
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		problem(w, http.StatusBadRequest, "the body is not the JSON this route takes: "+err.Error(), "body")
		return false
	}
	return true
}

// --- shapes ---------------------------------------------------------------------------

// strataMemory is the part of a /v1 memory this layer reads.
type strataMemory struct {
	ID        string         `json:"id"`
	RootID    string         `json:"root_id"`
	Version   int            `json:"version"`
	Kind      string         `json:"kind"`
	Text      string         `json:"text"`
	UserID    string         `json:"user_id"`
	AgentID   string         `json:"agent_id"`
	SessionID string         `json:"session_id"`
	Metadata  map[string]any `json:"metadata"`
	ValidFrom time.Time      `json:"valid_from"`
	ValidTo   *time.Time     `json:"valid_to"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// Memory is a memory in Mem0's shape.
type Memory struct {
	ID         string         `json:"id"`
	Memory     string         `json:"memory"`
	Hash       string         `json:"hash"`
	UserID     *string        `json:"user_id"`
	AgentID    *string        `json:"agent_id"`
	RunID      *string        `json:"run_id"`
	Metadata   map[string]any `json:"metadata"`
	Categories []string       `json:"categories"`
	CreatedAt  time.Time      `json:"created_at"`
	UpdatedAt  time.Time      `json:"updated_at"`
	Score      *float64       `json:"score,omitempty"`
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// mem0Memory renders a Strata version as Mem0's memory (id: the root id; created: when the
// first version was written, if known, else this version's time).
func mem0Memory(m strataMemory, created time.Time) Memory {
	sum := md5.Sum([]byte(m.Text)) // Mem0's own content hash
	if created.IsZero() {
		created = m.ValidFrom
	}
	md := m.Metadata
	if md == nil {
		md = map[string]any{}
	}
	return Memory{ID: m.RootID, Memory: m.Text, Hash: hex.EncodeToString(sum[:]), UserID: nilIfEmpty(m.UserID),
		AgentID: nilIfEmpty(m.AgentID), RunID: nilIfEmpty(m.SessionID), Metadata: md, Categories: []string{},
		CreatedAt: created, UpdatedAt: m.UpdatedAt}
}

// Event is one entry of add's answer.
type Event struct {
	ID     string         `json:"id"`
	Event  string         `json:"event"` // ADD, UPDATE, DELETE, NOOP
	Memory string         `json:"memory"`
	Data   map[string]any `json:"data"`
}

func event(id, ev, text string) Event {
	return Event{ID: id, Event: ev, Memory: text, Data: map[string]any{"memory": text}}
}

// scope is Mem0's entity ids as Strata's scope fields, and the problem for one Strata has no
// level for.
type scope struct {
	UserID  string `json:"user_id,omitempty"`
	AgentID string `json:"agent_id,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	AppID   string `json:"app_id,omitempty"`
}

func (s scope) check(field string) (string, string) {
	if s.AppID != "" {
		return "app_id is not a Strata scope level: use user_id, agent_id and run_id (the session)", field + "app_id"
	}
	return "", ""
}

func (s scope) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"user_id": s.UserID, "agent_id": s.AgentID, "session_id": s.RunID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func (s scope) empty() bool { return s.UserID == "" && s.AgentID == "" && s.RunID == "" }

// filters reads Mem0's search/get_all filters: entity ids at the top or in an AND list.
// What Strata cannot express (OR, other keys) is refused, naming the key.
func filters(raw map[string]any) (scope, string, string) {
	var s scope
	var walk func(m map[string]any, at string) (string, string)
	walk = func(m map[string]any, at string) (string, string) {
		for k, v := range m {
			switch k {
			case "user_id", "agent_id", "run_id", "app_id":
				str, ok := v.(string)
				if !ok {
					return k + " must be a string (Strata filters entity ids by equality)", at + k
				}
				switch k {
				case "user_id":
					s.UserID = str
				case "agent_id":
					s.AgentID = str
				case "run_id":
					s.RunID = str
				default:
					s.AppID = str
				}
			case "AND":
				list, ok := v.([]any)
				if !ok {
					return "AND must be a list of filters", at + k
				}
				for i, item := range list {
					m, ok := item.(map[string]any)
					if !ok {
						return "AND must be a list of filters", fmt.Sprintf("%sAND[%d]", at, i)
					}
					if d, f := walk(m, fmt.Sprintf("%sAND[%d].", at, i)); d != "" {
						return d, f
					}
				}
			default:
				return "filter " + k + " is not supported by Strata's Mem0 API: filter by user_id, agent_id and run_id (AND), " +
					"and by metadata with the metadata field", at + k
			}
		}
		return "", ""
	}
	d, f := walk(raw, "body.filters.")
	if d == "" {
		d, f = s.check("body.filters.")
	}
	return s, d, f
}

// --- routes ---------------------------------------------------------------------------

func (h *Handler) ping(w http.ResponseWriter, r *http.Request) {
	// A cheap authenticated /v1 read proves the key (and answers 401 for a bad one).
	res := h.call(r, http.MethodGet, "/v1/tools", nil, nil)
	if !res.ok() {
		relay(w, res)
		return
	}
	reply(w, http.StatusOK, map[string]any{"status": "ok", "message": "Strata (Mem0-compatible API)",
		"org_id": nil, "project_id": nil, "user_email": nil})
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type addBody struct {
	Messages json.RawMessage `json:"messages"`
	scope
	Metadata map[string]any `json:"metadata"`
	Infer    *bool          `json:"infer"`
}

// messages reads add's messages: a list of {role, content} or one string (a user message).
func (b addBody) messages() ([]message, error) {
	var s string
	if json.Unmarshal(b.Messages, &s) == nil {
		return []message{{Role: "user", Content: s}}, nil
	}
	var ms []message
	if err := json.Unmarshal(b.Messages, &ms); err != nil || len(ms) == 0 {
		return nil, fmt.Errorf("messages must be a non-empty list of {role, content} or a string")
	}
	return ms, nil
}

func (h *Handler) add(w http.ResponseWriter, r *http.Request) {
	var b addBody
	if !decode(w, r, &b) {
		return
	}
	ms, err := b.messages()
	if err != nil {
		problem(w, http.StatusUnprocessableEntity, err.Error(), "body.messages")
		return
	}
	if d, f := b.check("body."); d != "" {
		problem(w, http.StatusUnprocessableEntity, d, f)
		return
	}
	if b.empty() {
		problem(w, http.StatusUnprocessableEntity, "name whose memories these are: user_id, agent_id or run_id", "body.user_id")
		return
	}
	if b.Infer == nil || *b.Infer {
		h.addInferred(w, r, b, ms)
		return
	}
	// infer=false: every non-system message is stored as it is (Mem0's behaviour), its role
	// in the metadata, in one transaction.
	type item struct {
		Text      string         `json:"text"`
		UserID    string         `json:"user_id,omitempty"`
		AgentID   string         `json:"agent_id,omitempty"`
		SessionID string         `json:"session_id,omitempty"`
		Metadata  map[string]any `json:"metadata"`
		Trust     string         `json:"trust"`
	}
	var items []item
	for _, m := range ms {
		if m.Role == "system" || strings.TrimSpace(m.Content) == "" {
			continue
		}
		md := map[string]any{"role": m.Role}
		for k, v := range b.Metadata {
			md[k] = v
		}
		trust := "agent_inferred"
		if m.Role == "user" {
			trust = "user_stated"
		}
		items = append(items, item{Text: m.Content, UserID: b.UserID, AgentID: b.AgentID, SessionID: b.RunID, Metadata: md, Trust: trust})
	}
	if len(items) == 0 {
		reply(w, http.StatusOK, []Event{})
		return
	}
	if len(items) == 1 { // one message: the single write (fewer statements than a batch of one)
		res := h.call(r, http.MethodPost, "/v1/memories", nil, items[0], "Idempotency-Key", r.Header.Get("Idempotency-Key"))
		if !res.ok() {
			relay(w, res)
			return
		}
		var m struct {
			strataMemory
			Deduplicated bool `json:"deduplicated"`
		}
		if err := json.Unmarshal(res.body, &m); err != nil {
			problem(w, http.StatusInternalServerError, "unexpected answer from /v1/memories", "")
			return
		}
		ev := "ADD"
		if m.Deduplicated {
			ev = "NOOP"
		}
		reply(w, http.StatusOK, []Event{event(m.RootID, ev, m.Text)})
		return
	}
	res := h.call(r, http.MethodPost, "/v1/memories/batch", nil, map[string]any{"memories": items},
		"Idempotency-Key", r.Header.Get("Idempotency-Key")) // a retried add is one write
	if !res.ok() {
		relay(w, res)
		return
	}
	var out struct {
		Items []struct {
			Status string        `json:"status"`
			Memory *strataMemory `json:"memory"`
			Error  any           `json:"error"`
		} `json:"items"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		problem(w, http.StatusInternalServerError, "unexpected answer from /v1/memories/batch", "")
		return
	}
	events := []Event{}
	for i, it := range out.Items {
		switch {
		case it.Status == "failed":
			b, _ := json.Marshal(it.Error)
			relay(w, result{status: http.StatusUnprocessableEntity, body: problemBody(http.StatusUnprocessableEntity,
				fmt.Sprintf("message %d was refused: %s", i, b), fmt.Sprintf("body.messages[%d].content", i))})
			return
		case it.Memory == nil:
		case it.Status == "deduplicated":
			events = append(events, event(it.Memory.RootID, "NOOP", it.Memory.Text))
		default:
			events = append(events, event(it.Memory.RootID, "ADD", it.Memory.Text))
		}
	}
	reply(w, http.StatusOK, events)
}

// addInferred runs Strata's extraction over the messages and answers its decisions as
// Mem0's events (a preference is reported with the id "preferences/<key>": it lives in
// key-value memory, GET /v1/kv/preferences/{key}).
func (h *Handler) addInferred(w http.ResponseWriter, r *http.Request, b addBody, ms []message) {
	var msgs []message
	for _, m := range ms {
		if strings.TrimSpace(m.Content) != "" {
			msgs = append(msgs, m)
		}
	}
	req := map[string]any{"messages": msgs}
	for k, v := range map[string]string{"user_id": b.UserID, "agent_id": b.AgentID} {
		if v != "" {
			req[k] = v
		}
	}
	res := h.call(r, http.MethodPost, "/v1/memories/extract", nil, req, "Idempotency-Key", r.Header.Get("Idempotency-Key"))
	if !res.ok() {
		relay(w, res)
		return
	}
	var out struct {
		Decisions []struct {
			Op             string `json:"op"`
			Kind           string `json:"kind"`
			Text           string `json:"text"`
			Key            string `json:"key"`
			MemoryID       string `json:"memory_id"`
			Result         string `json:"result"`
			ResultMemoryID string `json:"result_memory_id"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		problem(w, http.StatusInternalServerError, "unexpected answer from /v1/memories/extract", "")
		return
	}
	events := []Event{}
	for _, d := range out.Decisions {
		if d.Kind == "preference" {
			// Only what was applied: a skipped or quarantined preference was not written.
			ev := map[string]string{"added": "ADD", "updated": "UPDATE", "retracted": "DELETE"}[d.Result]
			if ev != "" {
				events = append(events, event("preferences/"+d.Key, ev, d.Key+": "+d.Text))
			}
			continue
		}
		switch d.Result {
		case "added": // a new memory's first version: its id is its root id
			events = append(events, event(d.ResultMemoryID, "ADD", d.Text))
		case "updated":
			events = append(events, event(h.rootOf(r, d.ResultMemoryID), "UPDATE", d.Text))
		case "retracted":
			events = append(events, event(h.rootOf(r, d.MemoryID), "DELETE", d.Text))
		}
	}
	reply(w, http.StatusOK, events)
}

// rootOf is a version's root id (a Mem0 id), or the version id if it cannot be read.
func (h *Handler) rootOf(r *http.Request, version string) string {
	res := h.call(r, http.MethodGet, "/v1/memories/"+url.PathEscape(version), nil, nil)
	var m strataMemory
	if res.ok() && json.Unmarshal(res.body, &m) == nil && m.RootID != "" {
		return m.RootID
	}
	return version
}

type searchBody struct {
	Query     string         `json:"query"`
	Filters   map[string]any `json:"filters"`
	TopK      int            `json:"top_k"`
	Limit     int            `json:"limit"`
	Threshold *float64       `json:"threshold"`
	Metadata  map[string]any `json:"metadata"`
	scope                    // the v1 API's top-level entity ids
}

func (h *Handler) search(w http.ResponseWriter, r *http.Request) {
	var b searchBody
	if !decode(w, r, &b) {
		return
	}
	s, d, f := filters(b.Filters)
	if d != "" {
		problem(w, http.StatusUnprocessableEntity, d, f)
		return
	}
	if s.empty() {
		s = b.scope
	}
	if d, f := s.check("body."); d != "" {
		problem(w, http.StatusUnprocessableEntity, d, f)
		return
	}
	topK := b.TopK
	if topK == 0 {
		topK = b.Limit
	}
	// Mem0's filters: the entities named, at any other level; never org-level memories
	// (other jobs' summaries) or the composed scopes Strata's own search sees.
	req := map[string]any{"query": b.Query, "scope_match": "filter"}
	if topK > 0 {
		req["top_k"] = topK
	}
	for k, v := range s.query() {
		req[k] = v[0]
	}
	if len(b.Metadata) > 0 {
		req["metadata"] = b.Metadata
	}
	res := h.call(r, http.MethodPost, "/v1/memories/search", nil, req)
	if !res.ok() {
		relay(w, res)
		return
	}
	var out struct {
		Items []struct {
			Memory strataMemory `json:"memory"`
			Score  struct {
				Score     float64 `json:"score"`
				Relevance float64 `json:"relevance"`
			} `json:"score"`
		} `json:"items"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		problem(w, http.StatusInternalServerError, "unexpected answer from /v1/memories/search", "")
		return
	}
	results := []Memory{}
	for _, it := range out.Items {
		score := it.Score.Relevance // in (0, 1], like Mem0's similarity score
		if b.Threshold != nil && score < *b.Threshold {
			continue
		}
		m := mem0Memory(it.Memory, time.Time{})
		m.Score = &score
		results = append(results, m)
	}
	reply(w, http.StatusOK, map[string]any{"results": results})
}

// current reads a Mem0 id's versions: the current one (nil when the memory was deleted or
// retracted) and the first version's time.
func (h *Handler) current(r *http.Request, id string) (*strataMemory, []strataMemory, result) {
	res := h.call(r, http.MethodGet, "/v1/memories/"+url.PathEscape(id)+"/history", nil, nil)
	if !res.ok() {
		return nil, nil, res
	}
	var out struct {
		Items []strataMemory `json:"items"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return nil, nil, result{status: 500, body: problemBody(500, "unexpected answer from history", "")}
	}
	for i := range out.Items {
		if out.Items[i].ValidTo == nil {
			return &out.Items[i], out.Items, res
		}
	}
	return nil, out.Items, result{status: http.StatusNotFound, body: problemBody(http.StatusNotFound,
		"memory "+id+" was deleted (its history is still kept: GET .../history/)", "")}
}

func firstTime(vs []strataMemory) time.Time {
	var t time.Time
	for _, v := range vs {
		if t.IsZero() || v.ValidFrom.Before(t) {
			t = v.ValidFrom
		}
	}
	return t
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	cur, vs, res := h.current(r, chi.URLParam(r, "id"))
	if cur == nil {
		relay(w, res)
		return
	}
	reply(w, http.StatusOK, mem0Memory(*cur, firstTime(vs)))
}

type updateBody struct {
	Text     *string        `json:"text"`
	Metadata map[string]any `json:"metadata"`
}

func (h *Handler) update(w http.ResponseWriter, r *http.Request) {
	var b updateBody
	if !decode(w, r, &b) {
		return
	}
	m, st, detail := h.patch(r, chi.URLParam(r, "id"), b)
	if m == nil {
		relay(w, result{status: st, body: detail})
		return
	}
	out := mem0Memory(*m, time.Time{})
	reply(w, http.StatusOK, map[string]any{"message": "Memory updated successfully!", "id": out.ID, "memory": out.Memory,
		"hash": out.Hash, "metadata": out.Metadata, "updated_at": out.UpdatedAt})
}

// patch writes a new version of a Mem0 id's current version, conditional on that version
// (a concurrent update answers 409, not a lost update).
func (h *Handler) patch(r *http.Request, id string, b updateBody) (*strataMemory, int, []byte) {
	if b.Text == nil && b.Metadata == nil {
		return nil, http.StatusUnprocessableEntity, problemBody(http.StatusUnprocessableEntity, "send text or metadata", "body.text")
	}
	cur, _, res := h.current(r, id)
	if cur == nil {
		return nil, res.status, res.body
	}
	body := map[string]any{}
	if b.Text != nil {
		body["text"] = *b.Text
	}
	if b.Metadata != nil {
		body["metadata"] = b.Metadata
	}
	res = h.call(r, http.MethodPatch, "/v1/memories/"+url.PathEscape(cur.ID), nil, body, "If-Match", `"`+strconv.Itoa(cur.Version)+`"`)
	if !res.ok() {
		return nil, res.status, res.body
	}
	var m strataMemory
	if err := json.Unmarshal(res.body, &m); err != nil {
		return nil, 500, problemBody(500, "unexpected answer from PATCH /v1/memories", "")
	}
	return &m, 200, nil
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	if res := h.deleteOne(r, chi.URLParam(r, "id")); !res.ok() {
		relay(w, res)
		return
	}
	reply(w, http.StatusOK, map[string]string{"message": "Memory deleted successfully!"})
}

// deleteOne deletes a Mem0 id: every version of the memory (DELETE /v1/memories/{id}).
func (h *Handler) deleteOne(r *http.Request, id string) result {
	return h.call(r, http.MethodDelete, "/v1/memories/"+url.PathEscape(id), nil, nil)
}

func (h *Handler) history(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	res := h.call(r, http.MethodGet, "/v1/memories/"+url.PathEscape(id)+"/history", nil, nil)
	if !res.ok() {
		relay(w, res)
		return
	}
	var out struct {
		Items []strataMemory `json:"items"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		problem(w, http.StatusInternalServerError, "unexpected answer from history", "")
		return
	}
	type entry struct {
		ID         string    `json:"id"`
		MemoryID   string    `json:"memory_id"`
		Input      []message `json:"input"`
		OldMemory  *string   `json:"old_memory"`
		NewMemory  *string   `json:"new_memory"`
		UserID     *string   `json:"user_id"`
		Categories []string  `json:"categories"`
		Event      string    `json:"event"`
		CreatedAt  time.Time `json:"created_at"`
		UpdatedAt  time.Time `json:"updated_at"`
	}
	entries := []entry{}
	var prev *string
	for i, v := range out.Items { // oldest first
		text := v.Text
		e := entry{ID: v.ID, MemoryID: v.RootID, Input: []message{}, OldMemory: prev, NewMemory: &text,
			UserID: nilIfEmpty(v.UserID), Categories: []string{}, Event: "UPDATE", CreatedAt: v.ValidFrom, UpdatedAt: v.UpdatedAt}
		if i == 0 {
			e.Event = "ADD"
		}
		entries = append(entries, e)
		prev = &text
	}
	reply(w, http.StatusOK, entries)
}

// list reads every current memory of a scope through GET /v1/memories, page by page.
func (h *Handler) list(r *http.Request, s scope) ([]strataMemory, result) {
	var all []strataMemory
	q := s.query()
	q.Set("limit", "1000")
	for {
		res := h.call(r, http.MethodGet, "/v1/memories", q, nil)
		if !res.ok() {
			return nil, res
		}
		var page struct {
			Items      []strataMemory `json:"items"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(res.body, &page); err != nil {
			return nil, result{status: 500, body: problemBody(500, "unexpected answer from GET /v1/memories", "")}
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all, res
		}
		q.Set("cursor", page.NextCursor)
	}
}

type getAllBody struct {
	Filters map[string]any `json:"filters"`
	scope
}

// getAll is Mem0's paginated get_all (page, page_size in the query; filters in the body).
func (h *Handler) getAll(w http.ResponseWriter, r *http.Request) {
	var b getAllBody
	if !decode(w, r, &b) {
		return
	}
	s, d, f := filters(b.Filters)
	if d == "" && s.empty() {
		s = b.scope
		d, f = s.check("body.")
	}
	if d != "" {
		problem(w, http.StatusUnprocessableEntity, d, f)
		return
	}
	page, size := 1, 100
	for name, p := range map[string]*int{"page": &page, "page_size": &size} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || (name == "page_size" && n > 1000) {
				problem(w, http.StatusUnprocessableEntity, name+" must be a positive whole number (page_size at most 1000)", "query."+name)
				return
			}
			*p = n
		}
	}
	ms, res := h.list(r, s)
	if !res.ok() {
		relay(w, res)
		return
	}
	results := []Memory{}
	for i := (page - 1) * size; i < len(ms) && i < page*size; i++ {
		results = append(results, mem0Memory(ms[i], time.Time{}))
	}
	var next, prev *string
	link := func(p int) *string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(p))
		q.Set("page_size", strconv.Itoa(size))
		u := "/mem0" + strings.TrimSuffix(r.URL.Path, "/") + "/?" + q.Encode()
		return &u
	}
	if page*size < len(ms) {
		next = link(page + 1)
	}
	if page > 1 {
		prev = link(page - 1)
	}
	reply(w, http.StatusOK, map[string]any{"count": len(ms), "next": next, "previous": prev, "results": results})
}

// queryScope reads the entity ids of a v1 route's query (get_all, delete_all), answering the
// problem for one Strata has no level for.
func queryScope(w http.ResponseWriter, r *http.Request) (scope, bool) {
	q := r.URL.Query()
	s := scope{UserID: q.Get("user_id"), AgentID: q.Get("agent_id"), RunID: q.Get("run_id"), AppID: q.Get("app_id")}
	if d, f := s.check("query."); d != "" {
		problem(w, http.StatusUnprocessableEntity, d, f)
		return s, false
	}
	return s, true
}

// getAllV1 is the v1 get_all: entity ids in the query, a plain list.
func (h *Handler) getAllV1(w http.ResponseWriter, r *http.Request) {
	s, ok := queryScope(w, r)
	if !ok {
		return
	}
	ms, res := h.list(r, s)
	if !res.ok() {
		relay(w, res)
		return
	}
	out := []Memory{}
	for _, m := range ms {
		out = append(out, mem0Memory(m, time.Time{}))
	}
	reply(w, http.StatusOK, out)
}

// deleteScope deletes every current memory of a scope (each its own /v1 write, audited).
func (h *Handler) deleteScope(r *http.Request, s scope) (int, result) {
	ms, res := h.list(r, s)
	if !res.ok() {
		return 0, res
	}
	n := 0
	for _, m := range ms {
		if res := h.deleteOne(r, m.ID); !res.ok() && res.status != http.StatusNotFound {
			return n, res
		}
		n++
	}
	return n, result{status: 200}
}

func (h *Handler) deleteAll(w http.ResponseWriter, r *http.Request) {
	s, ok := queryScope(w, r)
	if !ok {
		return
	}
	if s.empty() {
		problem(w, http.StatusUnprocessableEntity, "name whose memories to delete: user_id, agent_id or run_id", "query.user_id")
		return
	}
	if _, res := h.deleteScope(r, s); !res.ok() {
		relay(w, res)
		return
	}
	reply(w, http.StatusOK, map[string]string{"message": "Memories deleted successfully!"})
}

// deleteEntity deletes an entity's memories (Mem0's delete_users). It is not a GDPR
// erasure: for that, POST /v1/gdpr/erasures.
func (h *Handler) deleteEntity(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var s scope
	switch chi.URLParam(r, "type") {
	case "user":
		s.UserID = name
	case "agent":
		s.AgentID = name
	case "run":
		s.RunID = name
	default:
		problem(w, http.StatusUnprocessableEntity, "entity type must be user, agent or run", "path.type")
		return
	}
	if _, res := h.deleteScope(r, s); !res.ok() {
		relay(w, res)
		return
	}
	reply(w, http.StatusOK, map[string]string{"message": "Entity deleted successfully."})
}

type batchBody struct {
	Memories []struct {
		MemoryID string  `json:"memory_id"`
		Text     *string `json:"text"`
	} `json:"memories"`
}

// decodeBatch reads a batch body of 1 to 1,000 memories.
func decodeBatch(w http.ResponseWriter, r *http.Request) (batchBody, bool) {
	var b batchBody
	if !decode(w, r, &b) {
		return b, false
	}
	if len(b.Memories) == 0 || len(b.Memories) > 1000 {
		problem(w, http.StatusUnprocessableEntity, "send 1 to 1000 memories", "body.memories")
		return b, false
	}
	return b, true
}

// batchUpdate and batchDelete apply each item as its own /v1 write, in order, stopping at
// the first failure (the items before it stay applied; the answer names the failing one).
func (h *Handler) batchUpdate(w http.ResponseWriter, r *http.Request) {
	b, ok := decodeBatch(w, r)
	if !ok {
		return
	}
	for i, m := range b.Memories {
		if _, st, detail := h.patch(r, m.MemoryID, updateBody{Text: m.Text}); st >= 300 {
			h.log.DebugContext(r.Context(), "mem0 batch update stopped", "index", i, "status", st)
			relay(w, result{status: st, body: detail})
			return
		}
	}
	reply(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("Successfully updated %d memories", len(b.Memories))})
}

func (h *Handler) batchDelete(w http.ResponseWriter, r *http.Request) {
	b, ok := decodeBatch(w, r)
	if !ok {
		return
	}
	for _, m := range b.Memories {
		if res := h.deleteOne(r, m.MemoryID); !res.ok() {
			relay(w, res)
			return
		}
	}
	reply(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("Successfully deleted %d memories", len(b.Memories))})
}
