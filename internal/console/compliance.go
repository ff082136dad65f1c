package console

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Compliance pages: a data subject, erasures, export, restriction, rectification, audit.

// subjectPage finds a data subject: restriction, what is held (the memories themselves, with
// the ids rectification takes, the preferences, and counts per tier), the audit records that
// carry the subject's pseudonym, erasures, forms. Reading what is held is an access to the
// subject's data: the API audits it as an export (one audit record, with the pseudonym, never
// the user id), and nothing else is written, for a known subject or an unknown one.
func (c *Console) subjectPage(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.URL.Query().Get("user_id"))
	v := &view{Title: "Data subjects", Nav: "subjects", Data: map[string]any{"user_id": user}}
	if user == "" {
		c.render(w, r, http.StatusOK, "subject", v)
		return
	}
	v.Title = "Data subject " + user
	q := url.Values{"user_id": {user}}
	res := c.get(r, "/v1/gdpr/restrictions/"+seg(user), nil)
	if p := res.Problem(); p != nil {
		v.Problem = p
		c.render(w, r, p.Status, "subject", v)
		return
	}
	v.Data["restriction"] = res.Map()
	exp := c.get(r, "/v1/gdpr/exports", q)
	if p := exp.Problem(); p != nil {
		v.Problem = p
	} else {
		h := readExport(exp.Body, maxListed)
		v.Data["held"] = h
	}
	er := c.get(r, "/v1/gdpr/erasures", q)
	v.Data["erasures"] = er.Items()
	v.Data["now"] = c.d.Now()
	if n := r.URL.Query().Get("notice"); n != "" {
		v.Notice = n
	}
	c.render(w, r, http.StatusOK, "subject", v)
}

// maxListed bounds the memories and preferences the subject page lists (the export has all).
const maxListed = 200

// held is what a subject's export holds, as the subject page shows it.
type held struct {
	Counts      []heldCount      // per tier and type, the subject's data (audit and GDPR bookkeeping apart)
	Records     int64            // records of the subject's data
	Memories    []map[string]any // current memory versions: id, text, kind, agent, session, since
	MoreMemory  int              // current memories beyond maxListed
	Preferences []map[string]any // key-value entries: namespace, key, level, value
	MorePrefs   int
	Audit       int64 // audit records carrying the subject's pseudonym
	Bookkeeping int64 // restriction and erasure requests about the subject
}

type heldCount struct {
	What string
	N    int64
}

// readExport reads an export's records (one JSON object a line; the last is the summary).
func readExport(body []byte, limit int) held {
	var h held
	counts := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rec struct {
			Tier string         `json:"tier"`
			Type string         `json:"type"`
			ID   string         `json:"id"`
			Data map[string]any `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Tier == "" {
			continue
		}
		switch {
		case rec.Tier == "audit":
			h.Audit++
			continue
		case rec.Tier == "gdpr":
			h.Bookkeeping++
			continue
		}
		h.Records++
		counts[rec.Tier+" · "+rec.Type]++
		switch {
		case rec.Tier == "semantic" && rec.Type == "memory" && rec.Data["valid_to"] == nil:
			if len(h.Memories) >= limit {
				h.MoreMemory++
				continue
			}
			h.Memories = append(h.Memories, map[string]any{"id": rec.ID, "text": rec.Data["text"], "kind": rec.Data["kind"],
				"agent_id": rec.Data["agent_id"], "session_id": rec.Data["session_id"], "since": rec.Data["valid_from"]})
		case rec.Tier == "keyvalue" && rec.Type == "entry":
			if len(h.Preferences) >= limit {
				h.MorePrefs++
				continue
			}
			h.Preferences = append(h.Preferences, map[string]any{"namespace": rec.Data["namespace"], "key": rec.Data["key"],
				"level": rec.Data["level"], "value": rec.Data["value"]})
		}
	}
	for _, k := range sortedKeys(counts) {
		h.Counts = append(h.Counts, heldCount{What: k, N: counts[k]})
	}
	return h
}

func (c *Console) subjectURL(user, notice string) string {
	return base + "/subjects" + query("user_id", user, "notice", notice)
}

func (c *Console) restrict(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.PostFormValue("user_id"))
	body := map[string]any{}
	if reason := r.PostFormValue("reason"); reason != "" {
		body["reason"] = reason
	}
	res := c.call(r, http.MethodPost, "/v1/gdpr/restrictions/"+seg(user), nil, body, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Restriction refused", Nav: "subjects", Problem: p,
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	http.Redirect(w, r, c.subjectURL(user, "Processing of this subject's data is now restricted (Art. 18)."), http.StatusSeeOther)
}

func (c *Console) unrestrict(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.PostFormValue("user_id"))
	res := c.call(r, http.MethodDelete, "/v1/gdpr/restrictions/"+seg(user), nil, nil, "")
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Lifting refused", Nav: "subjects", Problem: p,
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	http.Redirect(w, r, c.subjectURL(user, "The restriction is lifted."), http.StatusSeeOther)
}

// export streams the subject's export from the API as a download.
func (c *Console) export(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.URL.Query().Get("user_id"))
	res := c.get(r, "/v1/gdpr/exports", url.Values{"user_id": {user}})
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Export refused", Nav: "subjects", Problem: p,
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="strata-export-`+safeFile(user)+`.ndjson"`)
	_, _ = io.Copy(w, bytes.NewReader(res.Body))
}

