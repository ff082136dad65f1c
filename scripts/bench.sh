#!/usr/bin/env bash
# make bench: every tier's benchmark with its raw-store floor side by side, then the summary
# table of docs/benchmarks.md (Strata figure, floor figure, ratio, target) with the machine
# description and these exact commands.
#
#   make bench                        # ~18 minutes on 2 cores
#   STRATA_BENCH_100K=1 make bench    # also the 100k-memory semantic benchmark (~15 more)
#   BENCH_COUNT=1 make bench          # one run of each instead of three
#   STRATA_BENCH_100K=1 BENCH_REUSE_LATEST=1 make bench   # only the 100k benchmark; tier rows as recorded
#
# Raw outputs land in docs/bench/ (latest.txt, and semantic100k.txt when the 100k benchmark
# ran: later runs without STRATA_BENCH_100K reuse it for the semantic rows, marked as such).
# The machine may be shared: ratios within one run are what count; the load average before
# and after is recorded with the table.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(bash scripts/ensure-go.sh)}
COUNT=${BENCH_COUNT:-3}
OUT=docs/bench
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmds=$tmp/commands.txt
: >"$cmds"
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no -- . ':!docs' 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi
echo "# run: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, load average before $load_start" >"$tmp/latest.txt"

failed=()
bench() { # bench <display command> <go test args...>; a failure is reported, the rest still runs
	local shown=$1
	shift
	echo "$shown" >>"$cmds"
	echo ">>> $shown" >&2
	if ! "$GO" test "$@" 2>&1 | tee -a "$tmp/latest.txt" >&2; then
		failed+=("$shown")
	fi
}

if [ "${BENCH_REUSE_LATEST:-}" = 1 ] && [ -f "$OUT/latest.txt" ]; then
	# Only the 100k benchmark (with STRATA_BENCH_100K=1): the tier rows come from the
	# recorded run, whose commands are listed as they ran.
	cat "$OUT/latest.commands" >>"$cmds" 2>/dev/null || true
	echo "(tier rows: from the recorded $OUT/latest.txt, $(head -1 "$OUT/latest.txt" | sed 's/^# run: //'))" >>"$cmds"
	cp "$OUT/latest.txt" "$tmp/latest.txt"
	cp "$cmds" "$tmp/latest.commands"
else
	bench "go test -run '^\$' -bench BenchmarkHTTPTargets -benchtime 4000x -count $COUNT ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkHTTPTargets' -benchtime 4000x -count "$COUNT" -timeout 30m ./internal/httpapi/
	bench "go test -run '^\$' -bench BenchmarkWorkingState -benchtime 2000x -count $COUNT ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkWorkingState' -benchtime 2000x -count "$COUNT" -timeout 30m ./internal/httpapi/
	bench "go test -run '^\$' -bench 'BenchmarkKV' -benchtime 5000x -count $COUNT ./internal/keyvalue/ ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkKV' -benchtime 5000x -count "$COUNT" -timeout 30m ./internal/keyvalue/ ./internal/httpapi/
	bench "go test -run '^\$' -bench BenchmarkEventAppend -benchtime 3000x -count $COUNT ./internal/episodic/" \
		-run '^$' -bench 'BenchmarkEventAppend' -benchtime 3000x -count "$COUNT" -timeout 30m ./internal/episodic/
	bench "go test -run '^\$' -bench BenchmarkResume -benchtime 3000x -count 1 ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkResume' -benchtime 3000x -count 1 -timeout 30m ./internal/httpapi/
	# Events (issue 41, item 5): event to delivery open loop at 500 writes/s for 60 s, and
	# what a webhook subscription costs the load-test mix (alternating rounds, ~3 minutes).
	bench "go test -run '^\$' -bench BenchmarkEventDelivery -benchtime 1x ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkEventDelivery' -benchtime 1x -timeout 10m ./internal/httpapi/
	bench "go test -run '^\$' -bench BenchmarkEmissionCost -benchtime 1x ./internal/loadtest/" \
		-run '^$' -bench 'BenchmarkEmissionCost' -benchtime 1x -timeout 20m ./internal/loadtest/
	echo "STRATA_BENCH_CONTEXT=1 go test -run '^\$' -bench BenchmarkContext100k -benchtime 2000x -count 1 -v ./internal/httpapi/" >>"$cmds"
	echo ">>> context 100k" >&2
	if ! STRATA_BENCH_CONTEXT=1 "$GO" test -run '^$' -bench 'BenchmarkContext100k' -benchtime 2000x -count 1 -timeout 30m -v ./internal/httpapi/ 2>&1 |
		tee -a "$tmp/latest.txt" >&2; then
		failed+=("context 100k")
	fi
	# The stores users would pick instead, through their own clients (issue 26: LangGraph's
	# PostgresSaver, mem0ai's open-source Memory), same Postgres server, same run.
	bench "go test -run '^\$' -bench BenchmarkLangGraphSaver -benchtime 1x ./internal/langgraphtest/" \
		-run '^$' -bench 'BenchmarkLangGraphSaver' -benchtime 1x -timeout 20m -v ./internal/langgraphtest/
	bench "go test -run '^\$' -bench BenchmarkMem0Peer -benchtime 1x ./internal/mem0/" \
		-run '^$' -bench 'BenchmarkMem0Peer' -benchtime 1x -timeout 20m ./internal/mem0/
	# Batch ingest (issue 42, item 4): POST /v1/memories/batch against a bare batched INSERT
	# into the same HNSW-indexed partition, interleaved batch by batch; one round per -count
	# (a server and database of its own each), 3 batches of 1,000 per side per round.
	bench "go test -run '^\$' -bench BenchmarkMemoryBatch -benchtime 3x -count $COUNT ./internal/httpapi/" \
		-run '^$' -bench 'BenchmarkMemoryBatch' -benchtime 3x -count "$COUNT" -timeout 30m ./internal/httpapi/
	cp "$cmds" "$tmp/latest.commands"
fi

inputs=("$OUT/latest.txt")
if [ "${STRATA_BENCH_100K:-}" = 1 ]; then
	{
		echo "# run: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, load average before $(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$tmp/semantic100k.txt"
	echo "STRATA_BENCH_100K=1 go test -run '^\$' -bench BenchmarkSemantic100k -benchtime 200x -timeout 40m -v ./internal/semantic/" >>"$cmds"
	echo ">>> semantic 100k" >&2
	if STRATA_BENCH_100K=1 "$GO" test -run '^$' -bench 'BenchmarkSemantic100k' -benchtime 200x -timeout 40m -v ./internal/semantic/ 2>&1 |
		tee -a "$tmp/semantic100k.txt" >&2; then
		cp "$tmp/semantic100k.txt" "$OUT/semantic100k.txt"
		inputs+=("$OUT/semantic100k.txt")
	else
		failed+=("semantic 100k")
	fi
elif [ -f "$OUT/semantic100k.txt" ]; then
	echo "(semantic rows: from the recorded $OUT/semantic100k.txt; STRATA_BENCH_100K=1 make bench reruns it)" >>"$cmds"
	inputs+=("$OUT/semantic100k.txt")
fi
cp "$tmp/latest.txt" "$OUT/latest.txt"
grep -v '^(' "$tmp/latest.commands" >"$OUT/latest.commands" || true
"$GO" run ./cmd/benchreport -doc docs/benchmarks.md -commands "$cmds" -load-start "$load_start" \
	-commit "$commit" "${inputs[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'benchmark run failed (its rows say "not run"): %s\n' "${failed[@]}" >&2
	exit 1
fi
