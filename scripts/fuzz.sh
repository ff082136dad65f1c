#!/usr/bin/env bash
# Runs every fuzz target (each `func FuzzX` in a *_fuzz_test.go file) for a while:
#   scripts/fuzz.sh [fuzztime]        default 3s per target
# `make test` runs it with a few seconds per target after `go test` ran the committed seed
# corpora (testdata/fuzz/); `make soak` runs it longer. A failing input is written to the
# package's testdata/fuzz/<target>/ — commit it with the fix, it becomes a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-3s}
GO=${GO:-go}
for f in $(find internal cmd client -name '*_fuzz_test.go' 2>/dev/null | sort); do
  pkg=./$(dirname "$f")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | cut -d' ' -f2); do
    echo "fuzz $pkg $target ($fuzztime)"
    $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" | grep -v '^fuzz: elapsed' || exit 1
  done
done
