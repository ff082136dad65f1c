#!/usr/bin/env bash
# make soak-load: the load test's soak as docs/benchmarks.md records it. It builds the server
# and the CLI, starts a real server binary on a database and Redis prefix of its own, probes
# the mixed agent workload's maximum (closed loop, 32 clients), then holds 70 % of it for
# SOAK_DURATION (default 10m) and fails when any request errs or p99 is 50 ms or more.
# Results: docs/bench/soak.json (the load test's report) and docs/bench/soak.txt (load
# average, server metrics before and after).
#
#   make soak-load                      # ~11 minutes
#   SOAK_DURATION=2m make soak-load     # a shorter run (not the recorded target)
#
# Postgres: unless SOAK_PG names a server, the soak starts a Postgres 15 of its own for the
# run (Debian's binaries, a temporary data directory, a free port) with the compose stack's
# settings (docker-compose.yml: shared_buffers 256MB, maintenance_work_mem 512MB) and
# Postgres's defaults otherwise — autovacuum on, fsync, synchronous_commit and
# full_page_writes on, checkpoints every 5 minutes. The machine's own Postgres is set up for
# CI (autovacuum off: /etc/postgresql/15/main/conf.d/90-ci.conf), and without autovacuum the
# rows the mix updates keep every dead version, which no production server does.
#
#   SOAK_PG=postgres://postgres@127.0.0.1:5432 make soak-load   # the machine's server instead
#
# The server's pool is SOAK_DB_CONNS connections (default 8: server, Postgres, Redis and the
# load generator share the machine's cores; docs/benchmarks.md has the comparison), and the
# main phase starts SOAK_SETTLE (default 30s) after the probe.
#
#   SOAK_RATE=1500 SOAK_MAX_P99=25ms make soak-load   # a fixed rate instead of 70 % of a probe
#
# While it runs, the server's RSS, Go heap and goroutines are sampled every 30 s
# (docs/bench/soak-memory.tsv), a 30 s CPU profile is taken in the middle of the main phase
# and allocation profiles at its start and end: docs/bench/soak-profile.txt has the top CPU
# functions and the top allocation sites over the main phase (go tool pprof -base).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(bash scripts/ensure-go.sh)}
DURATION=${SOAK_DURATION:-10m}
PROBE=${SOAK_PROBE:-60s}
PORT=${SOAK_PORT:-18089}
DB=strata_soak
OUT=docs/bench
mkdir -p "$OUT"
tmp=$(mktemp -d)
server_pid= sampler_pid= profiler_pid= pgroot=
PGBIN=/usr/lib/postgresql/15/bin
as_pg() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi; }
cleanup() {
	for p in $sampler_pid $profiler_pid; do kill "$p" 2>/dev/null || true; done
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	if [ -n "$pgroot" ]; then as_pg "$PGBIN/pg_ctl" -D "$pgroot/data" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$pgroot"; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

say() { printf '\033[1;34m[soak]\033[0m %s\n' "$*" >&2; }

if [ -n "${SOAK_PG:-}" ]; then
	PGBASE=$SOAK_PG
else
	[ -x "$PGBIN/initdb" ] || { say "no $PGBIN/initdb: install postgresql-15 (bash scripts/stores.sh), or set SOAK_PG to a server"; exit 1; }
	pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	pgroot=$(mktemp -d /tmp/strata-soak-pg.XXXXXX)
	chmod 755 "$pgroot"
	if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$pgroot"; fi
	say "a Postgres of its own on port $pgport (the compose stack's settings, autovacuum on)"
	as_pg "$PGBIN/initdb" -D "$pgroot/data" -U postgres --auth=trust -E UTF8 --no-instructions >/dev/null
	as_pg "$PGBIN/pg_ctl" -D "$pgroot/data" -l "$pgroot/log" -w -t 60 -o "-p $pgport -k $pgroot -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c maintenance_work_mem=512MB -c max_connections=200" start >/dev/null
	PGBASE=postgres://postgres@127.0.0.1:$pgport
fi

say "building the server and the CLI"
"$GO" build -o "$tmp/server" ./cmd/server
"$GO" build -o "$tmp/strata" ./cmd/strata

say "a fresh database $DB and Redis prefix soak:"
psql "$PGBASE/postgres" -qAtc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
redis-cli -u "${SOAK_REDIS:-redis://127.0.0.1:6379/0}" --scan --pattern 'soak:*' | xargs -r -n 500 redis-cli -u "${SOAK_REDIS:-redis://127.0.0.1:6379/0}" del >/dev/null

admin=${SOAK_ADMIN_KEY:-soak-admin-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export STRATA_DATABASE_URL="$PGBASE/$DB?sslmode=disable" STRATA_REDIS_PREFIX=soak: \
	STRATA_HTTP_ADDR=127.0.0.1:$PORT STRATA_ADMIN_KEY=$admin STRATA_LOG_LEVEL=warn \
	STRATA_DB_MAX_CONNS=${SOAK_DB_CONNS:-8}
"$tmp/server" migrate >/dev/null
"$tmp/server" serve >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
	sleep 0.2
done
curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null || { cat "$tmp/server.log" >&2; say "the server did not become ready"; exit 1; }

metrics() { curl -fsS -H "Authorization: Bearer $admin" "http://127.0.0.1:$PORT/metrics" |
	grep -E '^strata_pg_(db|pool)_[a-z_]*_total ' || true; }
{
	echo "soak $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), duration $DURATION, probe $PROBE"
	echo "load before: $(cat /proc/loadavg)"
	echo "postgres: $( [ -n "$pgroot" ] && echo "its own for the run" || echo "$PGBASE"), $(psql "$PGBASE/postgres" -qAtc "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings WHERE name IN ('autovacuum', 'shared_buffers', 'synchronous_commit', 'fsync', 'checkpoint_timeout', 'max_wal_size')"), STRATA_DB_MAX_CONNS=$STRATA_DB_MAX_CONNS"
	echo "/metrics before:"
	metrics
} >"$tmp/soak.txt"

secs() { # a Go duration of whole minutes or seconds (10m, 90s) in seconds
	case "$1" in *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;; esac
}
if [ -n "${SOAK_RATE:-}" ]; then
	rate_args=(--rate "$SOAK_RATE")
	lead=20 # setup (keys, jobs, memories) before the main phase
	say "$SOAK_RATE req/s for $DURATION"
else
	rate_args=(--rate-fraction 0.7 --probe "$PROBE" --settle "${SOAK_SETTLE:-30s}")
	lead=$(($(secs "$PROBE") + $(secs "${SOAK_SETTLE:-30s}") + 20))
	say "probe $PROBE (closed loop, 32 clients), then 70 % of its maximum for $DURATION"
fi
main=$(secs "$DURATION")

# The sampler: the server's memory every 30 s, and its profiles over the main phase.
pprof() { curl -fsS -H "Authorization: Bearer $admin" "http://127.0.0.1:$PORT/debug/pprof/$1" -o "$2"; }
sample() {
	local t0=$SECONDS
	printf 'elapsed_s\trss_mb\theap_inuse_mb\tgoroutines\n'
	while kill -0 "$server_pid" 2>/dev/null; do
		local m
		m=$(curl -fsS -H "Authorization: Bearer $admin" "http://127.0.0.1:$PORT/metrics" 2>/dev/null) || break
		printf '%d\t%s\t%s\t%s\n' $((SECONDS - t0)) \
			"$(awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$server_pid/status")" \
			"$(echo "$m" | awk '/^go_memstats_heap_inuse_bytes / {printf "%.1f", $2 / 1048576}')" \
			"$(echo "$m" | awk '/^go_goroutines / {print $2}')"
		sleep 30
	done
}
sample >"$tmp/memory.tsv" &
sampler_pid=$!
(
	sleep "$lead" && pprof allocs "$tmp/allocs-start.pb.gz"
	sleep $((main / 2 > 15 ? main / 2 - 15 : 0)) && pprof "profile?seconds=30" "$tmp/cpu.pb.gz"
	sleep $((main / 2 > 25 ? main / 2 - 25 : 0)) && pprof allocs "$tmp/allocs-end.pb.gz"
) &
profiler_pid=$!

rc=0
"$tmp/strata" loadtest --url "http://127.0.0.1:$PORT" --api-key "$admin" "${rate_args[@]}" \
	--duration "$DURATION" --concurrency 32 --max-p99 "${SOAK_MAX_P99:-50ms}" --max-errors 0 -o json \
	>"$tmp/soak.json" || rc=$?
wait "$profiler_pid" || say "a profile was not taken (the run was shorter than the sampler's schedule)"
kill "$sampler_pid" 2>/dev/null || true
{
	echo "loadtest exit $rc"
	echo "load after: $(cat /proc/loadavg)"
	echo "/metrics after:"
	metrics
} >>"$tmp/soak.txt"
cp "$tmp/soak.json" "$OUT/soak.json"
cp "$tmp/soak.txt" "$OUT/soak.txt"
cp "$tmp/memory.tsv" "$OUT/soak-memory.tsv"
if [ -f "$tmp/allocs-end.pb.gz" ] && [ -f "$tmp/cpu.pb.gz" ]; then
	{
		echo "CPU, 30 s in the middle of the main phase (go tool pprof -top):"
		"$GO" tool pprof -top -nodecount=40 "$tmp/server" "$tmp/cpu.pb.gz" 2>/dev/null
		echo
		echo "Allocations over the main phase, by objects (go tool pprof -sample_index=alloc_objects -top -base start end):"
		"$GO" tool pprof -sample_index=alloc_objects -top -nodecount=40 -base "$tmp/allocs-start.pb.gz" "$tmp/server" "$tmp/allocs-end.pb.gz" 2>/dev/null
	} >"$OUT/soak-profile.txt"
fi
say "wrote $OUT/soak.json, $OUT/soak.txt, $OUT/soak-memory.tsv and $OUT/soak-profile.txt (loadtest exit $rc)"
exit "$rc"
