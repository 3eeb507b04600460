#!/usr/bin/env bash
# Build dockyard's images without Docker and without an image registry (run as root):
#
#   deploy/build.sh sandbox            # -> localhost/dockyard-sandbox:dev
#   TAG=0.1.0 deploy/build.sh sandbox  # -> localhost/dockyard-sandbox:0.1.0
#   deploy/build.sh runtime            # -> localhost/dockyard-runtime:dev (FLAVOR=cpu|gpu)
#
# 1. The base: a Debian bookworm root with Python 3.11 built from Debian's archive by
#    mmdebstrap (what `python:3.11-slim-bookworm` is, without pulling it), imported with buildah
#    as localhost/dockyard-base:bookworm. Built once; the root's tarball is kept in
#    $DOCKYARD_IMAGE_CACHE (default ~/.cache/dockyard/images).
# 2. The image: `buildah bud` of deploy/Containerfile.<name> on that base (chroot isolation: no
#    container runtime needed to build). A host behind a TLS-intercepting proxy passes its CA
#    bundle to the pip steps (PIP_CERT, mounted read-only for the build only), a pip mirror
#    its PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, and a local wheel folder its PIP_FIND_LINKS
#    (mounted read-only; with it the cpu runtime takes `torch==X+cpu` from that folder instead
#    of download.pytorch.org); nothing of any of them stays in the image.
#
# The tags are those examples/k8s/infra/kind-local.yaml names (localhost/dockyard-<name>:dev).
# Run one with podman as the rendered pod runs it: tests/k8s/test_image_build.py does, and
# docs/deployment.md ("Building the images") gives the command.
set -euo pipefail

name=${1:?usage: deploy/build.sh sandbox|runtime}
tag=${TAG:-dev}
here=$(cd "$(dirname "$0")/.." && pwd)
file="$here/deploy/Containerfile.$name"
[[ -f $file ]] || { echo "deploy/build.sh: no $file (sandbox or runtime)" >&2; exit 2; }
for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || {
    echo "deploy/build.sh: $tool is missing: apt-get install -y buildah mmdebstrap" >&2; exit 2; }
done

base=localhost/dockyard-base:bookworm
if [[ -z $(buildah images -q "$base" 2>/dev/null) ]]; then
  cache=${DOCKYARD_IMAGE_CACHE:-$HOME/.cache/dockyard/images}
  tarball="$cache/base-bookworm.tar"
  if [[ ! -s $tarball ]]; then
    mkdir -p "$cache"
    echo "deploy/build.sh: building the base root from Debian's archive (mmdebstrap, ~40 s)"
    mmdebstrap --quiet --variant=minbase \
      --include=python3,python3-venv,python-is-python3,ca-certificates \
      bookworm "$tarball.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
    mv "$tarball.tmp" "$tarball"
  fi
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$tarball" / >/dev/null
  buildah config --cmd /bin/bash --env LANG=C.UTF-8 "$ctr"
  buildah commit --quiet --rm "$ctr" "$base" >/dev/null
fi

args=(--isolation chroot --layers --build-arg "BASE=$base" -f "$file" -t "localhost/dockyard-$name:$tag")
[[ -n ${FLAVOR:-} ]] && args+=(--build-arg "FLAVOR=$FLAVOR")
if [[ -n ${PIP_CERT:-} && -f $PIP_CERT ]]; then
  args+=(--build-arg "PIP_CERT=/run/dockyard-build-ca.crt" -v "$PIP_CERT:/run/dockyard-build-ca.crt:ro")
fi
if [[ -n ${PIP_FIND_LINKS:-} && -d $PIP_FIND_LINKS ]]; then
  args+=(--build-arg "PIP_FIND_LINKS=/run/dockyard-wheels" --build-arg "TORCH_CPU_INDEX="
         -v "$PIP_FIND_LINKS:/run/dockyard-wheels:ro")
fi
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL; do
  [[ -n ${!var:-} ]] && args+=(--build-arg "$var=${!var}")
done
echo "deploy/build.sh: buildah bud ${file#"$here"/} -> localhost/dockyard-$name:$tag"
buildah bud --quiet "${args[@]}" "$here"
