// Package benchreport turns `go test -bench` output into the table of docs/benchmarks.md:
// for every measure, Strata's figure, the raw store's floor figure measured in the same
// run, their ratio and the target it is held to. scripts/bench.sh (make bench) runs the
// benchmarks and then cmd/benchreport, which uses this package.
package benchreport

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Result is one line of benchmark output: one run of one (sub-)benchmark.
type Result struct {
	Name    string             // without the -GOMAXPROCS suffix, e.g. BenchmarkHTTPTargets/state-get/c=16
	N       int64              // iterations
	Metrics map[string]float64 // unit → value, e.g. "ns/op", "speed", "p99-µs"
	// Round is n for a sub-benchmark named <name>/round=n: a benchmark that interleaves its
	// rounds inside one run (Strata, peer, Strata, peer, …) reports each round as one, and
	// each round counts as a run of <name>, as a -count run does. 0 otherwise.
	Round int
}

// Output is everything parsed from one or more benchmark outputs.
type Output struct {
	Results []Result
	// Env holds the header lines go test prints (goos, goarch, pkg, cpu).
	Env map[string]string
	// Logs holds b.Log lines by benchmark name (indented lines after a benchmark's name).
	Logs map[string][]string
}

var (
	lineRE  = regexp.MustCompile(`^(Benchmark\S+)\s+(\d+)\s+(.+)$`)
	procsRE = regexp.MustCompile(`-\d+$`)
	nameRE  = regexp.MustCompile(`^(Benchmark\S+)$`)
	roundRE = regexp.MustCompile(`/round=(\d+)$`)
)

// baseName strips the -GOMAXPROCS suffix and a trailing /round=n, returning the round (0 if none).
func baseName(s string) (string, int) {
	s = procsRE.ReplaceAllString(s, "")
	if m := roundRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return strings.TrimSuffix(s, m[0]), n
	}
	return s, 0
}

// Parse reads go test -bench output (plain or -v). Lines that are not benchmark results are
// ignored, except the environment header and benchmark log lines.
func Parse(r io.Reader) (*Output, error) {
	out := &Output{Env: map[string]string{}, Logs: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	current := ""
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		for _, k := range []string{"goos", "goarch", "pkg", "cpu"} {
			if v, ok := strings.CutPrefix(line, k+": "); ok {
				if k == "pkg" {
					out.Env[k] = appendUnique(out.Env[k], v)
				} else {
					out.Env[k] = v
				}
			}
		}
		if m := lineRE.FindStringSubmatch(line); m != nil {
			if res, ok := parseResult(m); ok {
				out.Results = append(out.Results, res)
				current = res.Name
				continue
			}
		}
		if m := nameRE.FindStringSubmatch(trimmed); m != nil && !strings.Contains(line, "\t") {
			current, _ = baseName(m[1])
			continue
		}
		if current != "" && strings.HasPrefix(line, "    ") && trimmed != "" {
			// b.Log lines: "    bench_test.go:123: text".
			if _, text, ok := strings.Cut(trimmed, ": "); ok {
				out.Logs[current] = append(out.Logs[current], text)
			}
		}
	}
	return out, sc.Err()
}

func appendUnique(list, v string) string {
	for _, x := range strings.Split(list, ", ") {
		if x == v {
			return list
		}
	}
	if list == "" {
		return v
	}
	return list + ", " + v
}

func parseResult(m []string) (Result, bool) {
	n, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return Result{}, false
	}
	fields := strings.Fields(m[3])
	if len(fields)%2 != 0 {
		return Result{}, false
	}
	name, round := baseName(m[1])
	res := Result{Name: name, N: n, Metrics: map[string]float64{}, Round: round}
	for i := 0; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return Result{}, false
		}
		res.Metrics[fields[i+1]] = v
	}
	return res, true
}

// Runs returns the results of the benchmark called name, in output order: each -count run
// and each reported round is one.
func (o *Output) Runs(name string) []Result {
	var rs []Result
	for _, r := range o.Results {
		if r.Name == name {
			rs = append(rs, r)
		}
	}
	return rs
}
