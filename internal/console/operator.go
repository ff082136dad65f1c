package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Operator pages: jobs and their timelines, memories, key-value.

var jobStatuses = []string{"running", "completed", "failed", "cancelled"}

// jobsPage lists the stalled jobs first (with where each stalled), then jobs by status.
func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	status := in.Get("status")
	v := &view{Title: "Jobs", Nav: "jobs", Data: map[string]any{"status": status, "statuses": jobStatuses}}
	if in.Get("cursor") == "" {
		st := c.get(r, "/v1/jobs", url.Values{"stalled": {"true"}, "limit": {"50"}})
		if p := st.Problem(); p != nil {
			v.Problem = p
		}
		v.Data["stalled"] = st.Items()
	}
	q := url.Values{"limit": {"25"}}
	if status != "" {
		q.Set("status", status)
	}
	if cur := in.Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	res := c.get(r, "/v1/jobs", q)
	if p := res.Problem(); p != nil {
		v.Problem = p
	}
	v.Data["items"], v.Data["next"] = res.Items(), str(res.Map()["next_cursor"])
	c.render(w, r, http.StatusOK, "jobs", v)
}

// jobPage is a job's timeline: steps (each attempt when the API lists them), events with
// reverts and compactions, checkpoints with a diff between two versions, handoffs, forks.
func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	job := chi.URLParam(r, "job")
	jp := "/v1/jobs/" + seg(job)
	v := &view{Title: "Job " + job, Nav: "jobs"}
	jr := c.get(r, jp, nil)
	if p := jr.Problem(); p != nil {
		v.Problem = p
		c.render(w, r, p.Status, "error", v)
		return
	}
	d := map[string]any{"job": jr.Map()}
	v.Data = d
	steps := c.get(r, jp+"/steps", url.Values{"limit": {"200"}}).Items()
	for i, s := range steps {
		sm, _ := s.(map[string]any)
		if sm == nil || i >= 50 {
			continue
		}
		if at := c.get(r, jp+"/steps/"+seg(str(sm["step_id"]))+"/attempts", url.Values{"limit": {"100"}}); at.OK() {
			sm["attempt_list"], sm["attempts_next"] = at.Items(), str(at.Map()["next_cursor"])
		}
	}
	d["steps"] = steps
	eq := url.Values{"limit": {"100"}}
	if cur := r.URL.Query().Get("events_cursor"); cur != "" {
		eq.Set("cursor", cur)
	}
	ev := c.get(r, jp+"/events", eq)
	d["events"], d["events_next"] = ev.Items(), str(ev.Map()["next_cursor"])
	cps := c.get(r, jp+"/checkpoints", url.Values{"limit": {"100"}}).Items()
	d["checkpoints"] = cps
	d["handoffs"] = c.get(r, jp+"/handoffs", nil).Items()
	// Forks: the jobs forked from this one (GET /v1/jobs?parent_job_id=, an indexed query).
	fq := url.Values{"parent_job_id": {job}, "limit": {"100"}}
	if cur := r.URL.Query().Get("forks_cursor"); cur != "" {
		fq.Set("cursor", cur)
	}
	fk := c.get(r, "/v1/jobs", fq)
	d["forks"], d["forks_next"] = fk.Items(), str(fk.Map()["next_cursor"])
	// The diff of two checkpoint versions (?from=&to=; default the two newest).
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	if from == "" && to == "" && len(cps) >= 2 {
		vs := checkpointVersions(cps)
		from, to = vs[len(vs)-2], vs[len(vs)-1]
	}
	if from != "" && to != "" {
		a := c.get(r, jp+"/checkpoints/"+seg(from), nil)
		b := c.get(r, jp+"/checkpoints/"+seg(to), nil)
		if p := a.Problem(); p != nil {
			v.Problem = p
		} else if p := b.Problem(); p != nil {
			v.Problem = p
		} else {
			d["diff"] = diffJSON(a.Map(), b.Map())
			d["from"], d["to"] = from, to
		}
	}
	c.render(w, r, http.StatusOK, "job", v)
}

func checkpointVersions(cps []any) []string {
	var vs []int
	for _, cp := range cps {
		if m, _ := cp.(map[string]any); m != nil {
			if f, ok := m["version"].(float64); ok {
				vs = append(vs, int(f))
			}
		}
	}
	sort.Ints(vs)
	out := make([]string, len(vs))
	for i, x := range vs {
		out[i] = strconv.Itoa(x)
	}
	return out
}

