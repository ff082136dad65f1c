package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/redisconn"
	"github.com/strata-mem/strata/internal/strata"
)

// authenticate resolves the bearer key. Missing or unknown → 401; database down → 503.
// From here on every Postgres call of the request is bounded by STRATA_STORE_TIMEOUT
// (pg.WithCallTimeout): a hung Postgres answers 503 within that, not at the request timeout;
// after one Redis call of the request timed out, its later ones fail at once
// (redisconn.WithRequest).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(redisconn.WithRequest(pg.WithCallTimeout(r.Context(), s.Options.StoreTimeout)))
		// The console calls the API in-process for a principal it resolved from its session
		// (internal/console): a context value no HTTP client can set.
		if p, ok := auth.InProcessPrincipal(r.Context()); ok {
			next.ServeHTTP(w, r.WithContext(httpops.WithCaller(r.Context(), p)))
			return
		}
		h := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || secret == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
			httpops.WriteProblem(w, r, http.StatusUnauthorized, "missing API key: send Authorization: Bearer <key>", nil)
			return
		}
		p, err := s.Keys.Authenticate(r.Context(), strings.TrimSpace(secret))
		if err != nil {
			var ue *strata.UnavailableError
			switch {
			case errors.Is(err, strata.ErrNotFound):
				w.Header().Set("WWW-Authenticate", `Bearer realm="strata", error="invalid_token"`)
				httpops.WriteProblem(w, r, http.StatusUnauthorized, "unknown or revoked API key", nil)
			case errors.As(err, &ue):
				httpops.WriteProblem(w, r, http.StatusServiceUnavailable, "postgres is unavailable; retry later", httpops.RetryAfter(2))
			default:
				s.Log.ErrorContext(r.Context(), "authenticating", "err", err, "request_id", httpops.RequestID(r.Context()))
				httpops.WriteProblem(w, r, http.StatusInternalServerError, httpops.InternalDetail, nil)
			}
			return
		}
		if via := auth.ViaOf(r.Context()); via != "" {
			p.Via = via // an in-process call of the MCP server or the Mem0 API
		}
		next.ServeHTTP(w, r.WithContext(httpops.WithCaller(r.Context(), p)))
	})
}

// recorder buffers a response so the unit of work can commit before anything is sent.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) flushTo(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(r.body.Bytes())
}

func isWrite(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete
}

