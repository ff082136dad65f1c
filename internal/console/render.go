package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mem/strata/internal/strata"
)

// view is what every page template gets.
type view struct {
	Title   string
	Me      *who
	CSRF    string // the form token (the session's, or the sign-in form's)
	Next    string
	Notice  string
	Problem *problem
	Nav     string // the active section
	Data    map[string]any
}

// FormID is a fresh Idempotency-Key for one rendered form.
func (v *view) FormID() string { return newSecret() }

// Role reports whether the signed-in key can see role's pages.
func (v *view) Role(role string) bool { return v.Me != nil && v.Me.P.Can(strata.Role(role)) }

// FieldError is the message of the problem's error at field (a body field's bare name or
// its path), "" when none.
func (v *view) FieldError(field string) string {
	if v.Problem == nil {
		return ""
	}
	for _, e := range v.Problem.Errors {
		loc := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(e.Location, "body."), "query."), "path.")
		if loc == field || strings.HasPrefix(loc, field+".") || strings.HasPrefix(loc, field+"[") {
			return e.Message
		}
	}
	return ""
}

type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"when":    when,
	"json":    prettyJSON,
	"str":     str,
	"num":     num,
	"keys":    sortedKeys[any],
	"query":   query,
	"overdue": overdue,
	"short":   short,
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
	"list":    func(v any) []any { l, _ := v.([]any); return l },
	"obj":     obj,
	"eq2":     func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) },
	"pathesc": url.PathEscape,
}

func mustParse() *pages {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := templateFS.ReadDir("templates")
	if err != nil {
		panic(err)
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, e := range names {
		name := strings.TrimSuffix(e.Name(), ".html")
		if name == "layout" {
			continue
		}
		t := template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+e.Name()))
		p.byName[name] = t
	}
	return p
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view) {
	if v.Me == nil {
		v.Me = whoFrom(r.Context())
	}
	if v.CSRF == "" && v.Me != nil {
		v.CSRF = v.Me.CSRF
	}
	if v.Data == nil {
		v.Data = map[string]any{}
	}
	t, ok := c.pages.byName[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.d.Log.ErrorContext(r.Context(), "console template", "template", name, "err", err)
		http.Error(w, "rendering the page failed; report the X-Request-Id", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// whenTmpl is the <time> element when renders: the template engine escapes it, like every
// page, so no stored text reaches a page as markup (no template.HTML is built by hand).
var whenTmpl = template.Must(template.New("when").Parse(`<time datetime="{{.ISO}}" title="{{.UTC}}">{{.UTC}}</time>`))

// when renders an RFC 3339 time as a <time> element in UTC; the page's script shows it in
// the viewer's zone and keeps UTC on hover. Anything else is shown as escaped text.
func when(v any) template.HTML {
	s := str(v)
	if s == "" {
		return template.HTML("—")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return template.HTML(template.HTMLEscapeString(s))
	}
	u := t.UTC()
	var b strings.Builder
	if err := whenTmpl.Execute(&b, struct{ ISO, UTC string }{u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05 UTC")}); err != nil {
		return template.HTML(template.HTMLEscapeString(s))
	}
	return template.HTML(b.String())
}

func overdue(e map[string]any, now time.Time) bool {
	if str(e["status"]) == "completed" {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, str(e["deadline"]))
	return err == nil && now.After(t)
}

func prettyJSON(v any) string {
	if v == nil {
		return "null"
	}
	// Not HTML-escaped here: the page's template escapes the text, so stored markup reads
	// as the agent wrote it ("<img …"), not as "\u003cimg …".
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

func num(v any) string {
	f, ok := v.(float64)
	if !ok {
		return str(v)
	}
	if f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', 4, 64)
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// query builds a query string from pairs, skipping empty values.
func query(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}
