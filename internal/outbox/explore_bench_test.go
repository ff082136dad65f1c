package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

func BenchmarkExplore(b *testing.B) {
	ctx := context.Background()
	pool, dsn := testenv.Pool(b)
	owner := testenv.OwnerConn(b, dsn)
	_, err := owner.Exec(ctx, `CREATE TABLE bench_w (id bigserial PRIMARY KEY, org_id text, v text);
		CREATE TABLE x_norls (LIKE outbox_events INCLUDING ALL);
		CREATE TABLE x_nojob (LIKE outbox_events INCLUDING DEFAULTS, PRIMARY KEY (org_id, seq));
		CREATE UNIQUE INDEX ON x_nojob (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
		SELECT strata_enable_rls('x_nojob');
		CREATE TABLE x_pk (LIKE outbox_events INCLUDING DEFAULTS, PRIMARY KEY (org_id, seq));
		SELECT strata_enable_rls('x_pk');
		GRANT ALL ON bench_w, bench_w_id_seq, x_norls, x_nojob, x_pk TO strata_app`)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	next := func() string { n++; return fmt.Sprint("handoff.pending:job-", n, ":h", n) }
	const data = `'{"job_id":"j","handoff_id":"h","from":"a","to":"b"}'`
	_ = func(tbl, tail string, dedupe bool) func() (string, []any) {
		return func() (string, []any) {
			var k any
			if dedupe {
				k = next()
			}
			return `INSERT INTO ` + tbl + ` (org_id, seq, type, job_id, data, dedupe_key)
				VALUES ($1, nextval('outbox_seq'), 'handoff.pending', 'j', ` + data + `, $2) ` + tail, []any{"o1", k}
		}
	}
	type variant struct {
		name string
		sql  func() (string, []any)
	}
	uid := func() string { return uuid.NewString() }
	lockSQL := `SELECT pg_advisory_xact_lock(hashtextextended('strata.outbox' || chr(31) || $1, 0))`
	vars := []variant{
		{"bare", nil},
		{"extra-insert", func() (string, []any) { return `INSERT INTO bench_w (org_id, v) VALUES ($1, $2)`, []any{"o1", "y"} }},
		{"cur", func() (string, []any) {
			s, a, _ := outbox.EmitSQL("o1", outbox.New{Type: "handoff.pending", JobID: "j", DedupeKey: next(), Data: map[string]any{"job_id": "j"}})
			return s, a
		}},
		{"gouuid", func() (string, []any) {
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $3::uuid, 'handoff.pending', 'j', ` + data + `, $2, now() FROM l
				ON CONFLICT DO NOTHING`, []any{"o1", next(), uid()}
		}},
		{"gouuid-arbiter", func() (string, []any) {
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $3::uuid, 'handoff.pending', 'j', ` + data + `, $2, now() FROM l
				ON CONFLICT (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING`, []any{"o1", next(), uid()}
		}},
		{"gouuid-notexists", func() (string, []any) {
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $3::uuid, 'handoff.pending', 'j', ` + data + `, $2, now() FROM l
				WHERE NOT EXISTS (SELECT 1 FROM outbox_events d WHERE d.org_id = $1 AND d.dedupe_key = $2)`, []any{"o1", next(), uid()}
		}},
		{"gouuid-nodedupe", func() (string, []any) {
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $3::uuid, 'handoff.pending', 'j', ` + data + `, $2, now() FROM l`, []any{"o1", nil, uid()}
		}},
		{"cur-gouuid-arbiter", func() (string, []any) {
			_, a, _ := outbox.EmitSQL("o1", outbox.New{Type: "handoff.pending", JobID: "j", DedupeKey: next(), Data: map[string]any{"job_id": "j"}})
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO outbox_events (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $7::uuid, $2, nullif($3, ''), $4::jsonb, nullif($5, ''), coalesce($6::timestamptz, now()) FROM l
				ON CONFLICT (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING`, append(a, uid())
		}},
		{"cur-gouuid-arbiter-nojob", func() (string, []any) {
			_, a, _ := outbox.EmitSQL("o1", outbox.New{Type: "handoff.pending", JobID: "j", DedupeKey: next(), Data: map[string]any{"job_id": "j"}})
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO x_nojob (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $7::uuid, $2, nullif($3, ''), $4::jsonb, nullif($5, ''), coalesce($6::timestamptz, now()) FROM l
				ON CONFLICT (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING`, append(a, uid())
		}},
		{"gouuid-nojob", func() (string, []any) {
			return `WITH l AS (` + lockSQL + `)
				INSERT INTO x_nojob (org_id, seq, id, type, job_id, data, dedupe_key, created_at)
				SELECT $1, nextval('outbox_seq'), $3::uuid, 'handoff.pending', 'j', ` + data + `, $2, now() FROM l
				ON CONFLICT DO NOTHING`, []any{"o1", next(), uid()}
		}},
	}
	lat := make([][]time.Duration, len(vars))
	run := func(v variant) time.Duration {
		t0 := time.Now()
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
		bt := &pgx.Batch{}
		bt.Queue("BEGIN")
		pg.QueueSetOrg(bt, "o1")
		bt.Queue(`INSERT INTO bench_w (org_id, v) VALUES ($1, $2)`, "o1", "x")
		if err := c.SendBatch(ctx, bt).Close(); err != nil {
			b.Fatal(err)
		}
		bt = &pgx.Batch{}
		if v.sql != nil {
			s, a := v.sql()
			bt.Queue(s, a...)
		}
		bt.Queue("COMMIT")
		if err := c.SendBatch(ctx, bt).Close(); err != nil {
			b.Fatal(v.name, err)
		}
		return time.Since(t0)
	}
	for range 100 {
		for _, v := range vars {
			run(v)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range vars {
			k := (i + j) % len(vars)
			lat[k] = append(lat[k], run(vars[k]))
		}
	}
	trim := func(l []time.Duration) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		l = l[len(l)/10 : len(l)-len(l)/10]
		var s time.Duration
		for _, d := range l {
			s += d
		}
		return float64(s.Microseconds()) / float64(len(l))
	}
	b.ReportMetric(trim(lat[0]), "bare-trim-µs")
	for k, v := range vars[1:] {
		b.ReportMetric(trim(lat[k+1])-trim(lat[0]), v.name+"-Δtrim-µs")
	}
}
