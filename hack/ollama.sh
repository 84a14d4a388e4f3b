#!/usr/bin/env bash
# Builds the Ollama server (github.com/ollama/ollama, CPU backend) from the Go
# module proxy at the version pinned in hack/ollama/go.mod, caches the binary
# by version, and prints its path on stdout (and nothing else on stdout:
# progress goes to stderr).
#
#   LLM_RING_OLLAMA="$(bash hack/ollama.sh)"
#   export LLM_RING_OLLAMA   # internal/e2e's Ollama tests start it
#
# Nothing is downloaded as a release binary: the nested module hack/ollama
# (go.mod with a `tool` line + go.sum, committed) is built with -mod=readonly,
# as hack/envtest-assets.sh builds the envtest control plane. Ollama's cgo part
# (its vendored llama.cpp and ggml) needs a C/C++ compiler and two header-only
# libraries that the module proxy's zip leaves out (it drops every directory
# named vendor): nlohmann-json and stb come from Debian (installed here when
# missing), and miniaudio, which Debian does not package, is replaced by
# hack/ollama/include/miniaudio/miniaudio.h, whose decoder always fails: the
# built server takes no audio input (text and images are unaffected).
#
# Environment:
#   LLM_RING_CACHE  cache root (default: $HOME/.cache/llm-ring); the binary goes
#                   to $LLM_RING_CACHE/ollama/<version>/ollama
#
# Cold build on 2 busy cores: about 25-30 minutes (docs/notes/ollama.md); with the
# Go build cache warm, seconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/ollama"

log() { printf 'ollama.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ -f "$mod/go.mod" ]] || die "missing $mod/go.mod"

export GOWORK=off GOFLAGS=-mod=readonly

version="$(cd "$mod" && go list -m -f '{{.Version}}' github.com/ollama/ollama)" ||
	die "cannot read the version of github.com/ollama/ollama in $mod/go.mod"
[[ -n "$version" ]] || die "no version of github.com/ollama/ollama in $mod/go.mod"

cache_root="${LLM_RING_CACHE:-${HOME:?HOME is unset and LLM_RING_CACHE is not set}/.cache/llm-ring}"
dir="$cache_root/ollama/${version#v}"
bin="$dir/ollama"

# has_version: the cached binary runs and reports the pinned version.
has_version() {
	[[ -x "$bin" ]] || return 1
	local out
	out="$(OLLAMA_HOST=127.0.0.1:1 "$bin" --version 2>&1)" || true
	[[ "$out" == *"${version#v}"* ]]
}

if has_version; then
	log "ollama $version cached"
	printf '%s\n' "$bin"
	exit 0
fi

# The C/C++ toolchain and the headers Ollama's cgo packages include.
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
[[ -f /usr/include/nlohmann/json_fwd.hpp ]] || need+=(nlohmann-json3-dev)
[[ -f /usr/include/stb/stb_image.h ]] || need+=(libstb-dev)
if ((${#need[@]})); then
	log "installing ${need[*]} (apt-get)"
	if [[ $(id -u) -ne 0 ]]; then die "not root: install ${need[*]} with apt-get first"; fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
		die "apt-get install ${need[*]} failed"
fi

mkdir -p "$dir" || die "cannot create $dir"
tmp="$(mktemp "$bin.tmp.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
start=$SECONDS
log "building github.com/ollama/ollama@$version -> $bin (minutes on a cold cache)"
(cd "$mod" && CGO_ENABLED=1 CGO_CPPFLAGS="-I$mod/include" go build -trimpath \
	-ldflags "-s -w -X github.com/ollama/ollama/version.Version=${version#v}" \
	-o "$tmp" github.com/ollama/ollama) || die "go build github.com/ollama/ollama failed"
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
trap - EXIT
log "built ollama in $((SECONDS - start))s"
has_version || die "built ollama does not report $version"
printf '%s\n' "$bin"
