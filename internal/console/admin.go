package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Admin pages: quarantines, lifecycle policies with an eviction preview, keys.

func (c *Console) quarantinesPage(w http.ResponseWriter, r *http.Request) {
	q := url.Values{"limit": {"50"}}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	res := c.get(r, "/v1/admin/quarantines", q)
	v := &view{Title: "Quarantines", Nav: "quarantines", Problem: res.Problem(), Notice: r.URL.Query().Get("notice"),
		Data: map[string]any{"items": res.Items(), "next": str(res.Map()["next_cursor"])}}
	c.render(w, r, http.StatusOK, "quarantines", v)
}

func (c *Console) createQuarantine(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{}
	for _, k := range []string{"key_id", "agent_id", "since", "reason"} {
		if x := strings.TrimSpace(r.PostFormValue(k)); x != "" {
			body[k] = x
		}
	}
	res := c.call(r, http.MethodPost, "/v1/admin/quarantines", nil, body, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Quarantine refused", Nav: "quarantines", Problem: p,
			Data: map[string]any{"back": base + "/quarantines"}})
		return
	}
	http.Redirect(w, r, base+"/quarantines"+query("notice", "Quarantine created."), http.StatusSeeOther)
}

func (c *Console) quarantineAction(w http.ResponseWriter, r *http.Request) {
	id, action := chi.URLParam(r, "id"), chi.URLParam(r, "action")
	if action != "release" && action != "purge" {
		http.NotFound(w, r)
		return
	}
	res := c.call(r, http.MethodPost, "/v1/admin/quarantines/"+seg(id)+"/"+action, nil, map[string]any{}, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Quarantine " + action + " refused", Nav: "quarantines", Problem: p,
			Data: map[string]any{"back": base + "/quarantines"}})
		return
	}
	http.Redirect(w, r, base+"/quarantines"+query("notice", "Quarantine "+id+": "+action+" done."), http.StatusSeeOther)
}

func (c *Console) policiesPage(w http.ResponseWriter, r *http.Request) {
	res := c.get(r, "/v1/admin/policies", nil)
	v := &view{Title: "Lifecycle policies", Nav: "policies", Problem: res.Problem(), Notice: r.URL.Query().Get("notice"),
		Data: policyData(res.Map())}
	c.render(w, r, http.StatusOK, "policies", v)
}

// policyData: the form edits what the org stored (absent fields follow the defaults); the
// effective policy is shown beside it.
func policyData(m map[string]any) map[string]any {
	stored := "{}"
	if st, ok := m["stored"]; ok && st != nil {
		stored = prettyJSON(st)
	}
	version, _ := m["version"].(float64)
	return map[string]any{"doc": m, "policy": stored, "effective": prettyJSON(m["policy"]), "isStored": version > 0}
}

func (c *Console) policyForm(r *http.Request) (any, *problem) {
	var pol any
	if err := json.Unmarshal([]byte(r.PostFormValue("policy")), &pol); err != nil {
		return nil, &problem{Status: 422, Detail: "The policy is not valid JSON: " + err.Error(),
			Errors: []fieldError{{Location: "policy", Message: "must be a JSON object"}}}
	}
	return pol, nil
}

func (c *Console) putPolicies(w http.ResponseWriter, r *http.Request) {
	pol, perr := c.policyForm(r)
	res := &apiResult{}
	if perr == nil {
		res = c.call(r, http.MethodPut, "/v1/admin/policies", nil, pol, r.PostFormValue("form_id"))
		perr = res.Problem()
	}
	if perr != nil {
		v := &view{Title: "Lifecycle policies", Nav: "policies", Problem: perr,
			Data: map[string]any{"policy": r.PostFormValue("policy")}}
		c.render(w, r, perr.Status, "policies", v)
		return
	}
	http.Redirect(w, r, base+"/policies"+query("notice", "Policy saved."), http.StatusSeeOther)
}

// previewEviction shows what the saved policy would evict now, without running anything;
// runEviction applies it (the same rules, audited per rule).
func (c *Console) previewEviction(w http.ResponseWriter, r *http.Request) {
	c.eviction(w, r, "preview")
}

func (c *Console) runEviction(w http.ResponseWriter, r *http.Request) { c.eviction(w, r, "run") }

func (c *Console) eviction(w http.ResponseWriter, r *http.Request, what string) {
	formID := ""
	if what == "run" {
		formID = r.PostFormValue("form_id")
	}
	res := c.call(r, http.MethodPost, "/v1/admin/eviction/"+what, nil, nil, formID)
	v := &view{Title: "Lifecycle policies", Nav: "policies", Problem: res.Problem(),
		Data: policyData(c.get(r, "/v1/admin/policies", nil).Map())}
	v.Data["evicted"], v.Data["what"] = res.Map(), what
	status := http.StatusOK
	if v.Problem != nil {
		status = v.Problem.Status
	}
	c.render(w, r, status, "policies", v)
}

func (c *Console) keysPage(w http.ResponseWriter, r *http.Request) {
	q := url.Values{"limit": {"100"}}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	res := c.get(r, "/v1/admin/keys", q)
	v := &view{Title: "API keys", Nav: "keys", Problem: res.Problem(), Notice: r.URL.Query().Get("notice"),
		Data: map[string]any{"items": res.Items(), "next": str(res.Map()["next_cursor"]), "roles": []string{"agent", "compliance", "admin"}}}
	c.render(w, r, http.StatusOK, "keys", v)
}

// createKey creates a key of the admin's org through POST /v1/admin/keys and shows its secret
// once, on this answer only (never in a URL, never stored: a replayed form answers the
// API's "shown once" placeholder).
func (c *Console) createKey(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"role": strings.TrimSpace(r.PostFormValue("role"))}
	if n := strings.TrimSpace(r.PostFormValue("name")); n != "" {
		body["name"] = n
	}
	res := c.call(r, http.MethodPost, "/v1/admin/keys", nil, body, r.PostFormValue("form_id"))
	list := c.get(r, "/v1/admin/keys", url.Values{"limit": {"100"}})
	v := &view{Title: "API keys", Nav: "keys", Problem: res.Problem(),
		Data: map[string]any{"items": list.Items(), "next": str(list.Map()["next_cursor"]), "roles": []string{"agent", "compliance", "admin"}}}
	status := http.StatusOK
	if v.Problem != nil {
		status = v.Problem.Status
	} else {
		v.Data["created"] = res.Map()
		w.Header().Set("Cache-Control", "no-store")
	}
	c.render(w, r, status, "keys", v)
}

// revokeKey revokes a key through DELETE /v1/admin/keys/{id}; the auth tier ends the key's
// console sessions in the same transaction.
func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	res := c.call(r, http.MethodDelete, "/v1/admin/keys/"+seg(id), nil, nil, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Revocation refused", Nav: "keys", Problem: p,
			Data: map[string]any{"back": base + "/keys"}})
		return
	}
	http.Redirect(w, r, base+"/keys"+query("notice", "Key "+id+" revoked; its console sessions have ended."), http.StatusSeeOther)
}
