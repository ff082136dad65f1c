// Command benchreport reads `go test -bench` outputs and writes the generated summary table
// of docs/benchmarks.md (Strata figure, floor figure, ratio, target). scripts/bench.sh
// (make bench) runs it after the benchmarks:
//
//	benchreport -doc docs/benchmarks.md -commands cmds.txt -load-start "1.0 0.9 0.8" run.txt [older.txt ...]
//
// Each input may start with a line "# run: <description>" naming it in the table. A row
// takes its figures from the first input that ran its benchmark.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/benchreport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run() error {
	doc := flag.String("doc", "docs/benchmarks.md", "the document whose generated section is replaced")
	cmds := flag.String("commands", "", "a file with the commands that produced the inputs, one per line")
	loadStart := flag.String("load-start", "", "load average before the run (default: now)")
	commit := flag.String("commit", "", "the commit measured")
	stdout := flag.Bool("stdout", false, "print the section instead of writing -doc")
	flag.Parse()
	if flag.NArg() == 0 {
		return fmt.Errorf("usage: benchreport [flags] bench-output.txt [older-output.txt ...]")
	}
	var inputs []benchreport.Input
	var sources []string
	for _, path := range flag.Args() {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := benchreport.Parse(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		label := filepath.Base(path)
		desc := ""
		if line, _, _ := strings.Cut(string(raw), "\n"); strings.HasPrefix(line, "# run: ") {
			desc = strings.TrimPrefix(line, "# run: ")
		}
		inputs = append(inputs, benchreport.Input{Label: label, Out: out})
		sources = append(sources, fmt.Sprintf("`%s`: %d results%s", path, len(out.Results), map[bool]string{true: "; " + desc, false: ""}[desc != ""]))
	}
	var commands []string
	if *cmds != "" {
		b, err := os.ReadFile(*cmds)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.TrimSpace(l) != "" {
				commands = append(commands, l)
			}
		}
	}
	m := machine(inputs)
	m.Commit = *commit
	if *loadStart != "" {
		m.LoadStart = *loadStart
	}
	rows := benchreport.Evaluate(benchreport.Rules, inputs)
	var buf bytes.Buffer
	benchreport.Render(&buf, rows, m, commands, sources)
	if *stdout {
		_, err := os.Stdout.Write(buf.Bytes())
		return err
	}
	old, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	updated, err := benchreport.Splice(string(old), buf.String())
	if err != nil {
		return err
	}
	if err := os.WriteFile(*doc, []byte(updated), 0o644); err != nil {
		return err
	}
	met, missed, absent := 0, 0, 0
	for i := range rows {
		switch {
		case !rows[i].Present():
			absent++
		case rows[i].Rule.Target != nil && rows[i].Rule.Target.OK(&rows[i]):
			met++
		case rows[i].Rule.Target != nil:
			missed++
			why := ""
			if m := rows[i].Rule.Target.Missed; m != nil {
				why = ": " + strings.Join(m(&rows[i]), ", ")
			}
			if rows[i].Rule.Target.Meets(&rows[i], benchreport.Mid) {
				why += " (the median meets it; the worse end of the range does not)"
			}
			fmt.Printf("target missed: %s (%s)%s\n", rows[i].Rule.Measure, rows[i].Rule.Target.Desc, why)
		}
	}
	fmt.Printf("wrote %s: %d rows, %d targets met, %d missed, %d rows not run\n", *doc, len(rows), met, missed, absent)
	return nil
}

// machine describes this machine and the stores in STRATA_DATABASE_URL / STRATA_REDIS_URL.
func machine(inputs []benchreport.Input) benchreport.Machine {
	m := benchreport.Machine{
		Date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Cores:     runtime.NumCPU(),
		Go:        runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		LoadStart: loadavg(),
	}
	m.LoadEnd = loadavg()
	m.CPU = procField("/proc/cpuinfo", "model name")
	for _, in := range inputs {
		if c := in.Out.Env["cpu"]; c != "" && m.CPU == "" {
			m.CPU = c
		}
	}
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		var n int64
		fmt.Sscanf(kb, "%d", &n)
		m.Memory = fmt.Sprintf("%.1f GiB", float64(n)/(1<<20))
	}
	m.OS = osRelease()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dsn := os.Getenv("STRATA_DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	// The server is what is described: connect to its maintenance database, so a DSN
	// naming a database that does not exist yet (no `make run` on this machine) still works.
	var c *pgx.Conn
	cfg, err := pgx.ParseConfig(dsn)
	if err == nil {
		cfg.Database = "postgres"
		c, err = pgx.ConnectConfig(ctx, cfg)
	}
	if err == nil {
		var ver, sb, sc, mc, preload string
		var pss bool
		_ = c.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('shared_buffers'),
			current_setting('synchronous_commit'), current_setting('max_connections'), current_setting('shared_preload_libraries'),
			EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')`).Scan(&ver, &sb, &sc, &mc, &preload, &pss)
		var vec string
		_ = c.QueryRow(ctx, `SELECT coalesce((SELECT default_version FROM pg_available_extensions WHERE name = 'vector'), 'absent')`).Scan(&vec)
		m.Postgres = fmt.Sprintf("%s, pgvector %s, shared_buffers %s, synchronous_commit %s, max_connections %s", ver, vec, sb, sc, mc)
		if !strings.Contains(preload, "pg_stat_statements") {
			m.Notes = append(m.Notes, fmt.Sprintf("pg_stat_statements is %s but not in shared_preload_libraries (it needs a restart), so per-statement "+
				"Postgres stats are not collected; `/metrics` exports pgxpool statistics and the database's pg_stat_database counters instead.", map[bool]string{true: "installed", false: "not installed"}[pss]))
		}
		c.Close(ctx)
	} else {
		m.Postgres = "unreachable: " + err.Error()
	}
	ru := os.Getenv("STRATA_REDIS_URL")
	if ru == "" {
		ru = "redis://127.0.0.1:6379/0"
	}
	if opt, err := redis.ParseURL(ru); err == nil {
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		if info, err := rdb.Info(ctx, "server", "persistence").Result(); err == nil {
			ver := infoField(info, "redis_version")
			aof := infoField(info, "aof_enabled")
			m.Redis = fmt.Sprintf("%s, AOF %s", ver, map[bool]string{true: "on", false: "off"}[aof == "1"])
		}
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func osRelease() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}
