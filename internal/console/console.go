// Package console is Strata's web console for compliance staff and operators, served at
// /console (docs/console.md). Pages are rendered on the server with html/template from
// templates embedded in the binary, with one small embedded script (times in the viewer's
// zone, live erasure progress, checkpoint diffs); nothing is fetched from anywhere else.
//
// Sign-in exchanges an API key for a server-side session (auth.Store.StartSession): the
// cookie carries a random secret, the table its hash and the key's id. Every action is a
// request through the API itself, in-process (Deps.API), on behalf of the session's
// principal: the same handlers, role checks, Art. 18 declarations, idempotency (each form
// carries its own Idempotency-Key) and audit records (marked via=console).
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/strata"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Deps is what the console is given (internal/app composes it).
type Deps struct {
	// API is the /v1 API as an in-process handler (httpapi mounts the console with it).
	API  http.Handler
	Keys *auth.Store
	Log  *slog.Logger
	Now  func() time.Time // nil: time.Now
	// Idle ends a session after this long without a request; Absolute after this long at all.
	Idle, Absolute time.Duration
}

// Console is the web console (an http.Handler mounted at /console).
type Console struct {
	d      Deps
	pages  *pages
	router chi.Router
}

const (
	cookieName      = "strata_console"
	loginCookieName = "strata_console_login"
	base            = "/console"
)

// New builds the console.
func New(d Deps) *Console {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Idle <= 0 {
		d.Idle = 30 * time.Minute
	}
	if d.Absolute <= 0 {
		d.Absolute = 12 * time.Hour
	}
	c := &Console{d: d, pages: mustParse()}
	c.routes()
	return c
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	c.router.ServeHTTP(w, r)
}

// csp: nothing inline, nothing from elsewhere, never framed.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (c *Console) routes() {
	r := chi.NewRouter()
	c.router = r
	static, _ := fs.Sub(staticFS, "static")
	r.Handle(base+"/static/*", http.StripPrefix(base+"/static/", staticHandler(static)))
	r.Get(base+"/login", c.loginPage)
	r.Post(base+"/login", c.login)
	r.Group(func(r chi.Router) {
		r.Use(c.session)
		r.Get(base, c.home)
		r.Get(base+"/", c.home)
		r.Post(base+"/logout", c.logout)

		// Compliance (compliance.go).
		r.Group(func(r chi.Router) {
			r.Use(c.requireRole(strata.RoleCompliance))
			r.Get(base+"/subjects", c.subjectPage)
			r.Post(base+"/subjects/restrict", c.restrict)
			r.Post(base+"/subjects/unrestrict", c.unrestrict)
			r.Get(base+"/subjects/export", c.export)
			r.Post(base+"/rectify", c.rectify)
			r.Get(base+"/erasures", c.erasuresPage)
			r.Post(base+"/erasures", c.createErasure)
			r.Get(base+"/erasures/{id}", c.erasurePage)
			r.Get(base+"/erasures/{id}/status", c.erasureStatus)
			r.Get(base+"/audit", c.auditPage)
			r.Get(base+"/audit/verify", c.verifyPage)
		})
		// Operators (operator.go).
		r.Group(func(r chi.Router) {
			r.Use(c.requireRole(strata.RoleAgent))
			r.Get(base+"/jobs", c.jobsPage)
			r.Get(base+"/jobs/{job}", c.jobPage)
			r.Get(base+"/memories", c.memoriesPage)
			r.Get(base+"/memories/{id}", c.memoryPage)
			r.Get(base+"/kv", c.kvPage)
		})
		// Admin (admin.go).
		r.Group(func(r chi.Router) {
			r.Use(c.requireRole(strata.RoleAdmin))
			r.Get(base+"/quarantines", c.quarantinesPage)
			r.Post(base+"/quarantines", c.createQuarantine)
			r.Post(base+"/quarantines/{id}/{action}", c.quarantineAction)
			r.Get(base+"/policies", c.policiesPage)
			r.Post(base+"/policies", c.putPolicies)
			r.Post(base+"/policies/preview", c.previewEviction)
			r.Post(base+"/policies/run", c.runEviction)
			r.Get(base+"/keys", c.keysPage)
			r.Post(base+"/keys", c.createKey)
			r.Post(base+"/keys/{id}/revoke", c.revokeKey)
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", &view{Title: "Not found",
			Problem: &problem{Status: 404, Detail: "There is no console page at " + r.URL.Path + "."}})
	})
}

func staticHandler(f fs.FS) http.Handler {
	fsrv := http.FileServer(http.FS(f))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		fsrv.ServeHTTP(w, r)
	})
}

// ---- sessions ------------------------------------------------------------------------------

type ctxKey struct{}

// who is the signed-in caller of a console request.
type who struct {
	P      auth.Principal
	Secret string // the session cookie's secret (the CSRF token is derived from it)
	CSRF   string
	ReqID  string // this request's X-Request-Id (the in-process API calls carry it too)
}

func whoFrom(ctx context.Context) *who {
	w, _ := ctx.Value(ctxKey{}).(*who)
	return w
}

