package migrations

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
)

// lastGrandfathered is the newest migration written before files declared their phase.
// The lint checks only the files after it; two of the older ones break its rules and stay
// as history (docs/operations.md): 0037 dropped outbox_heads, which the release before it
// still wrote to, and 0041 backfilled job_steps in one UPDATE, set a column NOT NULL and
// built an index, all under one lock.
const lastGrandfathered = 47

// TestMigrationsAreExpandContract is the rule every new migration is held to: it declares
// its phase; an expand keeps the previous release working (no DROP, RENAME, SET NOT NULL,
// type change, NOT NULL column without a default, constraint that is validated under the
// lock, TRUNCATE); and no file, expand or contract, holds a lock for a time that grows with
// a table that already exists (an index on one is built CONCURRENTLY in a no-transaction
// file, an UPDATE or DELETE of one runs in batches that commit).
func TestMigrationsAreExpandContract(t *testing.T) {
	t.Parallel()
	migs, err := pg.LoadMigrations(FS)
	require.NoError(t, err)
	require.Greater(t, migs[len(migs)-1].Version, lastGrandfathered, "the bookkeeping migration is the first one linted")
	tables := map[string]bool{"schema_migrations": true}
	for _, m := range migs {
		if m.Version > lastGrandfathered {
			require.Empty(t, lint(m, tables), "migration %s", m.File)
		}
		for _, n := range createdTables(m.SQL) {
			tables[n] = true
		}
	}
}

// TestLintCatchesUnsafeMigrations: the rule refuses the grandfathered offenders had they
// been written today, and each kind of unsafe statement.
func TestLintCatchesUnsafeMigrations(t *testing.T) {
	t.Parallel()
	migs, err := pg.LoadMigrations(FS)
	require.NoError(t, err)
	tables := map[string]bool{"schema_migrations": true}
	byVersion := map[int]pg.Migration{}
	for _, m := range migs {
		byVersion[m.Version] = m
		for _, n := range createdTables(m.SQL) {
			tables[n] = true
		}
	}
	asExpand := func(v int) pg.Migration {
		m := byVersion[v]
		m.Phase = pg.PhaseExpand
		return m
	}
	require.Contains(t, strings.Join(lint(asExpand(37), tables), "\n"), "drop table outbox_heads")
	got41 := strings.Join(lint(asExpand(41), tables), "\n")
	for _, want := range []string{"update job_steps", "(set not null breaks", "create index job_steps_run_order"} {
		require.Contains(t, got41, want)
	}

	cases := []struct {
		name, sql string
		want      string // a fragment of the finding; "" = no finding
	}{
		{"no phase", "CREATE TABLE t_new (id int);", "declares no phase"},
		{"new table and its index", "-- strata:phase expand\nCREATE TABLE t_new (id int);\nCREATE INDEX t_new_id ON t_new (id);", ""},
		{"nullable column", "-- strata:phase expand\nALTER TABLE memories ADD COLUMN hint text;", ""},
		{"not null with default", "-- strata:phase expand\nALTER TABLE memories ADD COLUMN hint text NOT NULL DEFAULT '';", ""},
		{"not null without default", "-- strata:phase expand\nALTER TABLE memories ADD COLUMN hint text NOT NULL;", "not null without a default"},
		{"volatile default", "-- strata:phase expand\nALTER TABLE memories ADD COLUMN tag uuid DEFAULT gen_random_uuid();", "volatile default"},
		{"drop column", "-- strata:phase expand\nALTER TABLE memories DROP COLUMN content;", "destructive"},
		{"drop column in contract", "-- strata:phase contract\nALTER TABLE memories DROP COLUMN content;", ""},
		{"rename", "-- strata:phase expand\nALTER TABLE memories RENAME COLUMN content TO body;", "(rename breaks"},
		{"set not null", "-- strata:phase expand\nALTER TABLE memories ALTER COLUMN kind SET NOT NULL;", "destructive"},
		{"type change", "-- strata:phase expand\nALTER TABLE memories ALTER COLUMN kind TYPE varchar(40);", "(alter column kind type breaks"},
		{"drop function", "-- strata:phase expand\nDROP FUNCTION strata_outbox_orgs();", "destructive"},
		{"truncate", "-- strata:phase contract\nTRUNCATE memories;", "truncate"},
		{"validated check", "-- strata:phase expand\nALTER TABLE memories ADD CONSTRAINT c CHECK (kind <> '');", "not valid"},
		{"check not valid", "-- strata:phase expand\nALTER TABLE memories ADD CONSTRAINT c CHECK (kind <> '') NOT VALID;", ""},
		{"unique constraint", "-- strata:phase expand\nALTER TABLE memories ADD CONSTRAINT u UNIQUE (org_id, kind);", "using index"},
		{"index on existing table", "-- strata:phase expand\nCREATE INDEX m_kind ON memories (kind);", "concurrently"},
		{"concurrent index in a transaction", "-- strata:phase expand\nCREATE INDEX CONCURRENTLY m_kind ON memories (kind);", "no-transaction"},
		{"concurrent index not re-runnable", "-- strata:phase expand\n-- strata:no-transaction\nCREATE INDEX CONCURRENTLY m_kind ON memories (kind);", "drop index concurrently if exists m_kind"},
		{"concurrent index", "-- strata:phase expand\n-- strata:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS m_kind;\nCREATE INDEX CONCURRENTLY m_kind ON memories (kind);", ""},
		{"unbatched update", "-- strata:phase expand\nUPDATE job_steps SET first_started_at = started_at;", "batches"},
		{"update in a DO block", "-- strata:phase expand\nDO $$ BEGIN UPDATE job_steps SET first_started_at = started_at; END $$;", "batches"},
		{"unbatched delete", "-- strata:phase contract\nDELETE FROM memories WHERE kind = 'x';", "batches"},
		{"update of a new table", "-- strata:phase expand\nCREATE TABLE t_new (id int);\nUPDATE t_new SET id = 1;", ""},
		{"batched backfill", "-- strata:phase expand\n-- strata:no-transaction\n" +
			"DO $$ DECLARE n int; BEGIN LOOP\n" +
			"  UPDATE job_steps SET first_started_at = started_at WHERE (org_id, job_id, step_id) IN (\n" +
			"    SELECT org_id, job_id, step_id FROM job_steps WHERE first_started_at IS NULL LIMIT 1000);\n" +
			"  GET DIAGNOSTICS n = ROW_COUNT; EXIT WHEN n = 0; COMMIT;\n" +
			"END LOOP; END $$;", ""},
		{"batched without commit", "-- strata:phase expand\n-- strata:no-transaction\n" +
			"DO $$ BEGIN UPDATE job_steps SET first_started_at = started_at WHERE step_id IN (SELECT step_id FROM job_steps LIMIT 10); END $$;", "batches"},
		{"vacuum full", "-- strata:phase contract\n-- strata:no-transaction\nVACUUM FULL memories;", "rewrites"},
	}
	for i, c := range cases {
		file := fmt.Sprintf("%04d_case.sql", 9000+i)
		ms, err := pg.LoadMigrations(fstest.MapFS{file: {Data: []byte(c.sql)}})
		require.NoError(t, err, c.name)
		got := strings.Join(lint(ms[0], tables), "\n")
		if c.want == "" {
			require.Empty(t, got, c.name)
		} else {
			require.Contains(t, got, c.want, c.name)
		}
	}
}

