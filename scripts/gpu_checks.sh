#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go and within a time budget (for a lent GPU host; none
# runs in CI here):
#
#   bash scripts/gpu_checks.sh [OUT_DIR]            # OUT_DIR default: results/gpu-checks
#
# 1. preflight: the GPU, the Python modules and their versions       -> OUT_DIR/env.json
# 2. pytest -m gpu tests/gpu (junit XML, per-test figures)           -> OUT_DIR/pytest.{xml,txt}
# 3. bench/gpu/torch_checks.py, bench/gpu/jax_checks.py, then any other bench/gpu/*.py
#                                                                    -> OUT_DIR/bench_<name>.txt
# 4. OUT_DIR/report.json: GPU, versions, each test's outcome and duration, each bench script's
#    exit status, checks and figures, the total wall time (figures: OUT_DIR/figures/*.json).
#
# Exits 0 only when a CUDA GPU was visible and everything passed; 2 when no GPU is visible.
# Works from a plain checkout with a system Python that has torch: the packages are found through
# PYTHONPATH=packages/*/src. Knobs (environment):
#   PYTHON                  the interpreter (default: python, else python3)
#   GPU_CHECKS_BUDGET_S     the whole run's wall-clock budget in seconds (default 570); each step
#                           has its own cap and never runs past the budget
#   GPU_CHECKS_PYTEST_ARGS  extra pytest arguments (e.g. "-k fsdp")
#   DOCKYARD_GPU_SITE       a folder put on PYTHONPATH (default .gpu-site, when it exists) for
#                           modules the host lacks (pydantic, pytest...), built for its Python
# Private, for checking this script without a GPU: DOCKYARD_GPU_CHECKS_ON_CPU=1 runs the same
# steps on CPU (the bench scripts with --smoke, the tests with DOCKYARD_GPU_TESTS_ON_CPU=1).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
out="${1:-results/gpu-checks}"
mkdir -p "$out/figures"
out=$(cd "$out" && pwd)
rm -f "$out"/figures/*.json "$out/steps.tsv" "$out/pytest.xml" "$out/report.json"
budget=${GPU_CHECKS_BUDGET_S:-570}
deadline=$((start + budget))
py=${PYTHON:-$(command -v python || command -v python3 || echo python)}
on_cpu=${DOCKYARD_GPU_CHECKS_ON_CPU:-0}
paths=$(ls -d packages/*/src | paste -sd:)
site=${DOCKYARD_GPU_SITE:-.gpu-site}
[ -d "$site" ] && paths="$paths:$(cd "$site" && pwd)"
export PYTHONPATH="$paths${PYTHONPATH:+:$PYTHONPATH}"
export DOCKYARD_GPU_REPORT_DIR="$out/figures"
export XLA_PYTHON_CLIENT_PREALLOCATE=false # JAX and torch share the GPU
export PYTHONUNBUFFERED=1

# step NAME CAP_S LOG CMD...: run CMD under `timeout` (SIGINT first, so that pytest still writes
# its junit XML), capped by CAP_S and by what is left of the budget; one row in steps.tsv.
step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local left=$((deadline - $(date +%s) - 15))
  ((left < cap)) && cap=$left
  if ((cap < 20)); then
    echo "::: $name: skipped, the budget (${budget}s) is spent" | tee "$log"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "skipped" 0 0 "$log" >>"$out/steps.tsv"
    return
  fi
  echo "::: $name (at most ${cap}s)"
  local t0=$(date +%s)
  timeout --signal=INT --kill-after=30 "$cap" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local took=$(($(date +%s) - t0))
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$took" "$cap" "$log" >>"$out/steps.tsv"
}

echo "::: preflight ($py)"
timeout 180 "$py" - "$out/env.json" <<'PY'
import importlib, json, platform, subprocess, sys

