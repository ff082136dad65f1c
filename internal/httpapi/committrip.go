package httpapi

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/jobs"
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
	e, ok := s.tripEntry(ctx, r, http.StatusCreated)
	if !ok {
		return nil
	}
	rider, err := audit.InsertSelect(e, tripAuditStatus)
	if err != nil {
		return nil
	}
	return rider
}

// tripEntry is the audit record (answering status) of the request's write when the write
// can commit in its own round trip: the request carries no Idempotency-Key (whose record
// needs the response body, which only exists after the write ran) and its session has
// nothing queued at BEGIN or COMMIT (pg.Session.CanCommitInTrip). ok is false otherwise.
func (s *Server) tripEntry(ctx context.Context, r *Request, status int) (e audit.Entry, ok bool) {
	st, _ := ctx.Value(uowKey{}).(*uowState)
	if st == nil || st.req == nil || st.req.Header.Get("Idempotency-Key") != "" || !r.sess.CanCommitInTrip() {
		return audit.Entry{}, false
	}
	e, err := s.auditEntry(st.req.Context(), st.req, r.Caller, status, st.body)
	return e, err == nil
}

// sendStepWrite sends a step operation's decided write (jobs.StepWrite), which the handler
// answers 200 for: with the request's audit record and COMMIT in the same round trip when it
// can (tripEntry) — after the locks' round trip, a step write is then one more, where it was
// two (the write, then the record and COMMIT) — else on the request's transaction, which
// finishWrite audits and commits as usual.
func (s *Server) sendStepWrite(ctx context.Context, r *Request, w *jobs.StepWrite) (jobs.Step, error) {
	e, ok := s.tripEntry(ctx, r, http.StatusOK)
	var sql string
	var args []any
	var err error
	if ok {
		sql, args, err = audit.Insert(e)
	}
	if !ok || err != nil {
		return w.Send(ctx, r.Tx)
	}
	b := &pgx.Batch{}
	w.Queue(b)
	b.Queue(sql, args...)
	if err := r.sess.CommitInTrip(ctx, b); err != nil {
		return jobs.Step{}, err
	}
	return w.Result()
}
