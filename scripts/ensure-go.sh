#!/usr/bin/env bash
# Prints the path of a Go toolchain new enough for Strata (go.mod's version). Uses the one
# on PATH (or /usr/local/go) when it is new enough; otherwise fetches the official
# toolchain module from the Go module proxy (what GOTOOLCHAIN=auto does, for machines
# whose packaged Go predates toolchain switching, such as Debian 12's 1.19) into
# ~/.cache/strata. Progress goes to stderr; only the path goes to stdout.
set -euo pipefail
want=1.26
full=${STRATA_GO_VERSION:-1.26.8}

ok() { # $1 = go binary
  local v
  v=$("$1" env GOVERSION 2>/dev/null || true); v=${v#go}
  [ -n "$v" ] || return 1
  [ "$(printf '%s\n%s\n' "$want" "$v" | sort -V | head -1)" = "$want" ]
}
for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$HOME/.cache/strata/go$full/bin/go"; do
  if [ -n "$g" ] && [ -x "$g" ] && ok "$g"; then echo "$g"; exit 0; fi
done

arch=$(uname -m); case "$arch" in x86_64) arch=amd64;; aarch64|arm64) arch=arm64;; esac
dest="$HOME/.cache/strata"
mkdir -p "$dest"
proxy=${GOPROXY:-https://proxy.golang.org}; proxy=${proxy%%,*}
[ "$proxy" = direct ] || [ "$proxy" = off ] && proxy=https://proxy.golang.org
for tool in curl unzip; do
  command -v $tool >/dev/null || { echo "[go] installing $tool" >&2; apt-get update -qq >&2 && apt-get install -y -qq $tool >&2; }
done
echo "[go] Go $want+ not found: fetching go$full ($arch) from the Go module proxy" >&2
tmp=$(mktemp -d)
curl -fL --progress-bar -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$full.linux-$arch.zip" >&2 \
  || { echo "[go] download failed: install Go $want+ from https://go.dev/dl and retry" >&2; exit 1; }
unzip -q "$tmp/go.zip" -d "$tmp"
rm -rf "$dest/go$full"
mv "$tmp/golang.org/toolchain@v0.0.1-go$full.linux-$arch" "$dest/go$full"
chmod +x "$dest/go$full/bin/"* "$dest/go$full/pkg/tool/"*/* 2>/dev/null || true
rm -rf "$tmp"
echo "$dest/go$full/bin/go"