func safeFile(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// rectify corrects a memory's text or a key-value entry's value for the subject.
func (c *Console) rectify(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.PostFormValue("user_id"))
	body := map[string]any{"user_id": user}
	if reason := r.PostFormValue("reason"); reason != "" {
		body["reason"] = reason
	}
	if r.PostFormValue("what") == "kv" {
		kv := map[string]any{"namespace": r.PostFormValue("namespace"), "key": r.PostFormValue("key")}
		for _, f := range []string{"agent_id", "session_id"} {
			if x := r.PostFormValue(f); x != "" {
				kv[f] = x
			}
		}
		raw := strings.TrimSpace(r.PostFormValue("value"))
		var val any
		if json.Unmarshal([]byte(raw), &val) != nil {
			val = raw // not JSON: the text as a string
		}
		kv["value"] = val
		body["kv"] = kv
	} else {
		mem := map[string]any{"id": strings.TrimSpace(r.PostFormValue("memory_id"))}
		if t := r.PostFormValue("text"); t != "" {
			mem["text"] = t
		}
		body["memory"] = mem
	}
	res := c.call(r, http.MethodPost, "/v1/gdpr/rectifications", nil, body, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Rectification refused", Nav: "subjects", Problem: p,
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	http.Redirect(w, r, c.subjectURL(user, "Rectified (the corrected record keeps its history)."), http.StatusSeeOther)
}

func (c *Console) createErasure(w http.ResponseWriter, r *http.Request) {
	user := strings.TrimSpace(r.PostFormValue("user_id"))
	// The confirmation names the subject, so a form posted for one subject cannot erase another.
	if user == "" || r.PostFormValue("confirm") != user {
		c.render(w, r, http.StatusUnprocessableEntity, "error", &view{Title: "Erasure not confirmed", Nav: "subjects",
			Problem: &problem{Status: http.StatusUnprocessableEntity, Title: "Confirm the erasure",
				Detail: "Tick the confirmation for this subject; nothing was erased.",
				Errors: []fieldError{{Location: "confirm", Message: "must confirm the erasure of " + user}}},
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	body := map[string]any{"user_id": user, "reason": r.PostFormValue("reason")}
	res := c.call(r, http.MethodPost, "/v1/gdpr/erasures", nil, body, r.PostFormValue("form_id"))
	if p := res.Problem(); p != nil {
		c.render(w, r, p.Status, "error", &view{Title: "Erasure refused", Nav: "subjects", Problem: p,
			Data: map[string]any{"back": c.subjectURL(user, "")}})
		return
	}
	http.Redirect(w, r, base+"/erasures/"+seg(str(res.Map()["id"])), http.StatusSeeOther)
}

func (c *Console) erasuresPage(w http.ResponseWriter, r *http.Request) {
	q := url.Values{"limit": {"25"}}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	res := c.get(r, "/v1/gdpr/erasures", q)
	v := &view{Title: "Erasures", Nav: "erasures", Problem: res.Problem(),
		Data: map[string]any{"items": res.Items(), "now": c.d.Now(), "next": str(res.Map()["next_cursor"])}}
	c.render(w, r, http.StatusOK, "erasures", v)
}

func (c *Console) erasurePage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	res := c.get(r, "/v1/gdpr/erasures/"+seg(id), nil)
	v := &view{Title: "Erasure " + id, Nav: "erasures"}
	if p := res.Problem(); p != nil {
		v.Problem = p
		c.render(w, r, p.Status, "error", v)
		return
	}
	e := res.Map()
	v.Data = map[string]any{"e": e, "receipt": receipt(e), "now": c.d.Now()}
	c.render(w, r, http.StatusOK, "erasure", v)
}

// erasureStatus is the JSON the erasure page polls while the erasure runs.
func (c *Console) erasureStatus(w http.ResponseWriter, r *http.Request) {
	res := c.get(r, "/v1/gdpr/erasures/"+seg(chi.URLParam(r, "id")), nil)
	w.Header().Set("Content-Type", "application/json")
	if !res.OK() {
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.Body)
		return
	}
	m := res.Map()
	_ = json.NewEncoder(w).Encode(map[string]any{"status": m["status"], "phases_done": m["phases_done"],
		"phases": m["phases"], "rounds": m["rounds"], "attempts": m["attempts"], "last_error": m["last_error"]})
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	q := url.Values{"limit": {"50"}, "order": {"newest"}}
	filters := map[string]any{}
	for _, f := range []string{"user_id", "subject", "actor_key_id", "action", "since", "until", "cursor"} {
		if x := strings.TrimSpace(in.Get(f)); x != "" {
			q.Set(f, x)
			filters[f] = x
		}
	}
	res := c.get(r, "/v1/audit", q)
	v := &view{Title: "Audit log", Nav: "audit", Problem: res.Problem(),
		Data: map[string]any{"items": res.Items(), "f": filters, "next": str(res.Map()["next_cursor"])}}
	c.render(w, r, http.StatusOK, "audit", v)
}

func (c *Console) verifyPage(w http.ResponseWriter, r *http.Request) {
	res := c.get(r, "/v1/audit/verify", nil)
	v := &view{Title: "Audit chain verification", Nav: "audit", Problem: res.Problem(), Data: map[string]any{"report": res.Map()}}
	c.render(w, r, http.StatusOK, "verify", v)
}
