package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// recorder keeps every statement (and its arguments) a pool sends.
type recorder struct {
	mu  sync.Mutex
	qs  []recorded
	off bool
}

type recorded struct {
	sql  string
	args []any
}

func (r *recorder) add(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.off {
		r.qs = append(r.qs, recorded{sql, append([]any(nil), args...)})
	}
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}
func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL, d.Args)
}
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

var bigTable = regexp.MustCompile(`(?i)\b(FROM|JOIN|UPDATE|INTO)\s+(episodic_events|memories|audit_log)\b`)

// TestHotQueriesPruneToOnePartition drives the hot paths of the three partitioned tables
// through the API (event append, batch append, read by job and seq, applied by fingerprint
// and by op, revert; memory create, exact and near duplicates, search, list, get, history,
// update, verify, delete; audit inserts, chaining, verification, listing by entity and by
// subject), records every statement the stores send, and EXPLAINs each one touching
// episodic_events, memories or audit_log as the request role in the org's transaction:
// every table it reads or changes is scanned in exactly one partition, the org's (an
// INSERT … VALUES scans none: the row is routed). Each is explained twice: with its
// arguments (a custom plan, pruned while planning) and as a generic plan (what a cached
// statement turns into after five runs: pruned when the executor starts, "Subplans
// Removed"), since pgx caches statements.
func TestHotQueriesPruneToOnePartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.DatabaseURL(t)
	rec := &recorder{}
	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 8, Tracer: rec})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	rdb, prefix := testenv.Redis(t)
	cfg.RedisPrefix = prefix
	cfg.AdminKey = "sk_admin_" + testenv.RandomID(16)
	cfg.RateLimit = 0
	s := newServer(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), pool, rdb)

	do := func(method, target, key string, body any, hdr ...string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(b)
		}
		req := httptest.NewRequest(method, "http://strata"+target, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		var m map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &m)
		require.Less(t, w.Code, 300, "%s %s: %s", method, target, w.Body.String())
		return w.Code, m
	}
	newKey := func(org, role string) string {
		_, m := do("POST", "/v1/admin/keys", cfg.AdminKey, map[string]any{"org_id": org, "role": role})
		return m["key"].(string)
	}

	const org = "acme"
	rec.mu.Lock()
	rec.off = true // another org's rows in other partitions, not recorded
	rec.mu.Unlock()
	other := newKey("globex", "agent")
	do("POST", "/v1/memories", other, map[string]any{"text": "globex keeps its own facts", "user_id": "u1"})
	do("POST", "/v1/jobs/g1/events", other, map[string]any{"op": "edit", "params": map[string]any{"a": 1}})
	rec.mu.Lock()
	rec.off = false
	rec.mu.Unlock()
	agent, comp := newKey(org, "agent"), newKey(org, "compliance")

	// Episodic.
	do("PUT", "/v1/jobs/j1", agent, map[string]any{"goal": "cut the trailer"})
	for i := range 3 {
		do("POST", "/v1/jobs/j1/events", agent, map[string]any{"op": "video.crop", "params": map[string]any{"x": i}, "user_id": "u1"},
			"Idempotency-Key", fmt.Sprintf("ev-%d", i))
	}
	do("POST", "/v1/jobs/j1/events", agent, []any{
		map[string]any{"op": "caption", "params": map[string]any{"t": "a"}}, map[string]any{"op": "caption", "params": map[string]any{"t": "b"}}})
	do("GET", "/v1/jobs/j1/events?after=1&limit=10", agent, nil)
	do("GET", "/v1/jobs/j1/events", agent, nil)
	do("GET", `/v1/jobs/j1/applied?op=video.crop&params=%7B%22x%22%3A1%7D`, agent, nil)
	do("POST", "/v1/jobs/j1/events/2/revert", agent, map[string]any{})
	do("GET", "/v1/jobs/j1/resume", agent, nil)

	// Semantic.
	_, m1 := do("POST", "/v1/memories", agent, map[string]any{"text": "the studio is in Lyon", "user_id": "u1"})
	do("POST", "/v1/memories", agent, map[string]any{"text": "the studio is in Lyon", "user_id": "u1"}) // exact duplicate
	do("POST", "/v1/memories", agent, map[string]any{"text": "the studio is in Lyon, France", "user_id": "u1"})
	_, m2 := do("POST", "/v1/memories", agent, map[string]any{"text": "exports use ProRes 422", "user_id": "u1", "session_id": "s1"})
	do("POST", "/v1/memories/batch", agent, map[string]any{"memories": []any{
		map[string]any{"text": "the client prefers 24 fps", "user_id": "u1"}, map[string]any{"text": "captions are white", "user_id": "u1"}}})
	do("POST", "/v1/memories/search", agent, map[string]any{"query": "where is the studio", "user_id": "u1", "session_id": "s1"})
	do("POST", "/v1/memories/search", agent, map[string]any{"query": "fps"})
	do("GET", "/v1/memories?user_id=u1&limit=5", agent, nil)
	id1, id2 := m1["id"].(string), m2["id"].(string)
	do("GET", "/v1/memories/"+id1, agent, nil)
	_, up := do("PATCH", "/v1/memories/"+id1, agent, map[string]any{"text": "the studio is in Paris"})
	do("GET", "/v1/memories/"+up["id"].(string)+"/history", agent, nil)
	do("POST", "/v1/memories/"+id2+"/verify", agent, map[string]any{})
	do("DELETE", "/v1/memories/"+id2, agent, nil)

	// Audit: the chainer's pass, verification, listing by entity and by subject.
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		_, err := audit.Chain(ctx, tx, org, 1000)
		return err
	}))
	do("GET", "/v1/audit/verify", comp, nil)
	do("GET", "/v1/audit?entity_type=memory&entity_id="+id1, comp, nil)
	do("GET", "/v1/audit?user_id=u1", comp, nil)
	do("GET", "/v1/audit?limit=5", comp, nil)

	rec.mu.Lock()
	rec.off = true
	qs := rec.qs
	rec.mu.Unlock()

	owner := testenv.OwnerConn(t, dsn)
	home := map[string]string{}
	for _, tbl := range []string{"episodic_events", "memories", "audit_log"} {
		var p string
		require.NoError(t, owner.QueryRow(ctx, fmt.Sprintf(`SELECT DISTINCT tableoid::regclass::text FROM %s WHERE org_id = $1`, tbl), org).Scan(&p), tbl)
		require.Regexp(t, `^`+tbl+`_p\d+$`, p)
		home[tbl] = p
	}

	seen := map[string]bool{}
	perTable := map[string]int{} // statements recorded per table
	pruned := map[string]int{}   // of them, those that scan the table, in one partition
	runtime := 0                 // generic plans pruned when the executor starts
	checked := 0
	for i, q := range qs {
		if seen[q.sql] || !bigTable.MatchString(q.sql) {
			continue
		}
		seen[q.sql] = true
		uses := map[string]bool{}
		for _, m := range bigTable.FindAllStringSubmatch(q.sql, -1) {
			uses[strings.ToLower(m[2])] = true
		}
		for _, generic := range []bool{false, true} {
			plan := explain(t, pool, org, q, generic, i)
			if generic && strings.Contains(plan, `"Subplans Removed"`) {
				runtime++
			}
			scanned := map[string]map[string]bool{}
			walkPlan(plan, func(rel string) {
				for tbl := range uses {
					if regexp.MustCompile(`^` + tbl + `_p\d+$`).MatchString(rel) {
						if scanned[tbl] == nil {
							scanned[tbl] = map[string]bool{}
						}
						scanned[tbl][rel] = true
					}
				}
			})
			for tbl := range uses {
				parts := keys(scanned[tbl])
				if len(parts) == 0 {
					// INSERT … VALUES (the row is routed), or a plan proved empty (a read
					// of seqs after the last one): no partition is scanned at all.
					continue
				}
				require.Equal(t, []string{home[tbl]}, parts, "generic=%v: %s must scan only %s:\n%s\nplan: %s", generic, tbl, home[tbl], q.sql, plan)
				if !generic {
					pruned[tbl]++
				}
			}
		}
		for tbl := range uses {
			perTable[tbl]++
		}
		checked++
	}
	t.Logf("%d distinct statements on the partitioned tables, each explained as a custom and a generic plan: %v; scanning one partition: %v; generic plans pruned at executor start: %d",
		checked, perTable, pruned, runtime)
	require.Positive(t, runtime, "generic plans prune at run time (Subplans Removed)")

	// The detector itself: a read without the org (the owner, no row-level security)
	// scans every partition.
	var all []byte
	require.NoError(t, owner.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT count(*) FROM memories`).Scan(&all))
	n := 0
	walkPlan(string(all), func(rel string) { n++ })
	require.Equal(t, 16, n)
	for _, tbl := range []string{"episodic_events", "memories", "audit_log"} {
		require.GreaterOrEqual(t, pruned[tbl], 4, "hot statements scanning %s recorded", tbl)
	}
}

// explain returns the JSON plan of q as the request role in org's transaction: q is
// prepared (as pgx does), then explained with its arguments as a custom plan, or as the
// generic plan a cached statement switches to. EXPLAIN EXECUTE takes no bound parameters,
// so the arguments are encoded as text with the types the server inferred and sent as
// literals.
func explain(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, org string, q recorded, generic bool, n int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	require.NoError(t, pg.SetOrg(ctx, tx, org))
	name := fmt.Sprintf("prune_%d", n)
	sd, err := tx.Conn().Prepare(ctx, name, q.sql)
	require.NoError(t, err, q.sql)
	defer tx.Conn().Deallocate(context.WithoutCancel(ctx), name) //nolint:errcheck
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	_, err = tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode)
	require.NoError(t, err)
	require.Len(t, q.args, len(sd.ParamOIDs), q.sql)
	lits := make([]string, len(q.args))
	for i, a := range q.args {
		if a == nil {
			lits[i] = "NULL"
			continue
		}
		b, err := tx.Conn().TypeMap().Encode(sd.ParamOIDs[i], pgx.TextFormatCode, a, nil)
		require.NoError(t, err, "argument %d of %s", i+1, q.sql)
		if b == nil {
			lits[i] = "NULL"
			continue
		}
		lits[i] = "'" + strings.ReplaceAll(string(b), "'", "''") + "'"
	}
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+strings.Join(lits, ", ")+")").Scan(&plan), q.sql)
	return string(plan)
}

// walkPlan calls fn with the relation of every node of a JSON plan that names one.
func walkPlan(plan string, fn func(rel string)) {
	var root []map[string]any
	if err := json.Unmarshal([]byte(plan), &root); err != nil {
		panic(err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, ok := n["Relation Name"].(string); ok && n["Node Type"] != "ModifyTable" {
			fn(rel)
		}
		if subs, ok := n["Plans"].([]any); ok {
			for _, s := range subs {
				walk(s.(map[string]any))
			}
		}
	}
	for _, r := range root {
		walk(r["Plan"].(map[string]any))
	}
}

func keys(m map[string]bool) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