info = {"python": sys.version.split()[0], "executable": sys.executable, "modules": {}}
for name in ("torch", "jax", "jaxlib", "transformers", "flax", "optax", "orbax.checkpoint",
             "vllm", "triton", "numpy", "pydantic", "omegaconf", "hydra", "yaml", "safetensors",
             "tokenizers", "pytest", "pytest_timeout", "modelopt"):
    try:
        info["modules"][name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as e:  # any failure to import is "missing" here
        info["modules"][name] = None
        info.setdefault("import_errors", {})[name] = f"{type(e).__name__}: {e}"[:300]
try:
    import torch

    info["cuda_available"] = torch.cuda.is_available()
    info["torch_cuda"] = torch.version.cuda
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if info["gpus"]:
        p = torch.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        info["compute_capability"] = f"{p.major}.{p.minor}"
except Exception as e:
    info["cuda_available"], info["torch_error"] = False, f"{type(e).__name__}: {e}"
try:
    import jax

    info["jax_devices"] = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
except Exception as e:
    info["jax_devices"], info["jax_error"] = [], f"{type(e).__name__}: {e}"[:300]
try:
    smi = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    smi_run = subprocess.run(smi, capture_output=True, text=True, timeout=20)
    info["nvidia_smi"] = smi_run.stdout.strip()
except Exception:
    info["nvidia_smi"] = None
info["host"] = platform.node()
with open(sys.argv[1], "w") as f:
    json.dump(info, f, indent=1)
missing = [k for k in ("torch", "transformers", "numpy", "pydantic", "omegaconf", "hydra",
                       "safetensors", "tokenizers", "pytest") if info["modules"][k] is None]
print(f"GPU: {info.get('gpus') or 'none'}; torch {info['modules']['torch']} (CUDA "
      f"{info.get('torch_cuda')}), jax {info['modules']['jax']} {info['jax_devices']}, "
      f"transformers {info['modules']['transformers']}")
if missing:
    print(f"MISSING Python modules the checks need: {', '.join(missing)} (pip install them, or "
          "put copies built for this Python in .gpu-site/ or $DOCKYARD_GPU_SITE)")
sys.exit(0 if info["cuda_available"] else 2)
PY
gpu_rc=$?

# The report: OUT_DIR/report.json from env.json, steps.tsv, pytest.xml, figures/ and the logs.
IFS= read -r -d '' report_py <<'PY'
import contextlib, json, re, sys, time
import xml.etree.ElementTree as ET
from pathlib import Path

out, start, gpu_rc, on_cpu = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def pytest_log(log):
    """(tests collected, ids of the tests that started) from pytest -v's output."""
    text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
    m = re.search(r"collected (\d+) items?(?: / (\d+) deselected)?", text)
    collected = int(m[1]) - int(m[2] or 0) if m else None
    started = [re.sub(r"\.py::", "::", i, count=1).replace("/", ".")  # junit's spelling
               for i in re.findall(r"^(tests/\S+::\S+)", text, re.M)]
    return collected, started


def junit_tests(path, started):
    """[{id, outcome, seconds, message}] from pytest's junit XML (None when it is missing); a
    test interrupted by the time limit is the nameless case: its id comes from the log."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = []
    for case in root.iter("testcase"):
        if case.get("name") is None:
            done = {t["id"] for t in tests}
            tid = next((i for i in started if i not in done), "?")
            tests.append({"id": tid, "outcome": "interrupted",
                          "seconds": float(case.get("time") or 0), "message": None})
            continue
        outcome, message = "passed", None
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error"}.get(tag, "skipped")
                if node.get("type") == "pytest.xfail":
                    outcome = "xfailed"
                message = (node.get("message") or node.text or "")[:2000]
                break
        tests.append({"id": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0), "message": message})
    return tests


def bench_checks(log):
    """PASS/FAIL lines of a bench script's output, and its last JSON line if it printed one."""
    checks, last_json = [], None
    for line in Path(log).read_text(errors="replace").splitlines() if Path(log).exists() else []:
        m = re.match(r"(PASS|FAIL) ([^:]+): (.*)", line)
        if m:
            checks.append({"name": m[2], "ok": m[1] == "PASS", "detail": m[3]})
        elif line.startswith("{"):
            with contextlib.suppress(ValueError):
                last_json = json.loads(line)
    return checks, last_json


steps, bench = [], {}
rows = Path(out, "steps.tsv").read_text().splitlines() if Path(out, "steps.tsv").exists() else []
for row in rows:
    name, status, seconds, cap, log = row.split("\t")
    entry = {"name": name, "status": status, "seconds": int(seconds), "cap_s": int(cap),
             "timed_out": status in ("124", "137"), "log": log}
    steps.append(entry)
    if name.startswith("bench/"):
        stem = Path(name).stem
        checks, printed = bench_checks(log)
        bench[name] = {**entry, "checks": checks,
                       "figures": load(out / "figures" / f"bench_{stem}.json") or printed}
collected, started = pytest_log(out / "pytest.txt")
tests = junit_tests(out / "pytest.xml", started)
counts = {}
for t in tests or []:
    counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
figures = {p.stem: load(p) for p in sorted((out / "figures").glob("*.json"))
           if not p.stem.startswith("bench_")}
env = load(out / "env.json") or {}
problems = []
if gpu_rc != 0:
    problems.append("no CUDA GPU visible" + (" (private CPU run)" if on_cpu == "1" else ""))
problems += [f"{s['name']}: exit {s['status']}" for s in steps if s["status"] != "0"]
if gpu_rc == 0 or on_cpu == "1":
    if tests is None:
        problems.append("pytest wrote no junit XML")
    elif counts.get("failed") or counts.get("error") or not counts.get("passed"):
        problems.append(f"tests: {counts}")
    if tests is not None and collected is not None and len(tests) < collected:
        problems.append(f"tests: {collected - len(tests)} of {collected} never ran (time limit)")
report = {
    "ok": not problems, "problems": problems, "gpu": (env.get("gpus") or [None])[0],
    "gpus": env.get("gpus"), "versions": {k: (env.get("modules") or {}).get(k) for k in
                                          ("torch", "jax", "jaxlib", "transformers", "vllm")},
    "env": env, "tests_collected": collected, "tests": tests, "test_counts": counts,
    "test_figures": figures, "bench": bench, "steps": steps,
    "wall_s": round(time.time() - start, 1),
    "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
}
(out / "report.json").write_text(json.dumps(report, indent=1))
print(f"\n::: report {out / 'report.json'}: GPU {report['gpu']}, tests {counts}, "
      f"wall {report['wall_s']} s")
for s in steps:
    print(f"  {s['name']}: exit {s['status']} in {s['seconds']} s (cap {s['cap_s']} s)")
for p in problems:
    print(f"  PROBLEM: {p}")
sys.exit(0 if not problems else 1)
PY
report() { "$py" -c "$report_py" "$out" "$start" "$gpu_rc" "$on_cpu"; }

if ((gpu_rc != 0)) && [ "$on_cpu" != 1 ]; then
  report
  echo "no CUDA GPU visible to $py (preflight exit $gpu_rc: torch.cuda.is_available() is False, \
or torch is missing; see $out/env.json): nothing to check; run this on a GPU host" >&2
  exit 2
fi
[ "$on_cpu" = 1 ] && export DOCKYARD_GPU_TESTS_ON_CPU=1

pytest_args=(-m gpu tests/gpu -v -rA -p no:cacheprovider --junitxml="$out/pytest.xml")
if ! "$py" -c "import pytest_timeout" 2>/dev/null; then
  # pyproject's `timeout` key needs pytest-timeout; without it --strict-config would refuse to
  # start: drop the ini addopts and restate the ones that matter.
  pytest_args+=(-o addopts= --strict-markers --import-mode=importlib --durations=0
    -W "ignore::pytest.PytestConfigWarning")
fi
# shellcheck disable=SC2206 # word splitting is the point
pytest_args+=(${GPU_CHECKS_PYTEST_ARGS:-})
step "pytest -m gpu tests/gpu" 300 "$out/pytest.txt" "$py" -m pytest "${pytest_args[@]}"

scripts=()
for s in bench/gpu/torch_checks.py bench/gpu/jax_checks.py bench/gpu/*.py; do
  [ -e "$s" ] && [[ ! " ${scripts[*]} " =~ " $s " ]] && scripts+=("$s")
done
for s in "${scripts[@]}"; do
  name=$(basename "$s" .py)
  case "$name" in
  torch_checks) cap=120 args=(--repeats 3) ;;
  jax_checks) cap=200 args=(--repeats 3 --layers 12) ;; # half the depth: ~half the XLA compile
  *) cap=120 args=() ;;
  esac
  [ "$on_cpu" = 1 ] && args=(--smoke)
  step "$s" "$cap" "$out/bench_$name.txt" "$py" "$s" "${args[@]}"
done

report
