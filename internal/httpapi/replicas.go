package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Read replicas (STRATA_DATABASE_REPLICA_URL, docs/scaling.md "Read replicas"). Only the
// operations below may read from a standby: each reads through its request's transaction
// (or, for the export, a snapshot of its own) and writes nothing there; what they queue to
// commit (the audit row of a POST, an idempotency record) commits on the primary. Every
// other operation — the durable-job protocol, working state, key-value (its cache fills
// must not come from a lagging copy), every write — runs on the primary.
var replicaReads = map[string]bool{
	api.OpSearchMemories.OperationID: true, api.OpSimilarJobs.OperationID: true, // semantic search
	api.OpExportSubject.OperationID: true,                                      // GDPR Art. 15 export
	api.OpListAudit.OperationID:     true, api.OpExportAudit.OperationID: true, // audit reads
	api.OpListJobs.OperationID: true, api.OpListEvents.OperationID: true, api.OpListCheckpoints.OperationID: true,
	api.OpListSteps.OperationID: true, api.OpListHandoffs.OperationID: true, api.OpListAssetVersions.OperationID: true,
	api.OpMemoryHistory.OperationID: true, api.OpListErasures.OperationID: true,
	api.OpListLanggraphCheckpoints.OperationID: true, api.OpSearchLanggraphCheckpoints.OperationID: true,
}

// noFlushReads are the POST operations that only read: their commit carries nothing but the
// read's bookkeeping (audit row, served-memories log, access counts, an idempotency record),
// so it does not wait for the WAL flush unless STRATA_SYNC_READ_COMMITS is set
// (pg.Session.NoFlushCommit). GET reads never commit at all.
var noFlushReads = map[string]bool{
	api.OpSearchMemories.OperationID: true, api.OpSimilarJobs.OperationID: true, api.OpGetContext.OperationID: true,
}

// oneTripReads are GET operations whose every statement stands alone (one query, and at most
// the subject guard's restriction check beside it): each is a transaction of its own that
// commits in its round trip, so nothing is rolled back after the response
// (pg.Session.ReadInOneTrip), and the connection goes back to the pool as soon as the rows
// are read, before the response is encoded. LangGraph's getTuple, on every step of a graph;
// a job's resume (its one batch: the job, checkpoint, steps, handoffs, attempts and the
// newest events), at the start of every session and after every crash; and the durable-job
// protocol's one-statement reads an agent makes between steps: its job, a step, a
// checkpoint, whether an edit was applied (TestOneTripReads). Reads of two statements or
// more (the event log reads the job's fork view first) stay one transaction: as one-trip
// reads they would give their connection back between statements and, on a busy pool,
// wait for one again in the middle of the request.
var oneTripReads = map[string]bool{
	api.OpGetLanggraphCheckpoint.OperationID: true, api.OpResumeJob.OperationID: true,
	api.OpGetJob.OperationID: true, api.OpGetStep.OperationID: true, api.OpGetCheckpoint.OperationID: true,
	api.OpEventApplied.OperationID: true,
}

// ConsistencyHeader set to "strong" sends a request's reads to the primary.
const ConsistencyHeader = "X-Strata-Consistency"

// readOnlyPOSTs are POST paths that only read: they do not make their caller a writer.
var readOnlyPOSTs = []string{"/v1/memories/search", "/v1/jobs/similar"}

type readRouteKey struct{}

type readRoute struct {
	writer string // the API key
	strong bool
	pool   *pgxpool.Pool // the replica chosen for the operation, once chosen
}

// readRouting remembers each key's writes for the replica router (a write in flight or
// just acknowledged keeps the key's reads on the primary) and the request's consistency.
// It wraps the unit of work, so a write has committed and its response was sent when
// EndWrite runs.
func (s *Server) readRouting(next http.Handler) http.Handler {
	if s.Replicas == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		writer := p.KeyID
		if isWrite(r.Method) && !isReadOnlyPOST(r) {
			s.Replicas.BeginWrite(writer)
			defer s.Replicas.EndWrite(writer)
		}
		rr := &readRoute{writer: writer, strong: strings.EqualFold(r.Header.Get(ConsistencyHeader), "strong")}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), readRouteKey{}, rr)))
	})
}

func isReadOnlyPOST(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	for _, p := range readOnlyPOSTs {
		if r.URL.Path == p {
			return true
		}
	}
	return false
}

// routeRead points the request's session at a read replica when the operation may read
// from one and the router has one fresh enough for this caller.
func (s *Server) routeRead(ctx context.Context, op string) {
	rr, _ := ctx.Value(readRouteKey{}).(*readRoute)
	if rr == nil || rr.strong || !replicaReads[op] || (op == api.OpSearchMemories.OperationID && s.Access == nil) {
		return // (searchMemories counts accesses in its transaction when STRATA_ACCESS_FLUSH=0)
	}
	pool := s.Replicas.ForRead(rr.writer)
	if pool == nil {
		return
	}
	if sess := pg.SessionFrom(ctx); sess != nil && sess.ReadFrom(pool) {
		rr.pool = pool
	}
}

// readPool is the pool an operation that opens its own read snapshot uses: the replica
// routeRead chose, else the primary.
func (s *Server) readPool(ctx context.Context) *pgxpool.Pool {
	if rr, _ := ctx.Value(readRouteKey{}).(*readRoute); rr != nil && rr.pool != nil {
		return rr.pool
	}
	return s.Pool
}

// retryOnPrimary reports whether a failed operation ran on a replica that became
// unavailable; it then moves the session back to the primary, so the operation can be run
// again there (a replica lost mid-request costs a retry, not an error).
func (s *Server) retryOnPrimary(ctx context.Context, err error) bool {
	rr, _ := ctx.Value(readRouteKey{}).(*readRoute)
	if rr == nil || rr.pool == nil {
		return false
	}
	var ue *strata.UnavailableError
	if !errors.As(pg.Interpret(err), &ue) {
		return false
	}
	rr.pool = nil
	if sess := pg.SessionFrom(ctx); sess != nil {
		sess.BackToPrimary(ctx)
	}
	s.Log.Warn("a read replica failed mid-request; running the operation on the primary", "err", err)
	return true
}
