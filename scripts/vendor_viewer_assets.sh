#!/usr/bin/env bash
# Fetch the viewer's front-end libraries (the published, already-bundled builds on the npm
# registry), pinned by version and checked against their registry integrity hashes, and copy
# the files the page loads, with each library's licence, into
# packages/dockyard-train/src/dockyard/train/view/static/vendor/. The result is committed: the
# viewer works offline and never loads anything from a CDN. Run again to update (change a pin,
# then commit the files and vendor/VENDOR.md it rewrites).
#
#   scripts/vendor_viewer_assets.sh            # needs npm and the npm registry
set -euo pipefail
cd "$(dirname "$0")/.."
dest=packages/dockyard-train/src/dockyard/train/view/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name version  files to copy (from the package's folder)  licence file
libs=(
  "uplot 1.6.32 dist/uPlot.iife.min.js,dist/uPlot.min.css LICENSE"
  "gridjs 6.2.0 dist/gridjs.umd.js,dist/theme/mermaid.min.css LICENSE"
  "diff2html 3.4.56 bundles/js/diff2html.min.js,bundles/css/diff2html.min.css LICENSE.md"
)
mkdir -p "$dest"
{
  echo "# Vendored front-end libraries of \`dockyard view\`"
  echo
  echo "Written by \`scripts/vendor_viewer_assets.sh\` (do not edit): each library's published"
  echo "bundle from the npm registry, unmodified, with its licence beside it."
  echo
  echo "| library | version | licence | files | source (npm tarball integrity) |"
  echo "|---|---|---|---|---|"
} >"$work/VENDOR.md"
for entry in "${libs[@]}"; do
  read -r name version files licence <<<"$entry"
  expected=$(npm view "$name@$version" dist.integrity)
  (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
  tgz="$work/$name-$version.tgz"
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  if [ "$got" != "$expected" ]; then
    echo "vendor: $name@$version: integrity $got, the registry says $expected" >&2
    exit 1
  fi
  mkdir -p "$work/$name" && tar xzf "$tgz" -C "$work/$name"
  mkdir -p "$dest/$name"
  rm -f "$dest/$name"/*
  IFS=, read -ra paths <<<"$files"
  for f in "${paths[@]}"; do cp "$work/$name/package/$f" "$dest/$name/"; done
  cp "$work/$name/package/$licence" "$dest/$name/LICENSE"
  lic=$(npm view "$name@$version" license)
  repo=$(npm view "$name@$version" repository.url)
  [ -n "$repo" ] || repo="https://www.npmjs.com/package/$name/v/$version"
  shown=$(printf '%s\n' "${paths[@]}" | xargs -n1 basename | paste -sd, -)
  echo "| [$name]($repo) | $version | $lic | $shown | \`$expected\` |" >>"$work/VENDOR.md"
done
cp "$work/VENDOR.md" "$dest/VENDOR.md"
echo "vendored into $dest:"
ls -R "$dest"
