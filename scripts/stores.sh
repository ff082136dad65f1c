#!/usr/bin/env bash
# Bring up the stores Strata needs: Postgres 15+ with pgvector 0.8 and Redis 7.
# Uses `docker compose` when a Docker engine answers; otherwise installs and starts them
# natively on Debian/Ubuntu (pgvector is built from Debian's source package against the
# installed Postgres). Idempotent: anything already running is left alone.
set -euo pipefail

log() { printf '\033[1;34m[stores]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[stores] error:\033[0m %s\n' "$*" >&2; exit 1; }

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
REDIS_PORT=${REDIS_PORT:-6379}
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run as root or install sudo"
  SUDO="sudo"
fi

mode=${STRATA_STORES:-auto}   # auto | docker | native
if [ "$mode" = auto ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then mode=docker; else mode=native; fi
fi

pg_ready() { pg_isready -q -h "$PGHOST" -p "$PGPORT" 2>/dev/null; }
redis_ready() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

if [ "${1:-}" = --mode ]; then echo "$mode"; exit 0; fi

if [ "$mode" = docker ]; then
  if pg_ready && redis_ready; then
    log "Postgres on $PGHOST:$PGPORT and Redis on 127.0.0.1:$REDIS_PORT already answer: leaving them alone"
    exit 0
  fi
  log "Docker engine found: starting postgres and redis with docker compose"
  docker compose up -d --wait postgres redis
  exit 0
fi

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated = 0 ]; then log "apt-get update"; $SUDO apt-get update -qq; apt_updated=1; fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- Postgres ---------------------------------------------------------------------------
if ! command -v pg_config >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt_install postgresql postgresql-contrib
fi
PGVER=$(ls /usr/lib/postgresql | sort -n | tail -1)
[ -n "$PGVER" ] || die "no Postgres found under /usr/lib/postgresql"
[ "$PGVER" -ge 15 ] || die "Postgres $PGVER is too old: Strata needs 15 or newer"

if ! pg_ready; then
  log "starting Postgres $PGVER"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$PGVER" main start || die "could not start Postgres $PGVER (see /var/log/postgresql)"
  for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
  pg_ready || die "Postgres did not become ready on $PGHOST:$PGPORT"
fi

# --- pgvector ---------------------------------------------------------------------------
sharedir=$(/usr/lib/postgresql/$PGVER/bin/pg_config --sharedir)
if [ ! -f "$sharedir/extension/vector.control" ]; then
  log "pgvector is missing for Postgres $PGVER: building it from Debian's source package"
  apt_install "postgresql-server-dev-$PGVER" build-essential dpkg-dev
  if ! grep -rhs '^Types: deb-src' -A3 /etc/apt/sources.list.d/ 2>/dev/null | grep -q trixie \
     && ! grep -rhs '^deb-src .* trixie' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -q .; then
    log "adding a deb-src entry for Debian trixie (source packages only; no binaries are pulled from it)"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      | $SUDO tee /etc/apt/sources.list.d/strata-trixie-src.sources >/dev/null
    $SUDO apt-get update -qq
  fi
  build=$(mktemp -d)
  (cd "$build" && apt-get source -qq pgvector >/dev/null 2>&1) || die "apt-get source pgvector failed: check network access to Debian's mirrors"
  src=$(find "$build" -maxdepth 1 -type d -name 'pgvector-*' | head -1)
  [ -n "$src" ] || die "pgvector source not unpacked in $build"
  log "compiling $(basename "$src")"
  make -s -C "$src" USE_PGXS=1 PG_CONFIG=/usr/lib/postgresql/$PGVER/bin/pg_config OPTFLAGS="" >/dev/null
  $SUDO make -s -C "$src" USE_PGXS=1 PG_CONFIG=/usr/lib/postgresql/$PGVER/bin/pg_config install >/dev/null
  rm -rf "$build"
  log "pgvector installed"
fi

# --- Redis ------------------------------------------------------------------------------
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
if ! redis_ready; then
  log "starting Redis on 127.0.0.1:$REDIS_PORT"
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/strata.log
  for _ in $(seq 1 20); do redis_ready && break; sleep 0.5; done
  redis_ready || die "Redis did not become ready on 127.0.0.1:$REDIS_PORT"
fi

log "Postgres $PGVER (pgvector) on $PGHOST:$PGPORT and Redis on 127.0.0.1:$REDIS_PORT are up"
