#!/usr/bin/env bash
# Installs what the test suite needs beyond Go and the stores (third-party clients the
# suite drives). Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
for dir in $(ls -d clients/*/ tests/*/ 2>/dev/null); do
  if [ -f "$dir/package.json" ] && [ ! -d "$dir/node_modules" ]; then
    echo "[test-deps] npm ci in $dir" >&2
    # npm ci when the lock file is complete; some packages list platform-only optional
    # dependencies that npm 11 leaves out of the lock, and then only npm install works.
    (cd "$dir" && { [ -f package-lock.json ] && npm ci --no-audit --no-fund --loglevel=silent \
      || npm install --no-audit --no-fund --loglevel=error; })
  fi
done

# The race detector needs cgo and a C compiler.
if ! command -v gcc >/dev/null 2>&1; then
  echo "[test-deps] installing gcc (the race detector needs cgo)" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc libc6-dev >/dev/null
fi

# The Python client's tests (internal/pythontest) run Debian's /usr/bin/python3 with Debian's
# httpx and pytest: no PyPI needed.
if [ -d clients/python ] && ! /usr/bin/python3 -c 'import httpx, pytest' >/dev/null 2>&1; then
  echo "[test-deps] installing python3-httpx python3-pytest (the Python client's tests)" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-httpx python3-pytest >/dev/null
fi

# The web console's browser tests (internal/consoletest, tests/console) drive Debian's
# Chromium with playwright-core (no browser download from elsewhere).
if [ ! -x /usr/bin/chromium ]; then
  echo "[test-deps] installing chromium (the web console's browser tests)" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
