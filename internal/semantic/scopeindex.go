package semantic

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
)

// Scope indexes (docs/semantic.md, "Heavy scopes"): a user whose visible memories outgrow
// the exact sort (more than Options.ExactBelow) is searched by HNSW, and the org-wide
// index is a poor fit for a scope of 5–20 % of the org: the scan walks the whole graph and
// filters most of what it finds (20+ ms at 100k memories). Such a scope gets an HNSW index
// of its own, a partial index whose predicate is the scope:
//
//	WHERE org_id = 'o' AND user_id IN ('', 'u') AND dims = d AND valid_to IS NULL
//
// (the user's memories and the org-level ones, every memory the user's searches can see).
// The planner picks it by itself for any current-memories query that implies the predicate
// — the user's searches (user_id = ANY('{"",u}') with their agent and session levels as
// extra filters) and the dedup probe of the user's writes (user_id = 'u') — because HNSW
// scans run with custom plans, where the parameters are constants the predicate can be
// proved from. Nothing in the query changes; a search of a scope without its index uses
// the org-wide one as before.
//
// Which scopes: nearest notes each (org, user, dims) it counts past Options.ScopeIndexAbove
// (1,000); a maintenance pass (EnsureScopeIndexes, run by the server every
// STRATA_SCOPE_INDEX_INTERVAL on a connection of the login role, which owns the tables)
// builds an index for a noted scope that still holds more than that, at most Max in the
// database, CONCURRENTLY on the org's partition (writes go on), and drops an index whose
// scope fell below half of it (an erasure, eviction) or whose build was interrupted. The
// catalog is the registry: each index is named memories_scope_<hash> and carries its scope
// as a JSON comment. Once a replica knows a scope has its index (the pass's result), that
// scope's searches skip the count and the exact sort and go to HNSW, which the scope's own
// index answers with the recall of a whole-graph search (1.0 at 100k in the benchmark).

// ScopeIndexPrefix begins every scope index's name.
const ScopeIndexPrefix = "memories_scope_"

// HotScope is a scope that may deserve an index of its own.
type HotScope struct {
	OrgID  string `json:"org_id"`
	UserID string `json:"user_id"`
	Dims   int    `json:"dims"`
}

// IndexName is the scope's index name: a hash, so that no id appears in it.
func (h HotScope) IndexName() string {
	sum := sha256.Sum256([]byte(h.OrgID + "\x00" + h.UserID + "\x00" + strconv.Itoa(h.Dims)))
	return ScopeIndexPrefix + hex.EncodeToString(sum[:10])
}

// maxHotPending bounds the scopes noted between two passes.
const maxHotPending = 1024

// hotScopes is what nearest noted since the last pass, and the scopes known to have an
// index (so that their searches do not note them again).
type hotScopes struct {
	mu      sync.Mutex
	pending map[HotScope]struct{}
	indexed map[HotScope]struct{}
}

func (h *hotScopes) note(sc HotScope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.indexed[sc]; ok {
		return
	}
	if h.pending == nil {
		h.pending = map[HotScope]struct{}{}
	}
	if len(h.pending) < maxHotPending {
		h.pending[sc] = struct{}{}
	}
}

func (h *hotScopes) isIndexed(sc HotScope) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.indexed[sc]
	return ok
}

// HotScopes returns the scopes searched by HNSW since the last call (and forgets them).
func (s *Store) HotScopes() []HotScope {
	s.hot.mu.Lock()
	defer s.hot.mu.Unlock()
	out := make([]HotScope, 0, len(s.hot.pending))
	for sc := range s.hot.pending {
		out = append(out, sc)
	}
	s.hot.pending = nil
	slices.SortFunc(out, func(a, b HotScope) int {
		return cmp.Or(cmp.Compare(a.OrgID, b.OrgID), cmp.Compare(a.UserID, b.UserID), cmp.Compare(a.Dims, b.Dims))
	})
	return out
}

// SetIndexed records the scopes that have an index (a pass's result).
func (s *Store) SetIndexed(scopes []HotScope) {
	m := make(map[HotScope]struct{}, len(scopes))
	for _, sc := range scopes {
		m[sc] = struct{}{}
	}
	s.hot.mu.Lock()
	s.hot.indexed = m
	s.hot.mu.Unlock()
}

// ScopeIndexOptions tune a maintenance pass.
type ScopeIndexOptions struct {
	// BuildAbove: a noted scope gets an index when it holds more current memories than
	// this (the store's ExactBelow: below it, the exact sort answers).
	BuildAbove int
	// DropBelow: an index whose scope holds fewer current memories is dropped [BuildAbove/2].
	DropBelow int
	// Max bounds the scope indexes in the database [64].
	Max int
}

// ScopeIndexReport is what a pass did.
type ScopeIndexReport struct {
	Indexed []HotScope    // every scope with a valid index after the pass
	Built   []HotScope    // built by this pass
	Dropped []string      // index names dropped by this pass
	Took    time.Duration // the pass, builds included
}

