package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/groupcommit"
	"github.com/strata-mem/strata/internal/idempotency"
)

// appendRoute is the route group commit (internal/groupcommit) serves.
const appendRoute = "/v1/jobs/{job}/events"

// serveGroupedAppend serves an event append through group commit and reports whether it
// did; false: nothing was written to w, the single-request path answers as it always does.
// Only appends that path would accept join (valid body and job id, a role that may append,
// no per-event idempotency keys, plain JSON in and out). STRATA_GROUP_COMMIT=false: off.
func (s *Server) serveGroupedAppend(w http.ResponseWriter, r *http.Request, p auth.Principal, body []byte, key string) bool {
	if s.groups == nil || r.Method != http.MethodPost || chi.RouteContext(r.Context()).RoutePattern() != appendRoute ||
		!p.Can(agentRoles...) || !plainJSON(r) {
		return false
	}
	evs, array, err := (&api.AppendBody{Raw: body}).Decode()
	if err != nil {
		return false
	}
	item, ok := s.Events.NewGroupItem(chi.URLParam(r, "job"), evs)
	if !ok {
		return false
	}
	// An append acts on its job: a restricted subject's job goes the single-request path,
	// which refuses it (ActsOnSubjectData). No round trip for an org that restricts nobody.
	if s.Restrictions.RefuseTargets(r.Context(), nil, p.OrgID, gdpr.Targets{Jobs: []string{chi.URLParam(r, "job")}}) != nil {
		return false
	}
	entry, err := s.auditEntry(r.Context(), r, p, http.StatusCreated, body)
	if err != nil {
		return false
	}
	m := &groupcommit.Member{Item: item, Audit: entry, Response: func(it *episodic.GroupItem) (idempotency.Completion, error) {
		res := api.AppendResult{Items: it.Out} // exactly as the single-request path encodes it
		if !array {
			res = api.AppendResult{One: &it.Out[0]}
		}
		var buf bytes.Buffer
		err := huma.DefaultJSONFormat.Marshal(&buf, res)
		return idempotency.Completion{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: buf.Bytes()}, err
	}}
	m.Deadline, _ = r.Context().Deadline()
	if key != "" {
		m.Claim = &idempotency.Claimant{Key: key, Method: r.Method, Path: r.URL.Path, UserID: subjectOf(r, body), APIKeyID: p.KeyID,
			Hash: idempotency.Fingerprint(r.Method, r.URL.Path, r.URL.RawQuery, body)}
	}
	s.groups.Submit(r.Context(), p.OrgID, m)
	switch {
	case errors.Is(m.Err, groupcommit.ErrFallback):
		return false
	case m.Err != nil:
		s.writeErr(w, r, m.Err)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(m.Body)
	return true
}

// plainJSON reports whether the request sends JSON (or says nothing) and accepts JSON, so
// the response is what content negotiation would pick anyway.
func plainJSON(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return false
	}
	a := r.Header.Get("Accept")
	return a == "" || a == "*/*" || strings.Contains(a, "application/json")
}