// change is one line of a diff: a JSON path and its value before and after.
type change struct {
	Path, Kind, Before, After string
}

// diffJSON compares two checkpoints' state, working state, pending work and position.
func diffJSON(a, b map[string]any) []change {
	var out []change
	skip := map[string]bool{"created_at": true, "version": true, "event_seq": true, "stored_in": true}
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		xm, xok := x.(map[string]any)
		ym, yok := y.(map[string]any)
		if xok && yok {
			keys := map[string]bool{}
			for k := range xm {
				keys[k] = true
			}
			for k := range ym {
				keys[k] = true
			}
			ks := make([]string, 0, len(keys))
			for k := range keys {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				if path == "" && skip[k] {
					continue
				}
				p := k
				if path != "" {
					p = path + "." + k
				}
				xv, xin := xm[k]
				yv, yin := ym[k]
				switch {
				case !xin:
					out = append(out, change{Path: p, Kind: "added", After: compact(yv)})
				case !yin:
					out = append(out, change{Path: p, Kind: "removed", Before: compact(xv)})
				default:
					walk(p, xv, yv)
				}
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			out = append(out, change{Path: path, Kind: "changed", Before: compact(x), After: compact(y)})
		}
	}
	walk("", a, b)
	return out
}

// compact is v as one line of JSON, not HTML-escaped (the page's template escapes it).
func compact(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// memoriesPage searches memories and shows each result's ranking breakdown.
func (c *Console) memoriesPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	f := map[string]any{}
	for _, k := range []string{"query", "user_id", "agent_id", "session_id", "top_k"} {
		if x := strings.TrimSpace(in.Get(k)); x != "" {
			f[k] = x
		}
	}
	v := &view{Title: "Memories", Nav: "memories", Data: map[string]any{"f": f}}
	if q, _ := f["query"].(string); q != "" {
		body := map[string]any{"query": q}
		for _, k := range []string{"user_id", "agent_id", "session_id"} {
			if x, ok := f[k]; ok {
				body[k] = x
			}
		}
		body["top_k"] = 10
		if k, err := strconv.Atoi(str(f["top_k"])); err == nil {
			body["top_k"] = k
		}
		res := c.call(r, http.MethodPost, "/v1/memories/search", nil, body, "")
		if p := res.Problem(); p != nil {
			v.Problem = p
		} else {
			m := res.Map()
			v.Data["items"], v.Data["search"] = m["items"], m["search"]
			v.Data["searched"] = true
		}
	}
	c.render(w, r, http.StatusOK, "memories", v)
}

// memoryPage is one memory: its current version, provenance and every version.
func (c *Console) memoryPage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	v := &view{Title: "Memory " + id, Nav: "memories"}
	res := c.get(r, "/v1/memories/"+seg(id), nil)
	if p := res.Problem(); p != nil {
		v.Problem = p
		c.render(w, r, p.Status, "error", v)
		return
	}
	v.Data = map[string]any{"m": res.Map(), "history": c.get(r, "/v1/memories/"+seg(id)+"/history", nil).Items()}
	c.render(w, r, http.StatusOK, "memory", v)
}

// kvPage resolves a namespace for a scope: per key the entry a GET would answer, with the
// level (session, agent, user, org) that answered.
func (c *Console) kvPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	f := map[string]any{}
	q := url.Values{"resolve": {"true"}, "limit": {"50"}}
	for _, k := range []string{"namespace", "user_id", "agent_id", "session_id", "cursor"} {
		if x := strings.TrimSpace(in.Get(k)); x != "" {
			f[k] = x
			if k != "namespace" {
				q.Set(k, x)
			}
		}
	}
	v := &view{Title: "Key-value", Nav: "kv", Data: map[string]any{"f": f}}
	if ns, _ := f["namespace"].(string); ns != "" {
		res := c.get(r, "/v1/kv/"+seg(ns), q)
		if p := res.Problem(); p != nil {
			v.Problem = p
		} else {
			v.Data["items"], v.Data["next"], v.Data["searched"] = res.Items(), str(res.Map()["next_cursor"]), true
		}
	}
	c.render(w, r, http.StatusOK, "kv", v)
}