// unitOfWork gives the request its Postgres session (one transaction, begun on first use,
// bound to the key's org). Reads stream and roll back. Writes are buffered: the transaction
// commits only when the handler answered < 400, and before the response is sent, so an
// acknowledged write is durable and a failed one left nothing. An Idempotency-Key is
// claimed and completed inside that same transaction.
func (s *Server) unitOfWork(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		sess := pg.NewSession(s.Pool, p.OrgID)
		ctx := pg.WithSession(r.Context(), sess)
		r = r.WithContext(ctx)
		if !isWrite(r.Method) {
			// A read's transaction only ends after the response: roll it back off the
			// request's path, so the client does not wait a round trip for it.
			defer func() {
				if sess.Started() {
					go sess.Rollback(context.WithoutCancel(ctx))
				} else {
					sess.Rollback(ctx) // nothing ran: no round trip, no goroutine
				}
			}()
			next.ServeHTTP(w, r)
			return
		}
		limit := s.bodyLimit(r)
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				httpops.WriteProblem(w, r, http.StatusRequestEntityTooLarge, s.tooLargeMessage(limit), nil)
				return
			}
			httpops.WriteProblem(w, r, http.StatusBadRequest, "could not read the request body", nil)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if d := strata.JSONDepth(body); d > s.Options.MaxJSONDepth {
			httpops.WriteProblem(w, r, http.StatusBadRequest, depthMessage(s.Options.MaxJSONDepth), nil,
				&huma.ErrorDetail{Location: "body", Message: depthMessage(s.Options.MaxJSONDepth)})
			return
		}
		if p, ok := strata.NULPath(body); ok {
			f := "body" + p
			httpops.WriteProblem(w, r, http.StatusUnprocessableEntity, "invalid "+f, nil,
				&huma.ErrorDetail{Location: f, Message: "must not contain NUL (\\u0000) characters"})
			return
		}
		op := s.operationID(r.Method, chi.RouteContext(ctx).RoutePattern())
		state := &uowState{commitTrip: commitTripOps[op]}
		ctx = context.WithValue(ctx, uowKey{}, state)
		r = r.WithContext(ctx)
		key := r.Header.Get("Idempotency-Key")
		if key != "" && r.Method != http.MethodDelete {
			if !idempotency.ValidKey(key) {
				httpops.WriteProblem(w, r, http.StatusBadRequest, "invalid Idempotency-Key", nil,
					&huma.ErrorDetail{Location: "header.Idempotency-Key", Message: "must be 1-255 visible ASCII characters"})
				return
			}
		}
		state.keyed = key != "" && r.Method != http.MethodDelete
		// Event appends may be written together with others (groupcommit.go).
		if s.serveGroupedAppend(w, r, p, body, key) {
			return
		}
		// Authorization comes before any claim or replay (issue 57): a key whose role may not
		// call the operation claims nothing and replays nothing; its handler answers the 403.
		// A read sent as POST (search, context, batch-get) is idempotent by itself: its answer is
		// not recorded, so no copy of what it served outlives a restriction or an erasure.
		idem := key != "" && r.Method != http.MethodDelete && s.mayCall(p, op) && !postReads[op]
		if !idem {
			key = "" // nothing claimed: nothing to complete
		}
		state.keyed = idem
		var claim idempotency.Claimant
		if idem {
			claim = idempotency.Claimant{Key: key, Method: r.Method, Path: r.URL.Path, UserID: subjectOf(r, body),
				APIKeyID: p.KeyID, Hash: idempotency.Fingerprint(r.Method, r.URL.Path, r.URL.RawQuery, body)}
		}
		if idem && claimInWrite[op] {
			// The claim travels in front of the handler's first statement (one round trip
			// fewer). Refused, the speculative run wrote nothing and answered nobody: the
			// claim is made again on its own below, which replays, refuses or waits.
			sess.AtBegin(idempotency.ClaimStatements(p.OrgID, claim, s.Options.IdempotencyTTL, s.Options.IdempotencyWait)...)
			refused := s.finishWrite(w, r, next, sess, p, key, body, state, true)
			if refused == nil {
				return
			}
			var pgErr *pgconn.PgError
			if errors.As(refused, &pgErr) && pgErr.Code == pg.CodeLockNotAvailable {
				httpops.WriteProblem(w, r, http.StatusConflict, "a request with this Idempotency-Key is still in progress; retry later", httpops.RetryAfter(1))
				return
			}
			var ue *strata.UnavailableError
			if !errors.As(refused, &pgErr) && errors.As(pg.Interpret(refused), &ue) {
				// Not refused: the connection failed (no COMMIT was sent, nothing was
				// written). Answer that now rather than spend another store timeout on it.
				s.writeErrFresh(w, r, ue)
				return
			}
			sess, state, ctx, r = s.renewUnit(ctx, r, p, body)
		}
		if idem {
			// The claim below runs on its own; a run that fails after it would have to claim
			// again: no statements in COMMIT's round trip on this path.
			state.commitTrip = false
			tx, err := sess.Tx(ctx)
			if err != nil {
				s.writeErr(w, r, err)
				return
			}
			replay, err := idempotency.Claim(ctx, tx, p.OrgID, claim, s.Options.IdempotencyTTL, s.Options.IdempotencyWait)
			switch {
			case errors.Is(err, idempotency.ErrOtherKey):
				// One answer whatever the other key's request was: nothing of it is told.
				sess.Rollback(ctx)
				httpops.WriteProblem(w, r, http.StatusUnprocessableEntity, "this Idempotency-Key cannot be used by this API key; use a new key for a new request", nil,
					&huma.ErrorDetail{Location: "header.Idempotency-Key", Message: "not available to this API key"})
				return
			case errors.Is(err, idempotency.ErrMismatch):
				sess.Rollback(ctx)
				httpops.WriteProblem(w, r, http.StatusUnprocessableEntity, "this Idempotency-Key was already used with a different request; use a new key for a new request", nil,
					&huma.ErrorDetail{Location: "header.Idempotency-Key", Message: "reused with a different method, path or body"})
				return
			case errors.Is(err, idempotency.ErrInProgress):
				sess.Rollback(ctx)
				httpops.WriteProblem(w, r, http.StatusConflict, "a request with this Idempotency-Key is still in progress; retry later", httpops.RetryAfter(1))
				return
			case err != nil:
				sess.Rollback(ctx)
				s.writeErr(w, r, err)
				return
			case replay != nil:
				// A recorded answer is the subject's data served again: not while they are
				// restricted (GDPR Art. 18), whoever asks. The write it answered stays done.
				if err := s.refuseRestrictedReplay(ctx, r, sess, p, op, claim.UserID); err != nil {
					sess.Rollback(ctx)
					s.writeErr(w, r, err)
					return
				}
				sess.Rollback(ctx)
				for k, v := range replay.Header {
					w.Header()[k] = v
				}
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(replay.Status)
				_, _ = w.Write(replay.Body)
				return
			}
		}
		if err := s.finishWrite(w, r, next, sess, p, key, body, state, state.commitTrip); err != nil {
			// The statements the handler handed to COMMIT's round trip failed (errCommitTrip):
			// nothing was written; run it again with its statements in their own round trips,
			// which answers exactly as a request that never tried (the same problem, or the
			// write, when another transaction created the thread's job meanwhile).
			sess, state, ctx, r = s.renewUnit(ctx, r, p, body)
			_ = s.finishWrite(w, r, next, sess, p, key, body, state, false)
		}
	})
}

