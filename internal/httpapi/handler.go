package httpapi

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Request is what the shared wrapper hands every handler: the request's Postgres
// transaction (BEGIN travels with its first statement; a handler that never touches
// Postgres never begins one), the caller's org and the caller. The unit of work commits it
// when the handler answered < 400, before the response leaves.
type Request struct {
	// Tx is the request's transaction, bound to Org for row-level security.
	Tx     pgx.Tx
	Org    string
	Caller auth.Principal
	sess   *pg.Session
	// emitted: an event is queued for the commit, and its wake-up after it (Server.emit).
	emitted bool
}

// AfterCommit runs f once the request's transaction has committed (cache invalidation,
// side effects in other stores that must not happen unless Postgres kept the write).
func (r *Request) AfterCommit(f func()) { r.sess.AfterCommit(f) }

// AtCommit queues a statement that runs in COMMIT's round trip (see pg.Session.AtCommit).
func (r *Request) AtCommit(sql string, args ...any) { r.sess.AtCommit(sql, args...) }

// Scope is the caller's org with the given levels.
func (r *Request) Scope(user, agent, session string) strata.Scope {
	return strata.Scope{OrgID: r.Org, UserID: user, AgentID: agent, SessionID: session}
}

// Session is the request's unit of work, for the few handlers that reserve a second
// connection or read the restriction cache.
func (r *Request) Session() *pg.Session { return r.sess }

// newRequest is the request's view for a handler: its session (from the unit of work) and
// the caller.
func newRequest(ctx context.Context, p auth.Principal) (*Request, error) {
	sess := pg.SessionFrom(ctx)
	if sess == nil {
		return nil, errors.New("httpapi: no session in context (route not behind the unit of work)")
	}
	tx, err := sess.Tx(ctx)
	if err != nil {
		return nil, err
	}
	return &Request{Tx: tx, Org: p.OrgID, Caller: p, sess: sess}, nil
}

// Handler is the one handler shape: the decoded input in, the answer out, errors as tier
// errors (strata sentinels, *strata.FieldError with bare field names) that the wrapper maps.
type Handler[I, O any] func(ctx context.Context, r *Request, in *I) (*O, error)

// documentedErrors are the statuses every /v1 operation may answer.
var documentedErrors = []int{400, 401, 403, 404, 409, 413, 415, 422, 429, 503}

var (
	agentRoles      = []strata.Role{strata.RoleAgent}
	complianceRoles = []strata.Role{strata.RoleCompliance}
	adminRoles      = []strata.Role{strata.RoleAdmin}
)

// rolesNeeded names the key an operation needs, for its 403: "an agent key (or an admin
// key)"; admin may do everything.
func rolesNeeded(roles []strata.Role) string {
	var names []string
	for _, r := range roles {
		if r != strata.RoleAdmin {
			names = append(names, string(r))
		}
	}
	if len(names) == 0 {
		return "an admin key"
	}
	article := "a "
	if strings.ContainsRune("aeiou", rune(names[0][0])) {
		article = "an "
	}
	return article + strings.Join(names, " or ") + " key (or an admin key)"
}

// mayCall reports whether p's role may call the operation: the check the operation's
// handler makes, for the unit of work to make before it claims or replays an
// Idempotency-Key. An operation not registered through handle: no.
func (s *Server) mayCall(p auth.Principal, opID string) bool {
	roles, ok := s.roles[opID]
	return ok && p.Can(roles...)
}

// handle registers one operation: callable by roles (admin may do everything), serving
// what reads declares of data subjects' data (enforced here, GDPR Art. 18), answered by h.
func handle[I, O any](s *Server, roles []strata.Role, op huma.Operation, reads Reads, h Handler[I, O]) {
	guard := newSubjectGuard[I, O](op.OperationID, reads)
	locs := paramLocations(reflect.TypeFor[I]())
	// The documentation is a package-level value and huma writes into its response maps as it
	// registers: each registration gets its own copy (tests run several servers at once).
	op.Responses = cloneResponses(op.Responses)
	op.Errors = append(op.Errors[:len(op.Errors):len(op.Errors)], documentedErrors...)
	if op.MaxBodyBytes == 0 {
		op.MaxBodyBytes = s.Options.MaxBodyBytes
	}
	s.roles[op.OperationID] = roles // the unit of work checks them before any Idempotency-Key replay
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		p, ok := auth.FromContext(ctx)
		if !ok || !p.Can(roles...) {
			return nil, huma.Error403Forbidden("this API key's role (" + string(p.Role) + ") may not call " + op.OperationID +
				": it needs " + rolesNeeded(roles))
		}
		s.routeRead(ctx, op.OperationID) // a read replica, if the operation may use one (replicas.go)
		if noFlushReads[op.OperationID] && !s.Options.SyncReadCommits {
			if sess := pg.SessionFrom(ctx); sess != nil {
				sess.NoFlushCommit()
			}
		}
		if oneTripReads[op.OperationID] {
			if sess := pg.SessionFrom(ctx); sess != nil {
				sess.ReadInOneTrip()
			}
		}
		run := func() (*O, error) {
			r, err := newRequest(ctx, p)
			if err != nil {
				return nil, err
			}
			if err := guard.before(ctx, s, r, in); err != nil {
				return nil, err
			}
			out, err := h(ctx, r, in)
			if err == nil {
				err = guard.after(ctx, s, r, in, out)
			}
			return out, err
		}
		out, err := run()
		if err != nil && s.retryOnPrimary(ctx, err) {
			out, err = run()
		}
		if err != nil {
			return nil, s.problemAt(ctx, err, locs)
		}
		return out, nil
	})
}

// cloneResponses copies what huma mutates of declared responses (the maps and the
// response and media-type values; schemas are only read).
func cloneResponses(rs map[string]*huma.Response) map[string]*huma.Response {
	if rs == nil {
		return nil
	}
	out := make(map[string]*huma.Response, len(rs))
	for code, r := range rs {
		c := *r
		if r.Content != nil {
			c.Content = make(map[string]*huma.MediaType, len(r.Content))
			for ct, mt := range r.Content {
				m := *mt
				c.Content[ct] = &m
			}
		}
		if r.Headers != nil {
			c.Headers = maps.Clone(r.Headers)
		}
		out[code] = &c
	}
	return out
}

// paramLocations maps the names of I's path, query and header parameters to their
// location, so that a tier's bare field name ("session", "limit") becomes "path.session" or
// "query.limit" in the problem; any other name is a body field.
func paramLocations(t reflect.Type) map[string]string {
	locs := map[string]string{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			for _, in := range []string{"path", "query", "header"} {
				if name := f.Tag.Get(in); name != "" {
					locs[name] = in
				}
			}
		}
	}
	walk(t)
	return locs
}

// locate prefixes a tier's bare field name with where the field travelled. "" is the body
// itself and a name that starts with an index ("[3].op") names an element of an array body;
// "body" alone is the whole body; a bare "query" (memory search's body field) is a field like
// any other.
func locate(field string, locs map[string]string) string {
	if field == "" || strings.HasPrefix(field, "[") {
		return "body" + field
	}
	if field == "body" {
		return field
	}
	for _, p := range []string{"body", "path", "query", "header"} {
		if strings.HasPrefix(field, p+".") || strings.HasPrefix(field, p+"[") {
			return field
		}
	}
	root := field
	if i := strings.IndexAny(root, ".["); i >= 0 {
		root = root[:i]
	}
	if in, ok := locs[root]; ok {
		return in + "." + field
	}
	return "body." + field
}