var (
	reComment    = regexp.MustCompile(`(?s)/\*.*?\*/|--[^\n]*`)
	reSpace      = regexp.MustCompile(`\s+`)
	reCreate     = regexp.MustCompile(`(?i)\bcreate\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?(?:public\.)?([a-z_][a-z0-9_]*)\s*[(]`)
	reAlter      = regexp.MustCompile(`^alter table (?:if exists )?(?:only )?(?:public\.)?([a-z0-9_]+)`)
	reIndex      = regexp.MustCompile(`^create (?:unique )?index (concurrently )?(?:if not exists )?([a-z0-9_]*) ?on (?:only )?(?:public\.)?([a-z0-9_]+)`)
	reDropIndexC = regexp.MustCompile(`^drop index concurrently if exists (?:public\.)?([a-z0-9_]+)$`)
	reWrite      = regexp.MustCompile(`\b(?:update (?:only )?|delete from (?:only )?)(?:public\.)?([a-z0-9_]+)`)
	reAddNotNull = regexp.MustCompile(`add column (?:if not exists )?[a-z0-9_]+ [^,]*\bnot null\b`)
	reVolatile   = regexp.MustCompile(`\bdefault (?:gen_random_uuid|random|clock_timestamp|timeofday|nextval|uuid_generate_v4)\(`)
	reDestroy    = regexp.MustCompile(`\b(?:drop column|drop constraint|drop default|rename|set not null|set data type|alter column [a-z0-9_]+ type|set (?:un)?logged|set tablespace)\b`)
)

