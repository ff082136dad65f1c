package httpapi

import (
	"context"
	"net/http"

	"github.com/strata-mem/strata/internal/audit"
)

// tripAuditStatus is the audit record's status of a memory write that commits in its own
// round trip, decided in its statement: 201 when it inserted a memory (the CTE ins has the
// row), 200 when it found a duplicate — the status the handler answers.
const tripAuditStatus = `CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 201 ELSE 200 END`

// tripAudit returns the audit record of the request's write as a rider of its statement
// (semantic.NewMemory.Rider) — the record finishWrite would queue with COMMIT, the same
// entry (auditEntry), its status computed in the statement — when the write can commit in
// its own round trip: the request carries no Idempotency-Key (whose record needs the
// response body, which only exists after the statement ran) and its session has nothing
// queued at BEGIN or COMMIT (pg.Session.CanCommitInTrip). Otherwise nil: the write runs
// in the request's transaction and finishWrite audits and commits it as usual.
func (s *Server) tripAudit(ctx context.Context, r *Request) func(arg func(any) string) string {
	st, _ := ctx.Value(uowKey{}).(*uowState)
	if st == nil || st.req == nil || st.req.Header.Get("Idempotency-Key") != "" || !r.sess.CanCommitInTrip() {
		return nil
	}
	e, err := s.auditEntry(st.req.Context(), st.req, r.Caller, http.StatusCreated, st.body)
	if err != nil {
		return nil
	}
	rider, err := audit.InsertSelect(e, tripAuditStatus)
	if err != nil {
		return nil
	}
	return rider
}
