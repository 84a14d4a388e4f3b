#!/usr/bin/env bash
# Builds the control-plane binaries that sigs.k8s.io/controller-runtime/pkg/envtest
# starts (kube-apiserver and etcd) from the Go module proxy, caches them by version,
# and prints the directory to export as KUBEBUILDER_ASSETS on stdout (and nothing
# else on stdout: progress goes to stderr).
#
#   KUBEBUILDER_ASSETS="$(bash hack/envtest-assets.sh)"
#   export KUBEBUILDER_ASSETS
#
# Nothing is downloaded as a release binary: both programs are compiled from the
# pinned nested modules hack/envtest/kube-apiserver and hack/envtest/etcd (go.mod +
# go.sum committed, built with -mod=readonly, so the build is reproducible). When
# both binaries exist in the cache and report the expected versions, the script
# does nothing. The Go build and module caches stay in their normal locations, so
# a warm machine recompiles nothing even after the asset cache is wiped.
#
# Environment:
#   LLM_RING_CACHE  cache root (default: $HOME/.cache/llm-ring); binaries go to
#                   $LLM_RING_CACHE/envtest/<kubernetes version>/
#
# Cold build on 2 cores: kube-apiserver ~11 min, etcd ~2 min (see
# docs/notes/kubernetes.md for measurements).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
apiserver_mod="$here/envtest/kube-apiserver"
etcd_mod="$here/envtest/etcd"

log() { printf 'envtest-assets: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ -f "$apiserver_mod/go.mod" ]] || die "missing $apiserver_mod/go.mod"
[[ -f "$etcd_mod/go.mod" ]] || die "missing $etcd_mod/go.mod"

# The nested modules are independent of the repository's own module: no
# workspace, no vendoring, and go.sum must already hold every checksum.
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0

# module_version DIR MODULE prints the version DIR's go.mod selects for MODULE.
module_version() {
	local v
	v="$(cd "$1" && go list -m -f '{{.Version}}' "$2")" || die "cannot read the version of $2 in $1/go.mod"
	[[ -n "$v" ]] || die "no version of $2 in $1/go.mod"
	printf '%s\n' "$v"
}

k8s_version="$(module_version "$apiserver_mod" k8s.io/kubernetes)" # v1.37.2
etcd_version="$(module_version "$etcd_mod" go.etcd.io/etcd/server/v3)" # v3.6.16

cache_root="${LLM_RING_CACHE:-${HOME:?HOME is unset and LLM_RING_CACHE is not set}/.cache/llm-ring}"
dir="$cache_root/envtest/${k8s_version#v}"
mkdir -p "$dir" || die "cannot create $dir"

# has_version BINARY WANT: BINARY exists, runs, and its --version output names WANT.
has_version() {
	[[ -x "$1" ]] || return 1
	local out
	out="$("$1" --version 2>/dev/null)" || return 1
	[[ "$out" == *"$2"* ]]
}

# build DIR PACKAGE OUTPUT LDFLAGS: compile PACKAGE inside module DIR to OUTPUT,
# through a temporary file so that an interrupted build leaves no broken binary.
build() {
	local mod="$1" pkg="$2" out="$3" ldflags="$4" tmp start
	tmp="$(mktemp "$out.tmp.XXXXXX")"
	trap "rm -f '$tmp'" EXIT
	start=$SECONDS
	log "building $pkg -> $out (this takes minutes on a cold cache)"
	(cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg") || die "go build $pkg failed"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$out"
	trap - EXIT
	log "built $(basename "$out") in $((SECONDS - start))s"
}

if has_version "$dir/kube-apiserver" "$k8s_version"; then
	log "kube-apiserver $k8s_version cached"
else
	# kube-apiserver derives its binary and emulation version from gitVersion; the
	# default "v0.0.0-master" would not describe the release being built.
	minor="${k8s_version#v1.}"
	minor="${minor%%.*}"
	pkg=k8s.io/component-base/version
	build "$apiserver_mod" k8s.io/kubernetes/cmd/kube-apiserver "$dir/kube-apiserver" \
		"-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	has_version "$dir/kube-apiserver" "$k8s_version" || die "built kube-apiserver does not report $k8s_version"
fi

if has_version "$dir/etcd" "${etcd_version#v}"; then
	log "etcd $etcd_version cached"
else
	build "$etcd_mod" go.etcd.io/etcd/server/v3 "$dir/etcd" "-s -w"
	has_version "$dir/etcd" "${etcd_version#v}" || die "built etcd does not report $etcd_version"
fi

printf '%s\n' "$dir"
