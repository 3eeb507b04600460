#!/usr/bin/env bash
# Rebuild the shipped SWE tasks and their validation report, offline from PyPI sdists:
#
#   scripts/build_swe_tasks.sh                  # build, validate in the sandbox, publish
#   scripts/build_swe_tasks.sh --validate-only  # re-validate the committed tasks
#   scripts/build_swe_tasks.sh --releases-only  # only the second set (below)
#
# 1. `python -m dockyard.envs.swe.builder` mutates each library below (AST mutations of its
#    source; a mutation is kept when 1..20 of the library's own tests go from passing to
#    failing) and writes the issue text from the failing tests' evidence: no model involved;
# 2. `dockyard swe validate shipped` runs every instance's gold patch (must resolve) and the
#    empty patch (must not) in the real bubblewrap sandbox;
# 3. `python -m dockyard.envs.swe.builder.report --drop-invalid` removes instances the sandbox
#    did not validate (listed under "dropped" in the report) and writes the Markdown summary.
#
# The second set, real bugs: `python -m dockyard.envs.swe.builder.versions` makes one
# SWE-bench-format record per pair of consecutive releases in RELEASES where the newer release's
# tests fail on the older one's source (the fix and its test landed between them; the issue text
# is the release's changelog entry plus the failing tests' evidence), validated and published the
# same way into tasks/releases/pypi_releases.{jsonl,validate.json,validate.md}.
#
# Outputs, in packages/dockyard-envs/src/dockyard/envs/swe/tasks/: pypi_mutations.jsonl,
# pypi_mutations.validate.json, pypi_mutations.validate.md. CPU heavy (each library's suite runs
# once per mutation tried): on a shared 2-core machine run it under /work/heavy.
# Every library is pure Python whose sdist ships its tests and needs only the stdlib + pytest,
# with its package at the top of the sdist: a src/ layout (cachetools, semver, isodate, ...) is
# not importable from the tree uninstalled, and where the sandbox's interpreter happens to have
# the library installed its tests would exercise that copy instead of the task's tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TASKS=packages/dockyard-envs/src/dockyard/envs/swe/tasks
OUT=$TASKS/pypi_mutations.jsonl
REPORT=$TASKS/pypi_mutations.validate.json
PACKAGES=(
  inflection==0.5.1 parse==1.20.2 toolz==1.2.0 six==1.17.0 pathspec==1.1.1 xmltodict==1.0.4
  simplejson==4.3.0 sqlparse==0.6.1 pyflakes==4.1.0 pyasn1==0.6.5 boltons==26.2.0
)
RELEASES=(
  sqlparse==0.5.0:0.5.1 sqlparse==0.5.1:0.5.2 sqlparse==0.5.4:0.5.5 sqlparse==0.6.0:0.6.1
  parse==1.20.0:1.20.1 parse==1.20.1:1.20.2 parse==1.20.2:1.21.0 parse==1.21.0:1.21.1
  parse==1.22.0:1.22.1 parse==1.22.1:1.22.2 parse==1.22.2:1.22.3 parse==1.22.3:1.22.4
  xmltodict==1.0.2:1.0.3 xmltodict==1.0.3:1.0.4 pyflakes==4.0.2:4.0.3 simplejson==4.1.1:4.1.2
  toolz==1.1.0:1.2.0
)
REL=$TASKS/releases/pypi_releases
MODE=${1:-}
case "$MODE" in
  "" | --validate-only | --releases-only) ;;
  *) echo "usage: $0 [--validate-only | --releases-only]" >&2; exit 2 ;;
esac
if [[ "$MODE" == "" ]]; then
  args=()
  for p in "${PACKAGES[@]}"; do args+=(--package "$p"); done
  "$PY" -m dockyard.envs.swe.builder "${args[@]}" --per-package 25 --max-attempts 120 --seed 0 \
    --out "$OUT"
fi
if [[ "$MODE" != "--releases-only" ]]; then
  # exit 1 = some instances are not valid: the next step drops them and says which
  "$PY" -m dockyard.train.cli swe validate shipped --out "$REPORT" --concurrency 4 || [[ $? == 1 ]]
  "$PY" -m dockyard.envs.swe.builder.report --tasks "$OUT" --report "$REPORT" \
    --markdown "$TASKS/pypi_mutations.validate.md" --drop-invalid
fi
if [[ "$MODE" != "--validate-only" ]]; then
  args=()
  for p in "${RELEASES[@]}"; do args+=(--pair "$p"); done
  mkdir -p "$(dirname "$REL")"
  "$PY" -m dockyard.envs.swe.builder.versions "${args[@]}" --seed 0 --out "$REL.jsonl"
fi
"$PY" -m dockyard.train.cli swe validate "$REL.jsonl" --out "$REL.validate.json" --concurrency 4 ||
  [[ $? == 1 ]]
"$PY" -m dockyard.envs.swe.builder.report --tasks "$REL.jsonl" --report "$REL.validate.json" \
  --markdown "$REL.validate.md" --drop-invalid \
  --command "scripts/build_swe_tasks.sh --releases-only"