// session resolves the cookie to its session or sends the browser to sign in. A POST must
// carry the session's CSRF token.
func (c *Console) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(cookieName)
		if err != nil || ck.Value == "" {
			c.toLogin(w, r, "")
			return
		}
		p, _, err := c.d.Keys.Session(r.Context(), ck.Value, c.d.Idle, c.d.Now())
		if err != nil {
			if !errors.Is(err, strata.ErrNotFound) {
				c.d.Log.ErrorContext(r.Context(), "console session lookup", "err", err)
				c.render(w, r, http.StatusServiceUnavailable, "error", &view{Title: "Unavailable",
					Problem: &problem{Status: 503, Detail: "Sessions cannot be checked right now (is Postgres up?); retry shortly."}})
				return
			}
			clearCookie(w, r, cookieName)
			c.toLogin(w, r, "expired")
			return
		}
		me := &who{P: p, Secret: ck.Value, CSRF: csrfToken(ck.Value, "session"), ReqID: w.Header().Get("X-Request-Id")}
		if r.Method == http.MethodPost && !validCSRF(r, me.CSRF) {
			c.render(w, r, http.StatusForbidden, "error", &view{Title: "Form refused", Me: me,
				Problem: &problem{Status: 403, Detail: "This form was not sent with its security token (CSRF): reload the page and submit it again."}})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, me)))
	})
}

func (c *Console) toLogin(w http.ResponseWriter, r *http.Request, why string) {
	q := url.Values{}
	if r.Method == http.MethodGet && r.URL.Path != base && r.URL.Path != base+"/" {
		q.Set("next", r.URL.RequestURI())
	}
	if why != "" {
		q.Set("why", why)
	}
	u := base + "/login"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// requireRole shows a page only to keys of role (admin sees everything).
func (c *Console) requireRole(role strata.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			me := whoFrom(r.Context())
			if !me.P.Can(role) {
				c.render(w, r, http.StatusForbidden, "error", &view{Title: "Not for this key", Me: me,
					Problem: &problem{Status: 403, Detail: "This page needs a " + string(role) + " key; you are signed in with a " +
						string(me.P.Role) + " key."}})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func newSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfToken derives a form token from a cookie's secret: it can only be computed by whoever
// holds the cookie, and the server stores nothing more.
func csrfToken(secret, purpose string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("strata-console-csrf/" + purpose))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func validCSRF(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// overTLS: the request came over TLS, here or at a proxy that says so (a client claiming it
// only makes its own cookie stricter).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: base, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: int(maxAge.Seconds())})
}

func clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: base, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: -1})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	pre := newSecret()
	setCookie(w, r, loginCookieName, pre, 30*time.Minute)
	v := &view{Title: "Sign in", CSRF: csrfToken(pre, "login"), Next: safeNext(r.URL.Query().Get("next"))}
	switch r.URL.Query().Get("why") {
	case "expired":
		v.Notice = "Your session has ended (expired, signed out or its key was revoked): sign in again."
	case "out":
		v.Notice = "Signed out."
	}
	c.render(w, r, http.StatusOK, "login", v)
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	pre, err := r.Cookie(loginCookieName)
	if err != nil || !validCSRF(r, csrfToken(pre.Value, "login")) {
		c.render(w, r, http.StatusForbidden, "login", &view{Title: "Sign in",
			Problem: &problem{Status: 403, Detail: "The sign-in form was not sent with its security token: reload the page and try again."}})
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("key"))
	next := safeNext(r.PostFormValue("next"))
	again := func(status int, p *problem) {
		fresh := newSecret()
		setCookie(w, r, loginCookieName, fresh, 30*time.Minute)
		c.render(w, r, status, "login", &view{Title: "Sign in", CSRF: csrfToken(fresh, "login"), Next: next, Problem: p})
	}
	if secret == "" {
		again(http.StatusUnprocessableEntity, &problem{Status: 422, Detail: "Enter an API key.",
			Errors: []fieldError{{Location: "key", Message: "is required"}}})
		return
	}
	p, err := c.d.Keys.Authenticate(r.Context(), secret)
	if err != nil {
		if errors.Is(err, strata.ErrNotFound) {
			again(http.StatusUnauthorized, &problem{Status: 401, Detail: "Unknown or revoked API key.",
				Errors: []fieldError{{Location: "key", Message: "is not a live API key"}}})
			return
		}
		c.d.Log.ErrorContext(r.Context(), "console sign-in", "err", err)
		again(http.StatusServiceUnavailable, &problem{Status: 503, Detail: "Keys cannot be checked right now; retry shortly."})
		return
	}
	sid, _, err := c.d.Keys.StartSession(r.Context(), p, c.d.Absolute, c.d.Idle, c.d.Now())
	if err != nil {
		c.d.Log.ErrorContext(r.Context(), "console session start", "err", err)
		again(http.StatusServiceUnavailable, &problem{Status: 503, Detail: "A session cannot be started right now; retry shortly."})
		return
	}
	clearCookie(w, r, loginCookieName)
	setCookie(w, r, cookieName, sid, c.d.Absolute)
	if next == "" {
		next = base + "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(n string) string {
	if !strings.HasPrefix(n, base+"/") || strings.HasPrefix(n, "//") || strings.Contains(n, "\\") {
		return ""
	}
	return n
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	me := whoFrom(r.Context())
	if err := c.d.Keys.EndSession(r.Context(), me.Secret); err != nil {
		c.d.Log.ErrorContext(r.Context(), "console logout", "err", err)
	}
	clearCookie(w, r, cookieName)
	http.Redirect(w, r, base+"/login?why=out", http.StatusSeeOther)
}

// home sends each role to its first page.
func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	me := whoFrom(r.Context())
	switch me.P.Role {
	case strata.RoleCompliance:
		http.Redirect(w, r, base+"/subjects", http.StatusSeeOther)
	default:
		http.Redirect(w, r, base+"/jobs", http.StatusSeeOther)
	}
}