// renewUnit abandons a speculative run (its transaction rolled back, nothing written to the
// client): the request runs again on a new session and unit-of-work state, its statements in
// their own round trips, with its body read anew.
func (s *Server) renewUnit(ctx context.Context, r *http.Request, p auth.Principal, body []byte) (*pg.Session, *uowState, context.Context, *http.Request) {
	sess := pg.NewSession(s.Pool, p.OrgID)
	state := &uowState{}
	if old, ok := ctx.Value(uowKey{}).(*uowState); ok {
		state.keyed = old.keyed
	}
	ctx = context.WithValue(pg.WithSession(ctx, sess), uowKey{}, state)
	r = r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body)) // the first run read it
	return sess, state, ctx, r
}

// postReads are the POST operations that only read (noFlushReads, and the key-value
// batch get): an Idempotency-Key on them is accepted and not recorded. A recorded answer
// would be a copy of what was served, keyed by neither the subject nor the record it came
// from, so that an erasure could not find it and a restriction would not cover it.
var postReads = map[string]bool{
	api.OpSearchMemories.OperationID: true, api.OpSimilarJobs.OperationID: true, api.OpGetContext.OperationID: true,
	api.OpBatchGetKv.OperationID: true,
}

// refuseRestrictedReplay answers strata.ErrRestricted (403) when a recorded answer about to
// be replayed names a restricted subject: the user its request named, or the owner of the
// job, session, asset, memory or graph entity its path names. Compliance operations replay
// as they are (they work on restricted subjects by design). An org that restricts nobody
// pays no round trip (the cached set answers).
func (s *Server) refuseRestrictedReplay(ctx context.Context, r *http.Request, sess *pg.Session, p auth.Principal, op, user string) error {
	if slices.Contains(s.roles[op], strata.RoleCompliance) {
		return nil
	}
	t := gdpr.Targets{Users: []string{user}, Jobs: []string{chi.URLParam(r, "job")},
		Sessions: []string{chi.URLParam(r, "session")}, Assets: []string{chi.URLParam(r, "asset")}}
	if id := chi.URLParam(r, "id"); id != "" {
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/memories/"):
			t.Memories = []string{id}
		case strings.HasPrefix(r.URL.Path, "/v1/graph/entities/"):
			t.Entities = []string{id}
		}
	}
	return s.Restrictions.RefuseTargets(ctx, sess, p.OrgID, t)
}

