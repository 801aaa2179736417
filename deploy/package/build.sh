#!/bin/sh
# Usage: deploy/package/build.sh BINARY ARCH VERSION OUTDIR FORMAT...
# Packages BINARY (built for linux/ARCH) as election VERSION in each FORMAT
# (deb, rpm) into OUTDIR, with nfpm and deploy/package/nfpm.yaml, from a
# staging directory of its own, so that several run at once.
set -eu
binary=$1 arch=$2 version=$3 out=$4
shift 4
repo=$(cd "$(dirname "$0")/../.." && pwd)
case $out in /*) ;; *) out=$repo/$out ;; esac
case $binary in /*) ;; *) binary=$repo/$binary ;; esac
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/dist"
cp "$binary" "$stage/dist/election"
# Copies, not symlinks: nfpm packages a symlink as a symlink, so a linked
# README.md would be installed pointing into this build's tree. -L: were
# one of these a symlink in the repo, its file goes in, not the link.
cp -RL "$repo/deploy" "$repo/README.md" "$repo/LICENSE" "$stage/"
mkdir -p "$out"
cd "$stage"
for format in "$@"; do
  PKG_ARCH=$arch VERSION=$version go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2 \
    package -f "$stage/deploy/package/nfpm.yaml" -p "$format" -t "$out/"
done
