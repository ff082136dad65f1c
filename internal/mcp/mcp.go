// Package mcp serves Strata's memory to agents as Model Context Protocol tools over
// streamable HTTP (the official Go SDK), and describes the same tools as OpenAI
// function-calling schemas. A tool is a thin mapping onto one REST operation: its call is
// dispatched in-process to the REST handler with the caller's own API key, so validation,
// idempotency, row-level security, audit and errors are exactly the REST API's — one
// implementation underneath, not a copy.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/strata-mem/strata/internal/auth"
)

// Tool maps a tool onto a REST operation.
type Tool struct {
	Name        string
	Description string
	Method      string
	// Path is the REST path with {param} placeholders filled from the input's fields of
	// the same name.
	Path string
	// Query names input fields sent as query parameters; every other field (not a path
	// parameter) goes in the JSON body (for POST/PUT/PATCH).
	Query []string
	// Body, when set, names the one input field whose value is the whole JSON body.
	Body string
	// Schema is the JSON schema of the input (an object).
	Schema map[string]any
	// ReadOnly and Destructive are hints for clients.
	ReadOnly, Destructive bool
	// BodyIdempotency keeps idempotency_key in the JSON body (a per-item key the operation
	// itself understands) instead of sending it as the Idempotency-Key header.
	BodyIdempotency bool
}

// Handler returns the /mcp handler. api is the REST handler tools dispatch to.
func Handler(api http.Handler, tools []Tool, log *slog.Logger) http.Handler {
	srv := sdk.NewServer(&sdk.Implementation{Name: "strata", Title: "Strata agent memory", Version: "1.0.0"},
		&sdk.ServerOptions{Instructions: Instructions})
	for _, t := range tools {
		t := t
		ann := &sdk.ToolAnnotations{ReadOnlyHint: t.ReadOnly}
		if !t.ReadOnly {
			d := t.Destructive
			ann.DestructiveHint = &d
		}
		srv.AddTool(&sdk.Tool{Name: t.Name, Description: t.Description, InputSchema: t.Schema, Annotations: ann},
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return call(ctx, api, t, req)
			})
	}
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless:    true, // any replica can answer any call: no session affinity
		JSONResponse: true,
		Logger:       log,
		// Strata authenticates every call with a bearer key, and is reached through
		// proxies and service names, not only localhost.
		DisableLocalhostProtection: true,
	})
}

// Instructions tell the model how to use the tools.
const Instructions = `Strata is your durable memory. At the start of every turn call get_context (or resume_job for a job) and trust it over your own recollection: it says which steps are done — never redo them. Before a side effect, call was_applied with the operation and its parameters; after it, call log_event. Claim a step with start_step, finish it with complete_step or fail_step using the fencing token you were given. Save a checkpoint after each meaningful step. Use remember/recall for facts and kv_get/kv_set for preferences.`

func call(ctx context.Context, api http.Handler, t Tool, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	var in map[string]any
	if len(req.Params.Arguments) > 0 {
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return toolError("arguments must be a JSON object: " + err.Error()), nil
		}
	}
	if in == nil {
		in = map[string]any{}
	}
	path, used, err := fillPath(t.Path, in)
	if err != nil {
		return toolError(err.Error()), nil
	}
	q := url.Values{}
	for _, name := range t.Query {
		if v, ok := in[name]; ok {
			used[name] = true
			q.Set(name, scalar(v))
		}
	}
	// if_match travels as the If-Match header, idempotency_key as Idempotency-Key (unless
	// the body itself has one): neither is part of the body.
	used["if_match"] = true
	if !t.BodyIdempotency {
		used["idempotency_key"] = true
	}
	var body []byte
	if t.Method == http.MethodPost || t.Method == http.MethodPut || t.Method == http.MethodPatch {
		var payload any
		if t.Body != "" {
			payload = in[t.Body]
			used[t.Body] = true
		} else {
			m := map[string]any{}
			for k, v := range in {
				if !used[k] {
					m[k] = v
				}
			}
			payload = m
		}
		if payload == nil {
			payload = map[string]any{}
		}
		if body, err = json.Marshal(payload); err != nil {
			return toolError("encoding the request: " + err.Error()), nil
		}
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	r, err := http.NewRequestWithContext(auth.WithVia(ctx, auth.ViaMCP), t.Method, u, bytes.NewReader(body))
	if err != nil {
		return toolError("building the request: " + err.Error()), nil
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if req.Extra != nil && req.Extra.Header != nil {
		for _, h := range []string{"Authorization", "X-Request-Id"} {
			if v := req.Extra.Header.Get(h); v != "" {
				r.Header.Set(h, v)
			}
		}
	}
	if k, ok := in["idempotency_key"].(string); ok && k != "" && !t.BodyIdempotency {
		r.Header.Set("Idempotency-Key", k)
	}
	if v, ok := in["if_match"]; ok {
		r.Header.Set("If-Match", `"`+scalar(v)+`"`)
	}
	w := httptest.NewRecorder()
	api.ServeHTTP(w, r)
	res := w.Result()
	data := w.Body.Bytes()
	if res.StatusCode >= 400 {
		// The problem document is what the model needs to correct its call.
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}}, nil
	}
	out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}}
	var structured map[string]any
	if json.Unmarshal(data, &structured) == nil {
		out.StructuredContent = structured
	}
	return out, nil
}

func fillPath(tmpl string, in map[string]any) (string, map[string]bool, error) {
	used := map[string]bool{}
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), used, nil
		}
		j := strings.IndexByte(tmpl[i:], '}')
		name := tmpl[i+1 : i+j]
		v, ok := in[name]
		if !ok || scalar(v) == "" {
			return "", nil, fmt.Errorf("missing required argument %q", name)
		}
		used[name] = true
		b.WriteString(tmpl[:i])
		b.WriteString(url.PathEscape(scalar(v)))
		tmpl = tmpl[i+j+1:]
	}
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return fmt.Sprint(x)
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func toolError(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}

// OpenAIFunction is one tool in OpenAI's function-calling format.
type OpenAIFunction struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// OpenAITools describes tools in OpenAI's function-calling format.
func OpenAITools(tools []Tool) []OpenAIFunction {
	out := make([]OpenAIFunction, 0, len(tools))
	for _, t := range tools {
		var f OpenAIFunction
		f.Type = "function"
		f.Function.Name, f.Function.Description, f.Function.Parameters = t.Name, t.Description, t.Schema
		out = append(out, f)
	}
	return out
}