// claimInWrite are the operations whose Idempotency-Key claim rides in front of their first
// statement (pg.Session.AtBegin) instead of costing a round trip of its own. An operation
// belongs here only if its handler does nothing outside its transaction before its first
// statement (no Redis, no cache, no outside call with an effect) and always sends one: a
// refused claim must leave nothing behind but a rolled-back transaction. The LangGraph
// checkpointer's writes are checked (TestLangGraphSaverRoundTrips counts them;
// TestLangGraphIdempotentWrites replays them). A memory write embeds its text first — a call
// with no effect outside, which a replay pays once more — and its graph extraction runs
// only after its first statement, the claim, went through (TestMemoryRoundTrips,
// TestMemoryIdempotentWrites).
var claimInWrite = map[string]bool{
	api.OpPutLanggraphCheckpoint.OperationID: true, api.OpPutLanggraphWrites.OperationID: true,
	api.OpCreateMemory.OperationID: true,
}

// commitTripOps are the operations whose handlers may answer before their statements run
// and hand them to COMMIT's round trip (commitWith). Their handler must do nothing outside
// its transaction before commitWith (no Redis, no cache, no outside call with an effect):
// when a statement fails, the unit of work runs the request once more. The LangGraph
// checkpointer's writes with Prefer: return=minimal (TestLangGraphSaverRoundTrips counts
// them; TestLangGraphMinimalWrites checks replays, conflicts and the failure path).
var commitTripOps = map[string]bool{
	api.OpPutLanggraphCheckpoint.OperationID: true, api.OpPutLanggraphWrites.OperationID: true,
}

// errCommitTrip: the statements a handler handed to COMMIT's round trip (commitWith), or
// the audit or idempotency record behind them, failed on the server; nothing committed.
var errCommitTrip = errors.New("httpapi: a statement in the round trip of COMMIT failed")

// commitWith hands stmts to the unit of work, to run in the transaction's last round trip:
// BEGIN, the org, the Idempotency-Key claim, stmts, the audit record, the idempotency record
// and COMMIT, pipelined in one round trip — a write's whole cost in Postgres. It is for a
// handler whose response is known before its statements run (it reads no result of
// theirs) and whose statements fail on the server when the write must not happen (see
// strata_expect_rows): the handler answers as if they succeeded, and if one fails nothing
// commits, no audit or idempotency record included, and the unit of work runs the request
// once more, from the start, where commitWith reports false: the handler then runs its
// statements itself and answers as it always did, the same problem included. It reports
// false too for an operation not in commitTripOps and for one whose Idempotency-Key claim
// ran on its own.
func commitWith(ctx context.Context, stmts ...pg.Statement) bool {
	st, ok := ctx.Value(uowKey{}).(*uowState)
	sess := pg.SessionFrom(ctx)
	if !ok || !st.commitTrip || sess == nil || sess.OnReplica() {
		return false
	}
	for _, stmt := range stmts {
		sess.AtCommit(stmt.SQL, stmt.Args...)
	}
	st.inCommit = true
	return true
}

// finishWrite runs the write's handler into a buffer and, when it answered < 400, queues
// its audit record and idempotency record (key) and commits them with it in one round trip
// before the response is written. It returns the error of an AtBegin claim that refused
// the key, or errCommitTrip when statements handed to COMMIT's round trip failed; then it
// rolled back and wrote nothing to w.
func (s *Server) finishWrite(w http.ResponseWriter, r *http.Request, next http.Handler, sess *pg.Session, p auth.Principal,
	key string, body []byte, state *uowState, speculative bool) error {
	ctx := r.Context()
	// A speculative run (a claim in front, statements in COMMIT's round trip) writes its
	// headers into a copy, so that a run given up leaves w as it was; otherwise into w's own
	// (nothing is sent before flushTo).
	rec := &recorder{header: w.Header()}
	if speculative {
		rec.header = rec.header.Clone()
	}
	state.req, state.body = r, body // what a handler that commits itself audits (committrip.go)
	next.ServeHTTP(rec, r)
	if err := sess.BeginErr(); err != nil {
		sess.Rollback(ctx)
		return err
	}
	if rec.status >= 400 {
		sess.Rollback(ctx)
		rec.flushTo(w)
		return nil
	}
	if sess.CommittedInTrip() { // the handler committed, its audit record with it (committrip.go)
		rec.flushTo(w)
		return nil
	}
	if err := s.auditWrite(ctx, r, p, rec.status, body); err != nil {
		sess.Rollback(ctx)
		s.writeErrFresh(w, r, err)
		return nil
	}
	if key != "" && r.Method != http.MethodDelete {
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		stored := redact(rec.body.Bytes(), state.secretFields)
		if stored == nil {
			stored = []byte{} // no body (204): stored empty, not NULL
		}
		sql, args, err := idempotency.CompleteStatement(p.OrgID, key, status, rec.header, stored)
		if err != nil {
			sess.Rollback(ctx)
			s.writeErrFresh(w, r, err)
			return nil
		}
		sess.AtCommit(sql, args...)
	}
	if err := sess.Commit(ctx); err != nil {
		var cu *pg.CommitUnknownError
		if berr := sess.BeginErr(); berr != nil && !errors.As(err, &cu) { // the claim rode with COMMIT (no statement ran)
			sess.Rollback(ctx)
			return berr
		}
		sess.Rollback(ctx)
		var ue *strata.UnavailableError
		if state.inCommit && !errors.As(err, &ue) { // the server refused a statement: it did not commit
			return errCommitTrip
		}
		s.writeErrFresh(w, r, err)
		return nil
	}
	rec.flushTo(w)
	return nil
}

