package httpapi

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/working"
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

// commitInTrip sends the statements queue puts in a batch, the request's audit record (status:
// what the handler answers) and COMMIT in one round trip, when the request can commit in its
// write's (tripEntry). It reports false, having sent nothing, when it cannot: the caller then
// runs its write on the request's transaction, which finishWrite audits and commits as usual.
// When it reports true, the request is committed unless err is set (then nothing was, or,
// for a pg.CommitUnknownError, the COMMIT's answer was lost and it may have been).
func (s *Server) commitInTrip(ctx context.Context, r *Request, status int, queue func(*pgx.Batch)) (bool, error) {
	e, ok := s.tripEntry(ctx, r, status)
	if !ok {
		return false, nil
	}
	sql, args, err := audit.Insert(e)
	if err != nil {
		return false, nil
	}
	b := &pgx.Batch{}
	queue(b)
	b.Queue(sql, args...)
	return true, r.sess.CommitInTrip(ctx, b)
}

// sendStepWrite sends a step operation's decided write (jobs.StepWrite), which the handler
// answers 200 for, with its audit record and COMMIT when it can (commitInTrip): after the
// locks' round trip, a step write is then one more, where it was two (the write, then the
// record and COMMIT).
func (s *Server) sendStepWrite(ctx context.Context, r *Request, w *jobs.StepWrite) (jobs.Step, error) {
	inTrip, err := s.commitInTrip(ctx, r, http.StatusOK, w.Queue)
	switch {
	case !inTrip:
		return w.Send(ctx, r.Tx)
	case err != nil:
		return jobs.Step{}, err
	}
	return w.Result()
}

// sendState sends a state write's Postgres half (working.Persist; its Redis half is done),
// with its audit record and COMMIT when it can (commitInTrip): a state write is then one
// round trip, where it was two (the upsert, then the record and COMMIT). When the upsert does
// not commit, the Redis copy is dropped, and a version Postgres refused (the Redis copy was
// not at the durable version) is answered as a conflict, with nothing committed.
func (s *Server) sendState(ctx context.Context, r *Request, created bool, p *working.Persist) error {
	st := p.Statement()
	inTrip, err := s.commitInTrip(ctx, r, stateStatus(created), func(b *pgx.Batch) { b.Queue(st.SQL, st.Args...) })
	switch {
	case !inTrip:
		return p.Send(ctx, r.Tx)
	case err != nil:
		return p.Failed(ctx, err)
	}
	return nil
}
