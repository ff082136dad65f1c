// Package llmtest is a fake OpenAI-compatible chat-completions server for tests: it speaks
// the real wire format (POST /v1/chat/completions, choices, usage) and answers what the test
// scripts, so extraction is tested end to end without a paid model. It is a test support
// package: nothing in the server imports it.
package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Prompt is what one call asked: the model, the messages, and the extraction document
// (the last user message parsed, when it is JSON).
type Prompt struct {
	Model          string
	Messages       []Message
	Doc            Doc
	ResponseFormat map[string]any
	Attempt        int // 1 for the first call of a conversation, 2 after one rejected answer, ...
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Doc is extraction's prompt document.
type Doc struct {
	Memories []struct {
		Ref  string `json:"ref"`
		Text string `json:"text"`
	} `json:"memories"`
	Preferences []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"preferences"`
	Entities []struct {
		Ref     string   `json:"ref"`
		Name    string   `json:"name"`
		Type    string   `json:"type"`
		Aliases []string `json:"aliases"`
		Summary string   `json:"summary"`
	} `json:"entities"`
	Turns []struct {
		Seq     int64  `json:"seq"`
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"turns"`
}

// Ref returns the ref of the memory shown with text ("" when none).
func (d Doc) Ref(text string) string {
	for _, m := range d.Memories {
		if m.Text == text {
			return m.Ref
		}
	}
	return ""
}

// EntityRef returns the ref of the known entity shown with name ("" when none).
func (d Doc) EntityRef(name string) string {
	for _, e := range d.Entities {
		if e.Name == name {
			return e.Ref
		}
	}
	return ""
}

// Seqs are the seqs of the turns shown.
func (d Doc) Seqs() []int64 {
	out := make([]int64, len(d.Turns))
	for i, t := range d.Turns {
		out[i] = t.Seq
	}
	return out
}

// Server is the fake.
type Server struct {
	*httptest.Server
	mu     sync.Mutex
	answer func(Prompt) string
	calls  []Prompt
	// Status, when non-zero, is answered instead (an API error).
	status int
	// OnCall, when set, runs on every call before it is answered (tests wait on it).
	OnCall func(Prompt)
	// huge, when non-zero, is the size of a streamed answer (HugeAnswer); written counts
	// what of it the client took before it hung up.
	huge    int64
	written atomic.Int64
}

// HugeFill is what a HugeAnswer's content is made of.
const HugeFill = "HUGE-ANSWER-"

// HugeAnswer makes every call answer a well-formed completion whose content is n bytes of
// HugeFill, streamed in 32 KiB writes without a Content-Length, as a runaway model would
// (0: answer normally again). Written tells how much of it the client read.
func (s *Server) HugeAnswer(n int64) {
	s.mu.Lock()
	s.huge = n
	s.mu.Unlock()
	s.written.Store(0)
}

// Written is how many bytes of HugeAnswer bodies were written to clients (a client that
// stops reading makes the writes fail soon after, kernel buffers aside).
func (s *Server) Written() int64 { return s.written.Load() }

func (s *Server) streamHuge(w http.ResponseWriter, model string, n int64) {
	w.Header().Set("Content-Type", "application/json")
	fl, _ := w.(http.Flusher)
	write := func(b []byte) bool {
		k, err := w.Write(b)
		s.written.Add(int64(k))
		if fl != nil {
			fl.Flush()
		}
		return err == nil
	}
	head, _ := json.Marshal(model)
	if !write([]byte(`{"id":"chatcmpl-fake","object":"chat.completion","created":1,"model":` + string(head) +
		`,"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`)) {
		return
	}
	chunk := []byte(strings.Repeat(HugeFill, 32<<10/len(HugeFill)))
	for sent := int64(0); sent < n; sent += int64(len(chunk)) {
		if !write(chunk) {
			return
		}
	}
	write([]byte(`"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
}

// New starts a fake answering answer(prompt) for every call; t's cleanup closes it.
func New(t testing.TB, answer func(Prompt) string) *Server {
	s := &Server{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// URL is the base URL to configure (OPENAI_BASE_URL).
func (s *Server) BaseURL() string { return s.Server.URL + "/v1" }

// SetAnswer replaces the answer function.
func (s *Server) SetAnswer(f func(Prompt) string) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

// FailWith makes every call answer status (0: answer normally again).
func (s *Server) FailWith(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// Calls returns the calls so far.
func (s *Server) Calls() []Prompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Prompt(nil), s.calls...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var body struct {
		Model          string         `json:"model"`
		Messages       []Message      `json:"messages"`
		ResponseFormat map[string]any `json:"response_format"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	p := Prompt{Model: body.Model, Messages: body.Messages, ResponseFormat: body.ResponseFormat}
	users := 0
	for _, m := range body.Messages {
		if m.Role == "user" {
			users++
		}
	}
	p.Attempt = users
	for _, m := range body.Messages {
		if m.Role == "user" {
			_ = json.Unmarshal([]byte(m.Content), &p.Doc)
			break
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, p)
	answer, status, on, huge := s.answer, s.status, s.OnCall, s.huge
	s.mu.Unlock()
	if on != nil {
		on(p)
	}
	if huge > 0 {
		s.streamHuge(w, body.Model, huge)
		return
	}
	if status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"model overloaded","type":"server_error"}}`)
		return
	}
	content := answer(p)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": body.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]any{"prompt_tokens": len(raw) / 4, "completion_tokens": len(content) / 4,
			"total_tokens": len(raw)/4 + len(content)/4},
	})
}

// D is one decision of a scripted answer.
type D struct {
	Op    string  `json:"op"`
	Kind  string  `json:"kind"`
	Ref   string  `json:"ref"`
	Key   string  `json:"key"`
	Text  string  `json:"text"`
	Turns []int64 `json:"turns"`
}

// E is one entity of a scripted answer.
type E struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Aliases []string `json:"aliases"`
	Summary string   `json:"summary"`
	Ref     string   `json:"ref"`
}

// R is one relation of a scripted answer. Decision is the index of the decision it came
// with; NoDecision (-1) for none.
type R struct {
	Subject    string  `json:"subject"`
	Predicate  string  `json:"predicate"`
	Object     string  `json:"object"`
	Value      string  `json:"value"`
	Functional bool    `json:"functional"`
	ValidFrom  string  `json:"valid_from"`
	Fact       string  `json:"fact"`
	Decision   int     `json:"decision"`
	Turns      []int64 `json:"turns"`
}

// NoDecision is R.Decision for a relation that came with no decision.
const NoDecision = -1

// Answer encodes decisions as the schema's JSON answer (no entities or relations).
func Answer(ds ...D) string { return GraphAnswer(ds, nil, nil) }

// GraphAnswer encodes decisions, entities and relations as the schema's JSON answer.
func GraphAnswer(ds []D, es []E, rs []R) string {
	for i := range ds {
		if ds[i].Turns == nil {
			ds[i].Turns = []int64{}
		}
	}
	for i := range es {
		if es[i].Aliases == nil {
			es[i].Aliases = []string{}
		}
	}
	for i := range rs {
		if rs[i].Turns == nil {
			rs[i].Turns = []int64{}
		}
	}
	if ds == nil {
		ds = []D{}
	}
	if es == nil {
		es = []E{}
	}
	if rs == nil {
		rs = []R{}
	}
	b, _ := json.Marshal(map[string]any{"decisions": ds, "entities": es, "relations": rs})
	return string(b)
}