// createdTables names the tables a file creates (the static CREATE TABLE statements).
func createdTables(sql string) []string {
	var out []string
	for _, m := range reCreate.FindAllStringSubmatch(reComment.ReplaceAllString(sql, " "), -1) {
		out = append(out, strings.ToLower(m[1]))
	}
	return out
}

// lint returns the findings of migration m; existing holds the tables earlier files created.
func lint(m pg.Migration, existing map[string]bool) []string {
	var out []string
	bad := func(stmt, why string) { out = append(out, fmt.Sprintf("%s: %q: %s", m.File, stmt, why)) }
	if m.Phase == "" {
		out = append(out, m.File+": declares no phase (first line: -- strata:phase expand, or -- strata:phase contract [requires NNNN])")
	}
	expand := m.Phase != pg.PhaseContract
	fresh := map[string]bool{}
	for _, n := range createdTables(m.SQL) {
		fresh[n] = true
	}
	old := func(table string) bool { return existing[table] && !fresh[table] }
	dropped := map[string]bool{} // indexes a no-transaction file drops first (re-runnable)
	for _, raw := range pg.SplitStatements(m.SQL) {
		s := strings.ToLower(strings.TrimSpace(reSpace.ReplaceAllString(reComment.ReplaceAllString(raw, " "), " ")))
		short := s
		if len(short) > 80 {
			short = short[:80] + "…"
		}
		switch {
		case strings.HasPrefix(s, "drop index concurrently if exists ") && m.NoTransaction:
			if g := reDropIndexC.FindStringSubmatch(s); g != nil {
				dropped[g[1]] = true
			}
			continue // only an index of this file's own CREATE INDEX may follow (checked there)
		case strings.HasPrefix(s, "drop "):
			if expand {
				bad(short, "destructive in an expand migration: drop it in a contract migration a release later")
			}
		case strings.HasPrefix(s, "truncate"):
			bad(short, "truncate removes what the running release reads: delete in batches, in a contract migration")
		case strings.HasPrefix(s, "vacuum full") || strings.HasPrefix(s, "cluster") || strings.HasPrefix(s, "reindex") && !strings.Contains(s, "concurrently"):
			bad(short, "rewrites the table under an exclusive lock")
		}
		if g := reAlter.FindStringSubmatch(s); g != nil {
			table := g[1]
			if expand && reDestroy.MatchString(s) {
				bad(short, "destructive in an expand migration ("+reDestroy.FindString(s)+" breaks the previous release): do it in a contract migration a release later")
			}
			if old(table) {
				if reAddNotNull.MatchString(s) && !strings.Contains(s, " default ") {
					bad(short, "a not null without a default: the previous release's inserts would fail")
				}
				if reVolatile.MatchString(s) {
					bad(short, "a column with a volatile default rewrites the table under its lock: add it without, backfill in batches")
				}
				if strings.Contains(s, "add constraint") || strings.Contains(s, "add check") || strings.Contains(s, "add foreign key") {
					if (strings.Contains(s, " unique") || strings.Contains(s, "primary key")) && !strings.Contains(s, "using index") {
						bad(short, "a unique or primary key constraint builds its index under the lock: build it CONCURRENTLY, then add the constraint using index")
					} else if (strings.Contains(s, " check") || strings.Contains(s, "foreign key") || strings.Contains(s, " references ")) && !strings.Contains(s, "not valid") {
						bad(short, "validates every row under the lock: add it not valid, then validate constraint in its own statement")
					}
				}
			}
		}
		if g := reIndex.FindStringSubmatch(s); g != nil {
			concurrently, name, table := g[1] != "", g[2], g[3]
			switch {
			case concurrently && !m.NoTransaction:
				bad(short, "create index concurrently cannot run in a transaction: put it in a strata:no-transaction file")
			case concurrently && !dropped[name]:
				bad(short, "not re-runnable: precede it with drop index concurrently if exists "+name+" (a failed build leaves an invalid index)")
			case !concurrently && old(table):
				bad(short, "locks writes to "+table+" for the whole build: create index concurrently, in a strata:no-transaction file")
			}
		}
		for _, g := range reWrite.FindAllStringSubmatch(s, -1) {
			if !old(g[1]) {
				continue
			}
			batched := m.NoTransaction && strings.HasPrefix(s, "do ") && strings.Contains(s, "commit") && strings.Contains(s, " limit ")
			if !batched {
				bad(short, "rewrites "+g[1]+" under one lock and one transaction: run it in batches that commit "+
					"(a DO loop with LIMIT and COMMIT in a strata:no-transaction file)")
			}
		}
	}
	return out
}