type uowKey struct{}

// uowState is what a handler tells the unit of work about its response.
type uowState struct {
	secretFields []string
	// commitTrip: the handler may hand its statements to COMMIT's round trip (commitWith);
	// inCommit: it did.
	commitTrip, inCommit bool
	// keyed: the request's Idempotency-Key is claimed and recorded (a retry with it learns
	// the outcome of a commit whose answer was lost).
	keyed bool
	// req and body are the write's request and body, for a handler that commits in its own
	// round trip with its audit record (committrip.go).
	req  *http.Request
	body []byte
}

// secretInResponse marks top-level response fields that must never be stored in an
// idempotency record (an API key's secret): a replay answers them as "(shown once)".
func secretInResponse(ctx context.Context, fields ...string) {
	if st, ok := ctx.Value(uowKey{}).(*uowState); ok {
		st.secretFields = append(st.secretFields, fields...)
	}
}

func redact(body []byte, fields []string) []byte {
	if len(fields) == 0 {
		return body
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	for _, f := range fields {
		if _, ok := m[f]; ok {
			m[f] = json.RawMessage(`"(shown once; not stored)"`)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// auditWrite queues the audit record of a successful write in the request's transaction,
// so the write and its record commit together (the INSERT travels with COMMIT, in one round
// trip). It records ids, never bodies.
func (s *Server) auditWrite(ctx context.Context, r *http.Request, p auth.Principal, status int, body []byte) error {
	sess := pg.SessionFrom(ctx)
	if sess == nil {
		return errors.New("httpapi: no session in context")
	}
	e, err := s.auditEntry(ctx, r, p, status, body)
	if err != nil {
		return err
	}
	sql, args, err := audit.Insert(e)
	if err != nil {
		return err
	}
	sess.AtCommit(sql, args...)
	return nil
}

// auditEntry is the audit record of a successful write: ids from the route and the body,
// never the body itself.
func (s *Server) auditEntry(ctx context.Context, r *http.Request, p auth.Principal, status int, body []byte) (audit.Entry, error) {
	rc := chi.RouteContext(ctx)
	route := rc.RoutePattern()
	ids := topFields(r, body, "agent_id", "user_id") // one parse of the body for both
	if status == 0 {
		status = http.StatusOK
	}
	return s.Pseudo.RequestEntry(audit.Request{OrgID: p.OrgID, KeyID: p.KeyID, Role: string(p.Role),
		AgentID: ids[0], UserID: ids[1], Action: s.operationID(r.Method, route), Method: r.Method, Route: route,
		ParamKeys: rc.URLParams.Keys, ParamValues: rc.URLParams.Values, RequestID: httpops.RequestID(ctx), Status: status,
		Via: p.Via}), nil
}

// operation finds the operation of a method and route pattern (nil: not an API operation).
func (s *Server) operation(method, route string) *huma.Operation {
	s.opOnce.Do(func() {
		s.ops = map[string]*huma.Operation{}
		for path, item := range s.api.OpenAPI().Paths {
			for m, op := range map[string]*huma.Operation{"GET": item.Get, "POST": item.Post, "PUT": item.Put,
				"PATCH": item.Patch, "DELETE": item.Delete} {
				if op != nil {
					s.ops[m+" "+path] = op
				}
			}
		}
	})
	return s.ops[method+" "+route]
}

// operationID maps a method and route pattern to its OpenAPI operation id.
func (s *Server) operationID(method, route string) string {
	if op := s.operation(method, route); op != nil {
		return op.OperationID
	}
	return strings.ToLower(method) + " " + route
}

// bodyLimit is the most a request body may hold: STRATA_MAX_BODY_BYTES, or more where an
// operation declares it (batch writes).
func (s *Server) bodyLimit(r *http.Request) int64 {
	if op := s.operation(r.Method, chi.RouteContext(r.Context()).RoutePattern()); op != nil {
		return max(op.MaxBodyBytes, s.Options.MaxBodyBytes)
	}
	return s.Options.MaxBodyBytes
}

// topFields reads top-level string fields of a JSON body (parsed once), or the query
// parameters of the same names.
func topFields(r *http.Request, body []byte, names ...string) []string {
	out := make([]string, len(names))
	q := r.URL.Query()
	var top map[string]json.RawMessage
	parsed := false
	for i, name := range names {
		if v := q.Get(name); v != "" {
			out[i] = v
			continue
		}
		if !parsed {
			parsed = true
			if json.Unmarshal(body, &top) != nil {
				top = nil
			}
		}
		var v string
		if raw, ok := top[name]; ok && json.Unmarshal(raw, &v) == nil {
			out[i] = v
		}
	}
	return out
}

// subjectOf finds the data subject a write names (user_id in the query or at the top of
// a JSON body), so that erasure can find the idempotency record that holds its response.
func subjectOf(r *http.Request, body []byte) string { return topFields(r, body, "user_id")[0] }

// writeErr writes err as a problem from middleware.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	herr := s.problem(r.Context(), err)
	var hdr http.Header
	var he huma.HeadersError
	if errors.As(herr, &he) {
		hdr = he.GetHeaders()
	}
	var se huma.StatusError
	if !errors.As(herr, &se) {
		httpops.WriteProblem(w, r, http.StatusInternalServerError, "internal error", nil)
		return
	}
	em, _ := se.(*huma.ErrorModel)
	if em != nil && em.Type != "" { // a typed problem (commitUnknownProblem) keeps its type
		for k, v := range hdr {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", httpops.ProblemContentType)
		w.WriteHeader(em.Status)
		_ = json.NewEncoder(w).Encode(em)
		return
	}
	var details []*huma.ErrorDetail
	detail := se.Error()
	if em != nil {
		details, detail = em.Errors, em.Detail
	}
	httpops.WriteProblem(w, r, se.GetStatus(), detail, hdr, details...)
}

// writeErrFresh is writeErr after a buffered response was discarded: it clears the headers
// the handler had set (ETag, Location) so they do not describe a write that did not happen.
func (s *Server) writeErrFresh(w http.ResponseWriter, r *http.Request, err error) {
	for _, h := range []string{"Etag", "Location", "Content-Location", "Content-Type", "Content-Length"} {
		w.Header().Del(h)
	}
	s.writeErr(w, r, err)
}

// tooLargeMessage says what to do about a body over limit: split it, or (when the limit is
// the server's setting) raise STRATA_MAX_BODY_BYTES.
func (s *Server) tooLargeMessage(limit int64) string {
	msg := "request body is larger than " + strconv.FormatInt(limit, 10) + " bytes: split it into several smaller requests " +
		"(fewer items per batch, or long text as several memories or events)"
	if limit <= s.Options.MaxBodyBytes {
		msg += ", or raise the server's limit with STRATA_MAX_BODY_BYTES"
	} else {
		msg += "; this operation's own limit is above the server's STRATA_MAX_BODY_BYTES and does not change with it"
	}
	return msg
}

func depthMessage(max int) string {
	return fmt.Sprintf("JSON is nested deeper than %d levels", max)
}
