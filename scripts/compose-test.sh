#!/usr/bin/env bash
# Proves docker-compose.yml: the stack builds, every service becomes healthy, and the
# `loadtest` profile runs 30 s against it with zero errors; then it is torn down (down -v).
#
# Made for machines where no image registry is reachable (only Debian's mirror and the Go
# module proxy): it builds local stand-ins tagged with the image names docker-compose.yml
# and the Dockerfile use, and skips every stand-in that already exists (reruns are fast):
#   debian base       debootstrap (minbase) from the configured Debian mirror
#   postgres image    Debian's Postgres 15 + the host's pgvector (scripts/stores.sh builds it),
#                     with a small entrypoint honouring POSTGRES_USER/_DB/_HOST_AUTH_METHOD
#   redis image       Debian's redis-server, protected mode off
#   builder image     this machine's Go toolchain and CA bundle
#   runtime image     a scratch base with a `nonroot` user (uid 65532) and the CA bundle
# A stand-in is a development substitute, labelled org.strata.standin=true: the postgres one
# is Postgres 15 whatever its tag says. A real Docker with registry access pulls the real
# images and needs none of this (STRATA_COMPOSE_STANDINS=0 skips them).
#
# Needs root (apt-get, debootstrap, dockerd). Uses a Docker engine that already answers;
# otherwise installs Debian's docker.io and starts a private dockerd on its own socket
# (stopped at the end), so `scripts/stores.sh` on the same host keeps using the host's
# stores. Docker Compose v2 is built from its Go module source when `docker compose` is
# missing. Published ports move off the host's 5432/6379/8080, so host services keep running.
# Artifacts are cached in $STRATA_COMPOSE_CACHE (default /var/cache/strata-compose).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${STRATA_COMPOSE_CACHE:-/var/cache/strata-compose}
COMPOSE_VERSION=${STRATA_COMPOSE_VERSION:-v2.40.3}
PROJECT=${STRATA_COMPOSE_PROJECT:-strata-compose-test}
LOAD_DURATION=${STRATA_COMPOSE_LOAD_DURATION:-30s}
export STRATA_COMPOSE_PG_PORT=${STRATA_COMPOSE_PG_PORT:-15432}
export STRATA_COMPOSE_REDIS_PORT=${STRATA_COMPOSE_REDIS_PORT:-16379}
export STRATA_COMPOSE_HTTP_PORT=${STRATA_COMPOSE_HTTP_PORT:-18080}
STANDIN_BASE=strata-standin/debian:bookworm
RUN_DIR=/run/strata-compose

