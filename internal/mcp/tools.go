package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Spec is one agent tool: a REST operation plus what a model needs to call it well. Its
// input schema is generated from the operation's OpenAPI description (path and query
// parameters, the JSON body's properties, If-Match and Idempotency-Key as arguments), so a
// tool's arguments are exactly the REST payload.
type Spec struct {
	Name        string
	Description string
	Method      string
	Path        string // as in the OpenAPI document: /v1/jobs/{job}/resume
	// Query limits the query parameters exposed (nil: all the operation has).
	Query []string
	// Props overrides or adds property descriptions (the REST docs are written for people
	// reading an API reference; a model sometimes needs the why).
	Props map[string]string
	// Required adds required arguments beyond the REST schema's.
	Required []string
	// IfMatch exposes the If-Match header as an integer argument if_match.
	IfMatch bool
	// BodyIdempotency: the body itself has idempotency_key (log_event); no header argument.
	BodyIdempotency bool
	ReadOnly        bool
	Destructive     bool
}

// Specs is the agent tool table: the protocol of docs/jobs.md plus memory and preferences.
var Specs = []Spec{
	{
		Name: "get_context", Method: http.MethodPost, Path: "/v1/context", ReadOnly: true,
		Description: "Call this FIRST on every turn. Returns, within max_tokens, everything you need to carry on: the job's " +
			"resume summary (current step, next action, steps already done — never redo them), the working state, the " +
			"preferences that apply, memories relevant to `query`, and similar past jobs. Put `prompt` in your context; " +
			"`sections` says what was left out for the budget.",
		Props: map[string]string{
			"query":      "What this turn is about (the user's latest message or the step at hand). Memories and similar jobs are ranked against it.",
			"max_tokens": "Token budget for the returned prompt (default 4000).",
		},
	},
	{
		Name: "remember", Method: http.MethodPost, Path: "/v1/memories",
		Description: "Store a durable fact, preference, decision or lesson in long-term memory, scoped to a user/agent/session " +
			"(omit them for org-wide knowledge). Write one self-contained statement per call. Near-duplicates are merged " +
			"(deduplicated: true), so it is safe to remember something you are unsure was stored.",
		Props: map[string]string{"text": "One self-contained statement, e.g. \"Acme's brand colour is warm teal (#1A7F8E)\"."},
	},
	{
		Name: "recall", Method: http.MethodPost, Path: "/v1/memories/search", ReadOnly: true,
		Description: "Search long-term memory (semantic + full text, ranked by relevance, recency and importance). Pass the " +
			"user/agent/session you act for: you see their memories and org-wide ones. Stale facts are marked; verify them " +
			"before relying on them.",
	},
	{
		Name: "extract_memories", Method: http.MethodPost, Path: "/v1/memories/extract",
		Description: "Hand over conversation turns and let Strata decide what to remember: it asks the org's LLM for facts " +
			"(added, updated as new versions, retracted) and preferences (key-value namespace preferences, user level), " +
			"each traceable to the turns. Pass session_id to extract the session's turns not extracted yet, or messages " +
			"with user_id. dry_run shows the decisions without applying them. Extraction also runs in the background " +
			"after turns are appended when the org's policy enables it.",
	},
	{
		Name: "update_memory", Method: http.MethodPatch, Path: "/v1/memories/{id}", IfMatch: true,
		Description: "Correct or refine a memory you recalled: new wording (re-embedded), importance, pinned, trust or " +
			"metadata. Every change is a new version with a NEW id (the old version stays in its history, superseded); " +
			"use the id the answer gives from now on. Pass if_match with the version you read: when someone changed it " +
			"since, the call fails with 409 and nothing is written — recall it again and retry.",
		Props: map[string]string{"id": "The memory id (a UUID from recall, remember or a previous update_memory).",
			"if_match": "The memory's version as you read it (its version field)."},
	},
	{
		Name: "forget", Method: http.MethodDelete, Path: "/v1/memories/{id}", Destructive: true,
		Description: "Delete a memory and all its versions (text, vector, history). Use the id from recall or remember. " +
			"Only when the user asks you to forget it or it is wrong and cannot be corrected.",
		Props: map[string]string{"id": "The memory id (a UUID from recall or remember)."},
	},
	{
		Name: "graph_search", Method: http.MethodGet, Path: "/v1/graph/entities", ReadOnly: true,
		Description: "Find the people, places, organisations and things memory knows about, by name, alias or " +
			"description. An entity whose name or alias is exactly q comes first (exact: true). Use the id with " +
			"graph_about to read what is known about it.",
		Props: map[string]string{"q": "A name (\"Ana\"), an alias or a few words describing the entity."},
	},
	{
		Name: "graph_about", Method: http.MethodGet, Path: "/v1/graph/entities/{id}", ReadOnly: true,
		Description: "Everything known about one entity: its relations to other entities and values (\"Ana works_at " +
			"Lisbon store\"), those in force now, or those true at as_of (what was true on a date). Closed relations " +
			"are history, not current facts.",
		Props: map[string]string{"id": "The entity id (from graph_search or get_context's graph section).",
			"as_of": "A past time (RFC 3339, e.g. 2026-03-01T00:00:00Z) to read what was true then; omit for now."},
	},
	{
		Name: "resume_job", Method: http.MethodGet, Path: "/v1/jobs/{job}/resume", ReadOnly: true,
		Description: "Everything needed to carry on a job after a crash or in a new session: the latest checkpoint (next " +
			"action, working-state snapshot), completed steps with their results (never redo them), steps in flight " +
			"with their lease, failed steps, pending handoffs and the last events. Its checkpoint version is the " +
			"if_match of your next save_checkpoint.",
		Props: map[string]string{"job": "The job id you were given or chose when the job started."},
	},
	{
		Name: "start_step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/start",
		Description: "Claim a step before doing it. status \"completed\": it already ran — use `result` and do NOT run it " +
			"again. status \"claimed\": you hold a lease; do the work and then call complete_step or fail_step with the " +
			"fencing_token. An error naming a holder means another agent holds a live lease: wait until `until` or do " +
			"something else.",
		Props: map[string]string{
			"step":  "A stable id for this unit of work (the same id after a restart), e.g. \"reframe-tiktok\".",
			"owner": "Your agent id: the same one after a restart, so you get your own claim back.",
		},
	},
	{
		Name: "complete_step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/complete",
		Description: "Mark a step you claimed as done with its result (any JSON). From then on start_step answers this " +
			"result instead of letting anyone run the step again. A conflict error means your lease moved on: stop and " +
			"call resume_job.",
		Props: map[string]string{"fencing_token": "The fencing_token start_step gave you."},
	},
	{
		Name: "fail_step", Method: http.MethodPost, Path: "/v1/jobs/{job}/steps/{step}/fail",
		Description: "Report that a step you claimed failed. disposition \"retryable\": it may be claimed again; " +
			"\"manual_review\": a human must look at it first.",
		Props: map[string]string{"fencing_token": "The fencing_token start_step gave you."},
	},
	{
		Name: "log_event", Method: http.MethodPost, Path: "/v1/jobs/{job}/events", BodyIdempotency: true,
		Description: "Record a side effect you just performed (render, send, crop, write) in the job's ordered log, right " +
			"after doing it. Always pass an idempotency_key derived from the action (e.g. step id + op); if the call " +
			"fails, retry it with the same key — it is never recorded twice. Its fingerprint (op + params) is what " +
			"was_applied checks.",
		Props: map[string]string{
			"op":              "What you did, e.g. \"video.reframe\".",
			"params":          "The exact parameters of the action (a JSON object): part of its fingerprint.",
			"idempotency_key": "A key unique to this action (e.g. \"reframe-tiktok:render\"); retries with the same key never append twice.",
		},
		Required: []string{"op"},
	},
	{
		Name: "was_applied", Method: http.MethodGet, Path: "/v1/jobs/{job}/applied", ReadOnly: true,
		Description: "Before any side effect, ask whether exactly this action (op + params) was already applied in this " +
			"job. applied: true means it is done — take its result from `event` and skip it.",
		Props: map[string]string{"params": "The action's parameters as a JSON object (the same you would log)."},
	},
	{
		Name: "save_checkpoint", Method: http.MethodPut, Path: "/v1/jobs/{job}/checkpoint", IfMatch: true,
		Description: "Save the job's progress after each meaningful step: goal, current_step, done, pending, next_action " +
			"and any state a fresh context needs. if_match is the checkpoint version you resumed from (0 for the first); " +
			"a conflict means someone else saved meanwhile: resume_job, merge, save again.",
		Props: map[string]string{
			"done":        "Step ids done so far (a JSON array).",
			"pending":     "Step ids still to do (a JSON array).",
			"next_action": "What to do next, in plain words: the next turn starts from it.",
			"state":       "Task state a fresh context needs (a JSON object), e.g. settled parameters.",
		},
		Required: []string{"if_match"},
	},
	{
		Name: "kv_get", Method: http.MethodGet, Path: "/v1/kv/{namespace}/{key}", ReadOnly: true,
		Description: "Read a preference, setting or rule by key. Pass the user/agent/session you act for: the most specific " +
			"level that has the key answers (session > agent > user > org) and `level` says which.",
		Props: map[string]string{"namespace": "A group of keys, e.g. \"preferences\", \"brand\", \"rules\"."},
	},
	{
		Name: "kv_set", Method: http.MethodPut, Path: "/v1/kv/{namespace}/{key}", IfMatch: true,
		Description: "Set a preference, setting or rule at one scope level: the most specific of session_id, agent_id, " +
			"user_id you pass (org-wide when none). Every write is versioned; pass if_match to write only over the " +
			"version you read.",
		Props: map[string]string{"value": "Any JSON value except null."},
	},
	{
		Name: "handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs",
		Description: "Hand the job to another agent with the context it needs. The job stays yours until the receiver " +
			"calls ack_handoff; the handoff is never lost or split.",
	},
	{
		Name: "ack_handoff", Method: http.MethodPost, Path: "/v1/jobs/{job}/handoffs/{id}/ack",
		Description: "Accept a handoff addressed to you: the job and its in-flight steps become yours (new fencing tokens). " +
			"Then call resume_job.",
		Props: map[string]string{"id": "The handoff id (from resume_job's pending_handoffs).", "agent_id": "Your agent id: the handoff's `to`."},
	},
}

