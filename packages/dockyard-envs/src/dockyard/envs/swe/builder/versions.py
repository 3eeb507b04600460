"""SWE-bench-format instances from two released versions of a library: real bugs, real fixes.

For ``package`` at releases ``old`` → ``new`` (both sdists from PyPI):

1. the *test patch* is the diff of the test files between the releases, the *gold patch* the
   diff of the library's source files (:func:`~dockyard.envs.swe.builder.build.source_files`;
   docs, changelogs and packaging are left out);
2. the changed test files run twice (locally, like the mutation builder): on ``old``'s source
   with ``new``'s tests, and on ``new``. ``FAIL_TO_PASS`` = the tests that pass on ``new`` and
   not on ``old`` (at most ``f2p_cap``, chosen with the seed), ``PASS_TO_PASS`` = tests of those
   files passing on both (at most ``p2p_cap``). No such test: no instance (the release fixed
   nothing its tests show);
3. the issue text is the release's own changelog entry (the lines the new release added to its
   ``CHANGES`` / ``CHANGELOG`` / ``NEWS`` / ``HISTORY`` file: written by the maintainers, not by a
   model), followed by the failing tests' evidence (:mod:`~dockyard.envs.swe.builder.issue`);
4. the repository is ``old``'s tree (without ``docs/``) as ``repo_tarball`` (base64 ``.tar.gz``),
   so the record needs nothing but the loader (:mod:`dockyard.envs.swe.records`).

``python -m dockyard.envs.swe.builder.versions --pair cachetools==5.5.0:5.5.1 --out X.jsonl``.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from dockyard.envs.swe.builder.build import source_files
from dockyard.envs.swe.builder.issue import problem_statement
from dockyard.envs.swe.builder.runner import Outcome, RunFailed, run_pytest
from dockyard.envs.swe.instance import test_file_of, unified_diff
from dockyard.envs.swe.sdist import _sha256, fetch_sdist, read_sdist, tarball, write_tree

_CHANGELOG_STEMS = ("changes", "changelog", "news", "history", "release-notes", "releases")
MAX_CHANGELOG_CHARS = 3000


def is_test_file(path: str) -> bool:
    """A file of the test suite: under a ``test(s)``/``testing`` folder, or ``test_*.py``."""
    parts = path.split("/")
    name = parts[-1]
    return any(p in ("tests", "test", "testing") for p in parts[:-1]) or (
        name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    )


def changelog_entry(old: dict[str, bytes], new: dict[str, bytes]) -> str:
    """The lines ``new`` added to its changelog file(s), at the top of the sdist or in
    ``docs/`` (``''`` when it has none)."""
    out: list[str] = []
    for path in sorted(new):
        stem = path.rsplit("/", 1)[-1].split(".")[0].lower()
        top = path.count("/") == 0 or (path.count("/") == 1 and path.startswith(("docs/", "doc/")))
        if not top or path.endswith(".py") or stem not in _CHANGELOG_STEMS:
            continue
        before = old.get(path, b"").decode("utf-8", "replace").splitlines()
        after = new[path].decode("utf-8", "replace").splitlines()
        ops = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes()
        out += [
            ln for tag, _, _, j1, j2 in ops if tag in ("insert", "replace") for ln in after[j1:j2]
        ]
    text = "\n".join(out).strip()
    return text[:MAX_CHANGELOG_CHARS] + (" ..." if len(text) > MAX_CHANGELOG_CHARS else "")


def _diff(paths: list[str], old: dict[str, bytes], new: dict[str, bytes]) -> str:
    return "".join(
        unified_diff(
            p,
            old.get(p, b"").decode("utf-8"),
            new.get(p, b"").decode("utf-8"),
        )
        for p in paths
    )


def build_version_pair(
    package: str,
    old: str,
    new: str,
    *,
    seed: int = 0,
    f2p_cap: int = 10,
    p2p_cap: int = 10,
    timeout_s: float = 60.0,
) -> tuple[dict[str, Any] | None, str]:
    """``(record, why)``: the SWE-bench record of ``old`` → ``new``, or ``None`` and why not."""
    a_path, b_path = fetch_sdist(package, old), fetch_sdist(package, new)
    a, b = read_sdist(a_path), read_sdist(b_path)
    src_changed, tests_changed, test_py = _changed_files(a, b)
    if not src_changed or not test_py:
        return None, f"source files changed: {len(src_changed)}, test files: {len(test_py)}"
    if not _all_utf8(src_changed + tests_changed, a, b):
        return None, "a changed file is not UTF-8 text"
    ran = _run_old_and_new(package, a, b, tests_changed, test_py, timeout_s)
    if isinstance(ran, str):
        return None, ran
    r_old, r_new = ran
    passing_new = {k for k, o in r_new.items() if o.outcome == "passed"}
    fixed = sorted(k for k in passing_new if k not in r_old or r_old[k].outcome != "passed")
    if not fixed:
        return None, "no test of the new release fails on the old one"
    rng = random.Random(f"{package}=={old}:{new}:{seed}")
    f2p, p2p = _sample_tests(rng, fixed, passing_new, r_old, f2p_cap, p2p_cap)
    text = _problem_text(package, old, new, a, b, fixed, f2p, r_old)
    repo = {k: v for k, v in a.items() if not k.startswith(("docs/", "doc/"))}
    return {
        "instance_id": f"{package}__{old}__{new}",
        "repo": f"pypi/{package}",
        "base_commit": f"sdist-sha256:{_sha256(a_path)}",
        "version": old,
        "environment_setup_commit": "",
        "created_at": "",
        "problem_statement": text,
        "hints_text": "",
        "patch": _diff(src_changed, a, b),
        "test_patch": _diff(tests_changed, a, b),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "fixed_in": {"version": new, "sha256": _sha256(b_path)},
        "num_failing": len(fixed),
        "repo_tarball": base64.b64encode(tarball(repo)).decode("ascii"),
    }, ""


def _changed_files(
    a: dict[str, bytes], b: dict[str, bytes]
) -> tuple[list[str], list[str], list[str]]:
    """The changed ``(source files, test-suite files, test modules of b to run)``, sorted."""
    changed = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    src = set(source_files(a)) | set(source_files(b))
    src_changed = [p for p in changed if p in src]
    tests_changed = [p for p in changed if is_test_file(p)]
    test_py = [p for p in tests_changed if p in b and p.endswith(".py") and is_test_file(p)]
    test_py = [p for p in test_py if p.rsplit("/", 1)[-1].startswith("test")]
    return src_changed, tests_changed, test_py


def _all_utf8(paths: list[str], a: dict[str, bytes], b: dict[str, bytes]) -> bool:
    """Whether both releases' versions of ``paths`` decode as UTF-8 (the patches are text)."""
    try:
        for p in paths:
            (a.get(p, b"") + b.get(p, b"")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _run_old_and_new(
    package: str,
    a: dict[str, bytes],
    b: dict[str, bytes],
    tests_changed: list[str],
    test_py: list[str],
    timeout_s: float,
) -> tuple[dict[str, Outcome], dict[str, Outcome]] | str:
    """``test_py``'s results ``(on old with the new tests, on new)``, or why there are none."""
    with tempfile.TemporaryDirectory(prefix=f"dockyard-versions-{package}-") as tmp:
        before, after = Path(tmp, "before"), Path(tmp, "after")
        write_tree(_old_with_new_tests(a, b, tests_changed), before)
        write_tree(b, after)
        try:
            r_new = run_pytest(after, paths=test_py, timeout_s=timeout_s)
            if any(k.startswith("<collection>") for k in r_new):
                return f"the new release's tests do not collect: {sorted(r_new)[:2]}"
            r_old = run_pytest(before, paths=test_py, timeout_s=timeout_s)
        except RunFailed as e:  # e.g. the fix was for a hang: the old code never finishes
            return str(e)
        _relativize_crash_paths(r_old, before)
    return r_old, r_new


def _old_with_new_tests(
    a: dict[str, bytes], b: dict[str, bytes], tests_changed: list[str]
) -> dict[str, bytes]:
    """The old tree with the new release's test files (those it deleted left out)."""
    mixed = {k: v for k, v in a.items() if k not in tests_changed}
    mixed.update({p: b[p] for p in tests_changed if p in b})
    return mixed


def _relativize_crash_paths(results: dict[str, Outcome], root: Path) -> None:
    """Crash paths made relative to ``root``, as in the builder (``''`` if outside it), in place."""
    for k, o in results.items():
        if o.crash_path.startswith(f"{root}/"):
            results[k] = o._replace(crash_path=o.crash_path.removeprefix(f"{root}/"))
        elif o.crash_path:
            results[k] = o._replace(crash_path="")


def _sample_tests(
    rng: random.Random,
    fixed: list[str],
    passing_new: set[str],
    r_old: dict[str, Outcome],
    f2p_cap: int,
    p2p_cap: int,
) -> tuple[list[str], list[str]]:
    """``(FAIL_TO_PASS, PASS_TO_PASS)``: fixed tests, and tests of their files passing on both."""
    f2p = sorted(rng.sample(fixed, min(f2p_cap, len(fixed))))
    f2p_files = {test_file_of(t) for t in f2p}
    pool = sorted(
        k for k in passing_new - set(fixed) if test_file_of(k) in f2p_files and k in r_old
    )
    p2p = sorted(rng.sample(pool, min(p2p_cap, len(pool))))
    return f2p, p2p


def _problem_text(
    package: str,
    old: str,
    new: str,
    a: dict[str, bytes],
    b: dict[str, bytes],
    fixed: list[str],
    f2p: list[str],
    r_old: dict[str, Outcome],
) -> str:
    """The issue: the release's changelog entry, then the old release's failing evidence."""
    entry = changelog_entry(a, b)
    issue = problem_statement(
        package,
        {t: _old_evidence(r_old, t) for t in f2p[:3]},
        len(fixed),
        also_failing=[t for t in fixed if t not in f2p[:3]],
        lead=f"{len(fixed)} test(s) of `{package}` {new} fail on {old}.",
    )
    return (
        f"`{package}` {old}: the fix below landed in {new}.\n\n### What the maintainers wrote\n\n"
        + (entry or "(the release has no changelog entry)")
        + "\n\n"
        + issue
    )


def _old_evidence(r_old: dict[str, Outcome], t: str) -> Outcome:
    """Test ``t``'s outcome on the old release; an error naming why when it was not collected."""
    if t in r_old:
        return r_old[t]
    coll = r_old.get(f"<collection>::{test_file_of(t)}")
    return Outcome("error", f"not collected: {coll.message if coll else '(no report)'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dockyard.envs.swe.builder.versions",
        description=(__doc__ or "").split("\n")[0],
    )
    ap.add_argument("--pair", action="append", required=True, help="NAME==OLD:NEW (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    args = ap.parse_args(argv)
    records = []
    for spec in args.pair:
        name, _, versions = spec.partition("==")
        old, _, new = versions.partition(":")
        if not (name and old and new):
            ap.error(f"--pair {spec!r}: expected NAME==OLD:NEW")
        rec, why = build_version_pair(name, old, new, seed=args.seed)
        print(
            f"{name} {old} -> {new}: "
            + (f"{len(rec['FAIL_TO_PASS'])} FAIL_TO_PASS" if rec else f"skipped ({why})"),
            file=sys.stderr,
            flush=True,
        )
        if rec is not None:
            records.append(rec)
            args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    print(f"wrote {len(records)} instances to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
