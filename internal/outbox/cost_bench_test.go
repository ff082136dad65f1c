package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkEmitCost breaks the emission's cost down inside Postgres, without the HTTP
// server: the same write transaction (BEGIN, the org, one INSERT; then COMMIT in a round
// trip of its own, as a request's Session does) with nothing queued before its COMMIT
// ("bare"), with the emission before and after issue 25's change, or with one part of an
// emission (a one-row insert into a plain table, "extra-insert", is the yardstick) — every
// variant once per iteration, in rotating order, with a LISTEN connection draining the
// channel as a server's does. It reports each variant's mean, median and 80 % trimmed mean
// minus the bare write's.
//
//	go test -run '^$' -bench BenchmarkEmitCost -benchtime 3000x ./internal/outbox/
func BenchmarkEmitCost(b *testing.B) {
	ctx := context.Background()
	pool, dsn := testenv.Pool(b)
	owner := testenv.OwnerConn(b, dsn)
	// bench_heads and bench_events are the outbox as migration 0031 made it (a head row per
	// org), for the "before" variant.
	_, err := owner.Exec(ctx, `CREATE TABLE bench_w (id bigserial PRIMARY KEY, org_id text, v text);
		CREATE TABLE bench_heads (org_id text NOT NULL CHECK (org_id <> ''), last_seq bigint NOT NULL, PRIMARY KEY (org_id));
		CREATE TABLE bench_events (LIKE outbox_events INCLUDING ALL);
		SELECT strata_enable_rls('bench_heads'), strata_enable_rls('bench_events');
		GRANT ALL ON bench_w, bench_w_id_seq, bench_heads, bench_events TO strata_app`)
	if err != nil {
		b.Fatal(err)
	}
	listen := testenv.OwnerConn(b, dsn)
	if _, err := listen.Exec(ctx, "LISTEN "+outbox.Channel); err != nil {
		b.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for lctx.Err() == nil {
			_, _ = listen.WaitForNotification(lctx)
		}
	}()
	n := 0
	next := func() string { n++; return fmt.Sprint("k", n) }
	type variant struct {
		name string
		sql  func() (string, []any)
	}
	ev := func() outbox.New {
		return outbox.New{Type: outbox.HandoffPending, JobID: "j", DedupeKey: next(),
			Data: map[string]any{"job_id": "j", "handoff_id": "h", "from": "a", "to": "b"}}
	}
	const data = `'{"job_id":"j","handoff_id":"h","from":"a","to":"b"}'`
	vars := []variant{
		{"bare", nil},
		{"before", func() (string, []any) { // 0031's emission: head row, insert, NOTIFY
			_, a, _ := outbox.EmitSQL("o1", ev())
			return `WITH h AS (
					INSERT INTO bench_heads AS h (org_id, last_seq) VALUES ($1, 1)
					ON CONFLICT (org_id) DO UPDATE SET last_seq = h.last_seq + 1 RETURNING last_seq),
				e AS (
					INSERT INTO bench_events (org_id, seq, type, job_id, data, dedupe_key, created_at)
					SELECT $1, h.last_seq, $2, nullif($3, ''), $4::jsonb, nullif($5, ''), coalesce($6::timestamptz, now()) FROM h
					ON CONFLICT DO NOTHING RETURNING seq)
				SELECT pg_notify('` + outbox.Channel + `', $1) FROM e`, a[:6] // 0031 drew the id in SQL
		}},
		{"after", func() (string, []any) { // EmitSQL: advisory lock, nextval, insert
			s, a, _ := outbox.EmitSQL("o1", ev())
			return s, a
		}},
		{"head-only", func() (string, []any) {
			return `INSERT INTO bench_heads AS h (org_id, last_seq) VALUES ($1, 1)
				ON CONFLICT (org_id) DO UPDATE SET last_seq = h.last_seq + 1`, []any{"o1"}
		}},
		{"notify-only", func() (string, []any) { return "SELECT pg_notify('" + outbox.Channel + "', $1)", []any{"o1"} }},
		{"lock-only", func() (string, []any) {
			return `SELECT pg_advisory_xact_lock(hashtextextended('strata.outbox' || chr(31) || $1, 0))`, []any{"o1"}
		}},
		{"insert-only", func() (string, []any) { // the event row alone, seq from the sequence
			return `INSERT INTO outbox_events (org_id, seq, type, job_id, data, dedupe_key)
				VALUES ($1, nextval('outbox_seq'), 'handoff.pending', 'j', ` + data + `, $2)
				ON CONFLICT DO NOTHING`, []any{"o1", next()}
		}},
		// x-*: the insert-only row taken apart (no ON CONFLICT; no job and dedupe index entries;
		// no sequence; bench_w with the payload) — docs/benchmarks.md, events section.
		{"x-noconflict", func() (string, []any) {
			return `INSERT INTO outbox_events (org_id, seq, type, job_id, data, dedupe_key)
				VALUES ($1, nextval('outbox_seq'), 'handoff.pending', 'j', ` + data + `, $2)`, []any{"o1", next()}
		}},
		{"x-nojob-nodedupe", func() (string, []any) {
			return `INSERT INTO outbox_events (org_id, seq, type, data)
				VALUES ($1, nextval('outbox_seq'), 'handoff.pending', ` + data + `)`, []any{"o1"}
		}},
		{"x-noseq", func() (string, []any) {
			return `INSERT INTO outbox_events (org_id, seq, type, data)
				VALUES ($1, $2, 'handoff.pending', ` + data + `)`, []any{"o1", int64(n) + 1e12 + int64(time.Now().UnixNano()%1e9)*1000}
		}},
		{"x-w-jsonb", func() (string, []any) {
			return `INSERT INTO bench_w (org_id, v) VALUES ($1, ` + data + `::text)`, []any{"o1"}
		}},
		{"extra-insert", func() (string, []any) { return `INSERT INTO bench_w (org_id, v) VALUES ($1, $2)`, []any{"o1", "y"} }},
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
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range 100 {
		for _, v := range vars {
			run(v)
		}
	}
	b.ResetTimer()
	for i := range b.N { // every variant once per iteration, the order rotating
		for j := range vars {
			k := (i + j) % len(vars)
			lat[k] = append(lat[k], run(vars[k]))
		}
	}
	b.StopTimer()
	mean := func(l []time.Duration) float64 {
		var s time.Duration
		for _, d := range l {
			s += d
		}
		return float64(s.Microseconds()) / float64(len(l))
	}
	med := func(l []time.Duration) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		return float64(l[len(l)/2].Microseconds())
	}
	trim := func(l []time.Duration) float64 { // the mean of the middle 80 %
		l = slices.Clone(l)
		slices.Sort(l)
		return mean(l[len(l)/10 : len(l)-len(l)/10])
	}
	b.ReportMetric(mean(lat[0]), "bare-mean-µs")
	b.ReportMetric(med(lat[0]), "bare-p50-µs")
	for k, v := range vars[1:] {
		b.ReportMetric(mean(lat[k+1])-mean(lat[0]), v.name+"-Δmean-µs")
		b.ReportMetric(med(lat[k+1])-med(lat[0]), v.name+"-Δp50-µs")
		b.ReportMetric(trim(lat[k+1])-trim(lat[0]), v.name+"-Δtrim-µs")
	}
}