// Tools builds the tool table from the OpenAPI document the REST API serves.
func Tools(doc *huma.OpenAPI) ([]Tool, error) {
	g := &gen{doc: doc}
	out := make([]Tool, 0, len(Specs))
	for _, sp := range Specs {
		t, err := g.tool(sp)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", sp.Name, err)
		}
		out = append(out, t)
	}
	return out, nil
}

type gen struct{ doc *huma.OpenAPI }

func (g *gen) tool(sp Spec) (Tool, error) {
	item := g.doc.Paths[sp.Path]
	if item == nil {
		return Tool{}, fmt.Errorf("no path %s", sp.Path)
	}
	op := map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
		http.MethodPatch: item.Patch, http.MethodDelete: item.Delete}[sp.Method]
	if op == nil {
		return Tool{}, fmt.Errorf("no %s %s", sp.Method, sp.Path)
	}
	props := map[string]any{}
	required := map[string]bool{}
	t := Tool{Name: sp.Name, Description: sp.Description, Method: sp.Method, Path: sp.Path,
		ReadOnly: sp.ReadOnly, Destructive: sp.Destructive, BodyIdempotency: sp.BodyIdempotency}
	allowQuery := map[string]bool{}
	for _, q := range sp.Query {
		allowQuery[q] = true
	}
	for _, p := range op.Parameters {
		switch p.In {
		case "path":
			props[p.Name] = g.inline(p.Schema, p.Description)
			required[p.Name] = true
		case "query":
			if sp.Query != nil && !allowQuery[p.Name] {
				continue
			}
			props[p.Name] = g.inline(p.Schema, p.Description)
			t.Query = append(t.Query, p.Name)
		case "header":
			if p.Name == "If-Match" && sp.IfMatch {
				props["if_match"] = map[string]any{"type": "integer", "minimum": 0,
					"description": "Sent as If-Match: " + p.Description}
			}
		}
	}
	if op.RequestBody != nil {
		mt := op.RequestBody.Content["application/json"]
		if mt == nil {
			for _, v := range op.RequestBody.Content {
				mt = v
			}
		}
		if mt != nil && mt.Schema != nil {
			body := g.inline(mt.Schema, "")
			if alts, ok := body["oneOf"].([]any); ok && len(alts) > 0 {
				body, _ = alts[0].(map[string]any) // one event (the array form is for batches)
			}
			bp, _ := body["properties"].(map[string]any)
			for k, v := range bp {
				if _, clash := props[k]; clash {
					return Tool{}, fmt.Errorf("body property %s clashes with a parameter", k)
				}
				props[k] = v
			}
			if req, ok := body["required"].([]any); ok {
				for _, r := range req {
					required[r.(string)] = true
				}
			}
		}
		if !sp.BodyIdempotency {
			props["idempotency_key"] = map[string]any{"type": "string", "maxLength": 255,
				"description": "Optional Idempotency-Key: retrying with the same key and arguments replays the first answer instead of writing twice."}
		}
	}
	if sp.Method == http.MethodDelete {
		// DELETEs carry no body: an Idempotency-Key is not used.
		delete(props, "idempotency_key")
	}
	for k, d := range sp.Props {
		p, ok := props[k].(map[string]any)
		if !ok {
			return Tool{}, fmt.Errorf("description for unknown argument %s", k)
		}
		p["description"] = d
	}
	for _, r := range sp.Required {
		if _, ok := props[r]; !ok {
			return Tool{}, fmt.Errorf("required argument %s is not an argument", r)
		}
		required[r] = true
	}
	req := make([]string, 0, len(required))
	for r := range required {
		req = append(req, r)
	}
	sort.Strings(req)
	sort.Strings(t.Query)
	t.Schema = map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
	return t, nil
}

// inline turns a huma schema into a plain JSON-schema map with every $ref resolved.
func (g *gen) inline(s *huma.Schema, desc string) map[string]any {
	b, err := json.Marshal(s)
	if err != nil {
		return map[string]any{}
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	out := g.resolve(m, 0).(map[string]any)
	if desc != "" {
		if _, ok := out["description"]; !ok {
			out["description"] = desc
		}
	}
	return out
}

func (g *gen) resolve(v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok && depth < 8 {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			if s := g.doc.Components.Schemas.Map()[name]; s != nil {
				b, _ := json.Marshal(s)
				var target map[string]any
				_ = json.Unmarshal(b, &target)
				for k, v := range x {
					if k != "$ref" {
						target[k] = v
					}
				}
				return g.resolve(target, depth+1)
			}
		}
		out := make(map[string]any, len(x))
		for k, v := range x {
			if k == "$schema" || k == "examples" {
				continue
			}
			out[k] = g.resolve(v, depth)
		}
		return out
	case []any:
		for i := range x {
			x[i] = g.resolve(x[i], depth)
		}
		return x
	}
	return v
}