// EnsureScopeIndexes is one maintenance pass over the scope indexes: it drops those whose
// scope shrank below DropBelow, whose build was interrupted (invalid) or whose comment is
// unreadable, then builds one for each candidate above BuildAbove while fewer than Max
// exist. conn must be the tables' owner and outside a transaction (concurrent builds);
// set maintenance_work_mem on it for faster builds. Rerunning after a crash finishes the
// job. Replicas serialise on an advisory lock: a pass that finds it taken returns
// ErrScopeIndexBusy and builds nothing (keep the candidates for the next pass).
func EnsureScopeIndexes(ctx context.Context, conn *pgx.Conn, o ScopeIndexOptions, candidates []HotScope) (ScopeIndexReport, error) {
	t0 := time.Now()
	var rep ScopeIndexReport
	if o.BuildAbove <= 0 {
		return rep, errors.New("semantic: EnsureScopeIndexes: BuildAbove must be positive")
	}
	if o.DropBelow <= 0 {
		o.DropBelow = o.BuildAbove / 2
	}
	if o.Max <= 0 {
		o.Max = 64
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('strata.scope_indexes', 0))`).Scan(&locked); err != nil {
		return rep, err
	}
	if !locked {
		return rep, ErrScopeIndexBusy
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('strata.scope_indexes', 0))`)
	}()

	found, err := listScopeIndexes(ctx, conn)
	if err != nil {
		return rep, err
	}
	have := map[HotScope]bool{}
	for _, e := range found {
		sc, keep := e.scope, e.ok
		if keep {
			n, err := countScope(ctx, conn, sc, o.DropBelow)
			if err != nil {
				return rep, err
			}
			keep = n >= o.DropBelow
		}
		if !keep {
			conc := "CONCURRENTLY "
			if e.partitioned {
				conc = ""
			}
			if _, err := conn.Exec(ctx, `DROP INDEX `+conc+`IF EXISTS `+pgx.Identifier{e.name}.Sanitize()); err != nil {
				return rep, fmt.Errorf("dropping scope index %s: %w", e.name, err)
			}
			rep.Dropped = append(rep.Dropped, e.name)
			continue
		}
		have[sc] = true
		rep.Indexed = append(rep.Indexed, sc)
	}
	for _, sc := range candidates {
		if have[sc] || sc.OrgID == "" || sc.Dims <= 0 || sc.Dims > 16000 {
			continue
		}
		if len(rep.Indexed) >= o.Max {
			break
		}
		n, err := countScope(ctx, conn, sc, o.BuildAbove+1)
		if err != nil {
			return rep, err
		}
		if n <= o.BuildAbove {
			continue
		}
		if err := buildScopeIndex(ctx, conn, sc); err != nil {
			return rep, err
		}
		have[sc] = true
		rep.Indexed = append(rep.Indexed, sc)
		rep.Built = append(rep.Built, sc)
	}
	rep.Took = time.Since(t0)
	return rep, nil
}

// scopeIndex is an index named like a scope index: scope is what its comment names (when
// its name is that scope's hash), ok when it also serves (valid, not partitioned).
type scopeIndex struct {
	name        string
	partitioned bool
	scope       HotScope
	ok          bool
}

// listScopeIndexes lists the indexes named like scope indexes: the prefix and 20 hex digits,
// so that no other index (memories_scope, the scope b-tree, among them) is ever dropped. A
// partitioned one (relkind I) is a copy `server partition` made of one when it moved
// memories; it has no comment.
func listScopeIndexes(ctx context.Context, conn *pgx.Conn) ([]scopeIndex, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname, i.indisvalid, coalesce(obj_description(c.oid, 'pg_class'), ''), c.relkind = 'I'
		FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
		WHERE c.relkind IN ('i', 'I') AND c.relname ~ ('^' || $1 || '[0-9a-f]{20}$') ORDER BY c.relname`, ScopeIndexPrefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (scopeIndex, error) {
		var x scopeIndex
		var valid bool
		var comment string
		if err := r.Scan(&x.name, &valid, &comment, &x.partitioned); err != nil {
			return x, err
		}
		named := json.Unmarshal([]byte(comment), &x.scope) == nil && x.scope.OrgID != "" && x.scope.IndexName() == x.name
		if !named {
			x.scope = HotScope{}
		}
		x.ok = named && valid && !x.partitioned
		return x, nil
	})
}

// ErrScopeIndexBusy: another replica's pass holds the lock.
var ErrScopeIndexBusy = errors.New("semantic: another scope-index pass is running")

// countScope counts sc's current memories, up to limit, in the org's transaction (the
// tables force row-level security even for their owner).
func countScope(ctx context.Context, conn *pgx.Conn, sc HotScope, limit int) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := pg.SetOrg(ctx, tx, sc.OrgID); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM memories
			WHERE org_id = $1 AND user_id IN ('', $2) AND dims = $3 AND valid_to IS NULL LIMIT $4) x`,
			sc.OrgID, sc.UserID, sc.Dims, limit).Scan(&n)
	})
	return n, err
}