t0=$(date +%s)
log() { printf '[compose-test +%ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }
die() { printf '[compose-test +%ss] FAILED: %s\n' "$(($(date +%s) - t0))" "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get, debootstrap and dockerd need it)"
export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$CACHE" "$RUN_DIR"

# --- packages ---------------------------------------------------------------------------
apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated = 0 ]; then
    log "apt-get update"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 || apt_install docker.io
command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
command -v python3 >/dev/null 2>&1 || apt_install python3

# --- the engine -------------------------------------------------------------------------
started_dockerd=0
compose_up=0
work=""
dc() { docker compose -p "$PROJECT" -f docker-compose.yml "$@"; }
cleanup() {
  local rc=$?
  [ -z "$work" ] || rm -rf "$work"
  if [ $compose_up = 1 ]; then
    if [ $rc != 0 ]; then
      log "logs of the failed run:"
      dc --profile loadtest logs --no-color --tail 40 >&2 2>&1 || true
    fi
    log "tearing down (docker compose down -v)"
    dc --profile loadtest down -v --remove-orphans >/dev/null 2>&1 || log "down -v failed"
  fi
  if [ $started_dockerd = 1 ] && [ -f "$RUN_DIR/dockerd.pid" ]; then
    log "stopping the dockerd this script started"
    kill "$(cat "$RUN_DIR/dockerd.pid")" 2>/dev/null || true
    for _ in $(seq 1 30); do [ -f "$RUN_DIR/dockerd.pid" ] || break; sleep 0.5; done
  fi
  if [ $rc = 0 ]; then log "PASSED in $(($(date +%s) - t0))s"; else log "FAILED (exit $rc) after $(($(date +%s) - t0))s"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if docker info >/dev/null 2>&1; then
  log "using the Docker engine that answers ($(docker info -f '{{.ServerVersion}}'))"
else
  export DOCKER_HOST="unix://$RUN_DIR/docker.sock"
  if ! docker info >/dev/null 2>&1; then
    log "starting dockerd on $DOCKER_HOST (log: /var/log/strata-compose-dockerd.log)"
    rm -f "$RUN_DIR/dockerd.pid"
    dockerd -H "$DOCKER_HOST" --pidfile "$RUN_DIR/dockerd.pid" --exec-root "$RUN_DIR/exec" \
      >/var/log/strata-compose-dockerd.log 2>&1 &
    started_dockerd=1
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || die "dockerd did not answer: see /var/log/strata-compose-dockerd.log"
  fi
  log "Docker engine $(docker info -f '{{.ServerVersion}}') on $DOCKER_HOST"
fi

# --- Docker Compose v2 ------------------------------------------------------------------
if ! docker compose version >/dev/null 2>&1; then
  bin="$CACHE/compose-$COMPOSE_VERSION/docker-compose"
  if [ ! -x "$bin" ]; then
    GO=$(bash scripts/ensure-go.sh)
    log "building Docker Compose $COMPOSE_VERSION from its Go module source (once; several minutes)"
    dir=$("$GO" mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    # Its go.mod has replace/exclude directives, so `go install pkg@version` refuses it: build
    # inside the module instead. The ~200 "go: downloading" lines go to a log, not CI's output.
    mkdir -p "$(dirname "$bin")"
    (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath \
      -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" -o "$bin.tmp" ./cmd) \
      >"$CACHE/compose-build.log" 2>&1 \
      || { tail -n 30 "$CACHE/compose-build.log" >&2; die "building Docker Compose failed: see $CACHE/compose-build.log"; }
    mv "$bin.tmp" "$bin"
  fi
  mkdir -p /usr/local/lib/docker/cli-plugins
  install -m 0755 "$bin" /usr/local/lib/docker/cli-plugins/docker-compose
  docker compose version >/dev/null 2>&1 || die "docker compose does not run after installing $bin as a CLI plugin"
fi
log "$(docker compose version)"

# --- stand-in images --------------------------------------------------------------------
have() { docker image inspect "$1" >/dev/null 2>&1; }
# The classic builder: Debian's engine (20.10) and no buildx plugin; it needs no registry.
export DOCKER_BUILDKIT=0
build_standin() { # $1 = tag, $2 = context dir (with a Dockerfile)
  log "building stand-in $1"
  docker build -q --network host --label org.strata.standin=true -t "$1" "$2" >/dev/null
}

compose_images=$(sed -n 's/^ *image: *//p' docker-compose.yml)
pg_image=$(grep -m1 pgvector <<<"$compose_images" || true)
redis_image=$(grep -m1 redis <<<"$compose_images" || true)
builder_image=$(sed -n 's/^FROM \([^ ]*\) AS build.*/\1/p' Dockerfile | head -1)
runtime_image=$(grep '^FROM ' Dockerfile | tail -1 | awk '{print $2}')
[ -n "$pg_image" ] && [ -n "$redis_image" ] && [ -n "$builder_image" ] && [ -n "$runtime_image" ] \
  || die "could not read the image names from docker-compose.yml and Dockerfile"

if [ "${STRATA_COMPOSE_STANDINS:-1}" = 1 ]; then
  work=$(mktemp -d)

  if ! have "$STANDIN_BASE" && { ! have "$pg_image" || ! have "$redis_image" || ! have "$builder_image"; }; then
    rootfs="$CACHE/debian-bookworm-rootfs"
    if [ ! -f "$rootfs/.complete" ]; then
      mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
      [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
      mirror=${mirror:-http://deb.debian.org/debian}
      log "debootstrap bookworm (minbase) from $mirror into $rootfs (once; a few minutes)"
      rm -rf "$rootfs"
      debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
        || die "debootstrap failed: see $CACHE/debootstrap.log"
      # apt in the images behaves as on the host (snapshot mirrors: no Valid-Until checks);
      # services are not started by package scripts; no caches are kept.
      cp /etc/apt/apt.conf.d/99artifact-registry "$rootfs/etc/apt/apt.conf.d/" 2>/dev/null || true
      printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
      chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      touch "$rootfs/.complete"
    fi
    log "importing $STANDIN_BASE"
    tar -C "$rootfs" --exclude=./.complete -c . | docker import -c 'CMD ["/bin/bash"]' - "$STANDIN_BASE" >/dev/null
  fi

  if ! have "$pg_image"; then
    pgbin=/usr/lib/postgresql/15/bin
    if [ ! -f /usr/share/postgresql/15/extension/vector.control ]; then
      log "pgvector is not built on this host: scripts/stores.sh builds it"
      STRATA_STORES=native bash scripts/stores.sh
    fi
    d="$work/postgres"
    mkdir -p "$d/extension"
    cp "$("$pgbin/pg_config" --pkglibdir)/vector.so" "$d/"
    cp "$("$pgbin/pg_config" --sharedir)"/extension/vector* "$d/extension/"
    cat >"$d/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Stand-in for the postgres image's entrypoint: POSTGRES_USER, POSTGRES_DB,
# POSTGRES_HOST_AUTH_METHOD (trust only), PGDATA; runs the server as user postgres.
set -e
if [ "$1" = postgres ]; then
  shift
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    as_pg initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --auth="${POSTGRES_HOST_AUTH_METHOD:-trust}" >/dev/null
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    echo "host all all all ${POSTGRES_HOST_AUTH_METHOD:-trust}" >>"$PGDATA/pg_hba.conf"
    db=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
    if [ "$db" != postgres ]; then
      echo "CREATE DATABASE \"$db\"" | as_pg postgres --single -D "$PGDATA" -j postgres >/dev/null
    fi
  fi
  exec setpriv --reuid=postgres --regid=postgres --init-groups postgres "$@"
fi
exec "$@"
EOF
    cat >"$d/Dockerfile" <<EOF
FROM $STANDIN_BASE
RUN mkdir -p /etc/postgresql-common && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf \\
 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY vector.so /usr/lib/postgresql/15/lib/
COPY extension/ /usr/share/postgresql/15/extension/
COPY docker-entrypoint.sh /usr/local/bin/
ENV PATH=/usr/lib/postgresql/15/bin:\$PATH PGDATA=/var/lib/postgresql/data
LABEL org.opencontainers.image.description="Strata stand-in for $pg_image: Debian's Postgres 15 with the host-built pgvector"
EXPOSE 5432
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
EOF
    build_standin "$pg_image" "$d"
  fi

  if ! have "$redis_image"; then
    d="$work/redis"
    mkdir -p "$d"
    cat >"$d/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Stand-in for the redis image's entrypoint: redis-server with protected mode off (the
# compose network reaches it from other containers; nothing outside but its published port).
set -e
if [ "$1" = redis-server ]; then
  shift
  set -- redis-server --protected-mode no "$@"
fi
exec "$@"
EOF
    cat >"$d/Dockerfile" <<EOF
FROM $STANDIN_BASE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb && mkdir -p /data
COPY docker-entrypoint.sh /usr/local/bin/
WORKDIR /data
LABEL org.opencontainers.image.description="Strata stand-in for $redis_image: Debian's redis-server"
EXPOSE 6379
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD ["redis-server"]
EOF
    build_standin "$redis_image" "$d"
  fi

  if ! have "$builder_image"; then
    GO=$(bash scripts/ensure-go.sh)
    goroot=$("$GO" env GOROOT)
    d="$work/builder"
    mkdir -p "$d"
    cp -a "$goroot" "$d/go"
    rm -rf "$d/go/pkg/obj" "$d/go/test"
    cp /etc/ssl/certs/ca-certificates.crt "$d/"
    cat >"$d/Dockerfile" <<EOF
FROM $STANDIN_BASE
COPY go/ /usr/local/go/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/go/bin:/usr/local/go/bin:\$PATH GOPATH=/go GOTOOLCHAIN=local
WORKDIR /go
LABEL org.opencontainers.image.description="Strata stand-in for $builder_image: this machine's Go toolchain ($("$GO" env GOVERSION))"
EOF
    build_standin "$builder_image" "$d"
  fi

  if ! have "$runtime_image"; then
    d="$work/runtime"
    mkdir -p "$d/root/etc/ssl/certs" "$d/root/tmp" "$d/root/home/nonroot"
    chmod 1777 "$d/root/tmp"
    chown 65532:65532 "$d/root/home/nonroot"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$d/root/etc/group"
    cp /etc/ssl/certs/ca-certificates.crt "$d/root/etc/ssl/certs/"
    cat >"$d/Dockerfile" <<EOF
FROM scratch
COPY root/ /
USER nonroot
LABEL org.opencontainers.image.description="Strata stand-in for $runtime_image: scratch with a nonroot user and the CA bundle"
EOF
    build_standin "$runtime_image" "$d"
  fi
  rm -rf "$work"
  work=""
fi
log "images: $pg_image, $redis_image, $builder_image, $runtime_image"

# --- the stack --------------------------------------------------------------------------
for port in "$STRATA_COMPOSE_PG_PORT" "$STRATA_COMPOSE_REDIS_PORT" "$STRATA_COMPOSE_HTTP_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port on 127.0.0.1 is taken: set STRATA_COMPOSE_{PG,REDIS,HTTP}_PORT to free ones"
  fi
done
dc --profile loadtest down -v --remove-orphans >/dev/null 2>&1 || true # leftovers of an interrupted run
compose_up=1
log "docker compose up --build -d (project $PROJECT; ports $STRATA_COMPOSE_PG_PORT, $STRATA_COMPOSE_REDIS_PORT, $STRATA_COMPOSE_HTTP_PORT)"
t_up=$(date +%s)
dc build server >&2 || die "docker compose build failed"
log "built the server image (the load test's too) in $(($(date +%s) - t_up))s"
dc up --build -d --wait --wait-timeout 300 >&2 || die "the stack did not become healthy"
log "every service healthy, $(($(date +%s) - t_up))s after up:"
dc ps --format '  {{.Service}}: {{.Status}}' >&2
curl_ready=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$STRATA_COMPOSE_HTTP_PORT/readyz', timeout=5).status)" 2>&1) \
  || die "the server's published port does not answer /readyz: $curl_ready"
log "the server answers /readyz on 127.0.0.1:$STRATA_COMPOSE_HTTP_PORT ($curl_ready)"

# --- the load test profile --------------------------------------------------------------
log "running the loadtest profile for $LOAD_DURATION (nothing exported: the compose file's development admin key)"
out="$CACHE/loadtest-report.json"
if ! dc --profile loadtest run --rm -T loadtest --rate 0 --concurrency 32 --duration "$LOAD_DURATION" \
    --output json --max-errors 0 >"$out"; then
  die "the loadtest profile failed (report: $out)"
fi
python3 - "$out" <<'EOF' || die "the load test's report shows errors (report: $out)"
import json, sys
rep = json.load(open(sys.argv[1]))
bad = 0
for p in rep["phases"]:
    print(f"[compose-test] {p['name']}: {p['requests']} requests, {p['throughput']:.0f} req/s, "
          f"p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms, {p['errors']} errors", file=sys.stderr)
    if p["requests"] <= 0 or p["errors"] != 0:
        bad += 1
sys.exit(1 if bad or not rep["phases"] else 0)
EOF
log "loadtest: zero errors"
