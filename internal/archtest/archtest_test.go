// Package archtest checks the package floors of docs/architecture.md against the real
// import graph: imports go down only, tiers never import each other, only internal/app reads
// config.Config, and nothing below the transport speaks HTTP unless it is an HTTP client.
package archtest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/strata-mem/strata/"

// floors lists every server package by floor (docs/architecture.md). A package that is not
// here must be outside the server (outside) or test support (support), or the test fails:
// a new package has to be placed deliberately.
var floors = map[string]int{
	"internal/strata": 0, "internal/config": 0, "internal/service": 0,
	"internal/progress":   0, // a leaf: the CLI's bars, and `server partition`'s
	"internal/tracecause": 0, // a leaf: a request's traceparent for work queued later on its behalf (issue 44)
	"internal/answercap":  0, // a leaf: the size cap on what is read of the model's and the embedder's answers (issue 57)
	"internal/pg":         10, "internal/redisconn": 10, "internal/embed": 10,
	"internal/queue": 11, "migrations": 11, // both build on pg
	"internal/partition": 11, // the online move to the partitioned layout: runs migrations' SQL functions
	"internal/working":   20, "internal/episodic": 20, "internal/jobs": 20, "internal/semantic": 20,
	"internal/keyvalue": 20, "internal/summaries": 20, "internal/policy": 20, "internal/auth": 20, "internal/idempotency": 20, "internal/audit": 20,
	"internal/outbox":      20, // the event outbox: emitted in the writer's transaction (httpapi, gdpr, extraction, watch)
	"internal/graph":       20, // entities and bi-temporal relations (issue 43)
	"internal/turncontext": 30, "internal/groupcommit": 30, "internal/gdpr": 30, "internal/eviction": 30,
	"internal/consolidation": 30, "internal/joblog": 30, "internal/extraction": 29, // gdpr erases extraction's state
	"internal/webhooks":  30, // subscriptions, the dispatcher and the delivery worker (an HTTP client)
	"internal/watch":     31, // stalled jobs and erasure deadlines become events: reads jobs and gdpr
	"internal/mcp":       40, // the MCP server and its tool table, built from the OpenAPI document
	"internal/console":   40, // the web console: its sessions and pages; calls the API in-process
	"internal/mem0":      40, // the Mem0-compatible API at /mem0: translates into in-process /v1 calls
	"internal/httpops":   40, // what every HTTP surface shares: request ids, access log, metrics, problems, health
	"internal/api":       41, // the wire contract of /v1: types and operation docs (/v1/tools answers mcp's)
	"internal/httpapi":   42, // the transport: handlers, the unit of work; mounts the MCP server and the console
	"internal/telemetry": 45, // OpenTelemetry: imports nothing of ours; only app installs its instruments (issue 44)
	"internal/app":       50, "cmd/server": 60,
}

// outside speak HTTP to a server and import nothing of it, except sharedWithOutside.
var outside = []string{"client", "examples/supervisor", "internal/cli", "internal/demo", "internal/loadtest", "internal/benchreport", "internal/retrievaleval",
	"cmd/strata", "cmd/benchreport"}

// sharedWithOutside may be imported by outside packages: the CLI's offline audit verifier
// (strata audit verify) recomputes the chain and checks anchors with the server's own code.
// internal/progress draws the CLI's bars and `server partition`'s.
var sharedWithOutside = []string{"internal/audit", "internal/strata", "internal/progress"}

// support packages exist for tests and tools and may import anything.
var support = []string{"internal/testenv", "internal/apptest", "internal/archtest", "internal/crashtest", "internal/deploytest",
	"internal/reliability", "internal/readme", "internal/langgraphtest", "internal/openaiagentstest", "internal/pythontest",
	"internal/typescripttest", "internal/steptest", "internal/consoletest", "internal/llmtest", "internal/embed/internal/genmodel",
	"internal/embed/internal/genmodel/gen"}

// httpClients are the packages below the transport allowed net/http: they call HTTP APIs
// (embedders, the LLM).
var httpClients = []string{"internal/answercap", "internal/embed", "internal/consolidation", "internal/extraction", "internal/webhooks"}

func imports(t *testing.T) map[string][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v (the test needs the go tool on PATH)", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(line, "|")
		pkg = strings.TrimPrefix(pkg, module)
		graph[pkg] = nil
		for _, imp := range strings.Split(imps, ",") {
			if imp != "" {
				graph[pkg] = append(graph[pkg], imp)
			}
		}
	}
	return graph
}

func TestImportsFollowTheFloors(t *testing.T) {
	t.Parallel()
	for pkg, imps := range imports(t) {
		if slices.Contains(support, pkg) {
			continue
		}
		floor, server := floors[pkg]
		if !server && !slices.Contains(outside, pkg) {
			t.Errorf("%s is on no floor: place it in internal/archtest (and docs/architecture.md)", pkg)
			continue
		}
		for _, imp := range imps {
			ours, isOurs := strings.CutPrefix(imp, module)
			if !isOurs {
				if (imp == "net/http" || strings.HasPrefix(imp, "github.com/danielgtaylor/huma")) && server &&
					floor < 40 && !slices.Contains(httpClients, pkg) {
					t.Errorf("%s (floor %d) imports %s: only the transport speaks HTTP", pkg, floor, imp)
				}
				continue
			}
			if !server { // outside the server: only other outside packages
				if _, isServer := floors[ours]; isServer && !slices.Contains(sharedWithOutside, ours) {
					t.Errorf("%s is outside the server but imports %s", pkg, ours)
				}
				continue
			}
			if ours == "internal/config" && pkg != "internal/app" {
				t.Errorf("%s imports internal/config: only internal/app reads the configuration", pkg)
			}
			to, ok := floors[ours]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is not a server package", pkg, ours)
			case to >= floor && !(floor == 0 && to == 0 && ours == "internal/strata" && pkg == "internal/config"):
				t.Errorf("%s (floor %d) imports %s (floor %d): imports go down only", pkg, floor, ours, to)
			}
		}
	}
}