// buildScopeIndex builds sc's index concurrently on the table that holds the org's rows
// (its partition when memories is partitioned: a partitioned table takes no concurrent
// build, and the org's rows are all in one partition), then records the scope in its
// comment. An index without that comment (a build killed before it) is dropped by the next
// pass and built again.
func buildScopeIndex(ctx context.Context, conn *pgx.Conn, sc HotScope) error {
	comment, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	// Postgres writes the statements (format's %I and %L quote the names and the ids): the
	// predicate holds the scope as literals, so that the planner can prove it from a query's
	// constants. user_id IN ('', u): the user's memories and the org-level ones.
	var build, record string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := pg.SetOrg(ctx, tx, sc.OrgID); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT
			format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %s USING hnsw ((embedding::vector(%s)) vector_cosine_ops)
				WHERE org_id = %L AND user_id IN (%L, %L) AND dims = %s AND valid_to IS NULL',
				$1::text, tableoid::regclass, $4::int, $2::text, '', $3::text, $4::int),
			format('COMMENT ON INDEX %I IS %L', $1::text, $5::text)
			FROM memories WHERE org_id = $2 LIMIT 1`, sc.IndexName(), sc.OrgID, sc.UserID, sc.Dims, string(comment)).Scan(&build, &record)
	})
	if err != nil {
		return fmt.Errorf("finding the partition of a scope index: %w", err)
	}
	if _, err := conn.Exec(ctx, build); err != nil {
		return fmt.Errorf("building scope index %s: %w", sc.IndexName(), err)
	}
	if _, err := conn.Exec(ctx, record); err != nil {
		return fmt.Errorf("recording scope index %s: %w", sc.IndexName(), err)
	}
	return nil
}

// DropScopeIndexes drops the scope indexes of org's user (an erasure: the index's
// definition names the user). conn as for EnsureScopeIndexes.
func DropScopeIndexes(ctx context.Context, conn *pgx.Conn, org, user string) ([]string, error) {
	all, err := listScopeIndexes(ctx, conn)
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, x := range all {
		if x.scope.OrgID != org || x.scope.UserID != user || x.scope.OrgID == "" {
			continue
		}
		if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+pgx.Identifier{x.name}.Sanitize()); err != nil {
			return dropped, err
		}
		dropped = append(dropped, x.name)
	}
	return dropped, nil
}

// ScopeIndexer runs EnsureScopeIndexes every Interval over the scopes Store's searches
// noted, on a connection of its own to DSN (the login role, which owns the tables: the
// request pool's connections act as strata_app and cannot build indexes).
type ScopeIndexer struct {
	Store    *Store
	DSN      string
	Interval time.Duration
	Max      int
	Log      *slog.Logger
	service.StartStop
}

// RunOnce is one pass; the candidates of a pass that could not run are kept for the next.
func (x *ScopeIndexer) RunOnce(ctx context.Context) (ScopeIndexReport, error) {
	candidates := x.Store.HotScopes()
	requeue := func() {
		for _, sc := range candidates {
			x.Store.hot.note(sc)
		}
	}
	conn, err := x.connect(ctx)
	if err != nil {
		requeue()
		return ScopeIndexReport{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rep, err := EnsureScopeIndexes(ctx, conn, ScopeIndexOptions{BuildAbove: x.Store.o.ScopeIndexAbove, Max: x.Max}, candidates)
	if err != nil {
		requeue()
		return rep, err
	}
	x.Store.SetIndexed(rep.Indexed)
	return rep, nil
}

// connect opens the indexer's own connection. A scope's build reads every row of it:
// 256 MB of maintenance_work_mem builds 20k × 384 in memory.
func (x *ScopeIndexer) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, x.DSN)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '256MB'`); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// DropUser is DropScopeIndexes on the indexer's connection (the erasure's hook) and says
// how many it dropped.
func (x *ScopeIndexer) DropUser(ctx context.Context, org, user string) (int, error) {
	conn, err := x.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	names, err := DropScopeIndexes(ctx, conn, org, user)
	return len(names), err
}

// Start runs RunOnce every Interval (and once at start, which learns the indexes that
// exist) until Stop; Interval ≤ 0 turns scope indexes off.
func (x *ScopeIndexer) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := x.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		if x.Interval <= 0 {
			<-ctx.Done()
			return
		}
		pass := func(ctx context.Context) {
			rep, err := x.RunOnce(ctx)
			switch {
			case errors.Is(err, ErrScopeIndexBusy) || ctx.Err() != nil:
			case err != nil:
				x.Log.Warn("scope index pass failed; searches of heavy scopes use the org-wide HNSW index meanwhile (will retry)", "err", err)
			case len(rep.Built) > 0 || len(rep.Dropped) > 0:
				// Index names are hashes: no user id is logged.
				names := make([]string, len(rep.Built))
				for i, sc := range rep.Built {
					names[i] = sc.IndexName()
				}
				x.Log.Info("scope indexes changed", "built", names, "dropped", rep.Dropped, "indexed", len(rep.Indexed), "took", rep.Took.Round(time.Millisecond))
			}
		}
		pass(ctx)
		service.Every(ctx, x.Interval, pass)
	}()
	return nil
}
