"""Repository habits that CI holds: ruff (lint + format), pyright on core, the docs build."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def _run(cmd: list[str], repo: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout)


def test_ruff_lint_is_clean(repo: Path) -> None:
    out = _run([str(BIN / "ruff"), "check", "--no-cache", "."], repo)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_clean(repo: Path) -> None:
    out = _run([str(BIN / "ruff"), "format", "--check", "--no-cache", "."], repo)
    assert out.returncode == 0, "run `uv run ruff format .`:\n" + out.stdout + out.stderr


@pytest.mark.slow
def test_pyright_is_clean_on_core(repo: Path) -> None:
    out = _run([str(BIN / "pyright")], repo)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(repo: Path, tmp_path: Path) -> None:
    out = _run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")], repo
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_changelog_and_license(repo: Path) -> None:
    assert "Apache License" in (repo / "LICENSE").read_text()
    assert "## " in (repo / "CHANGELOG.md").read_text()


MAX_FUNCTION_LINES = 100


def test_no_function_over_100_lines(repo: Path) -> None:
    """No function of ``packages/*/src`` (methods and nested functions included, decorators
    not) runs past 100 lines: a longer one is split by meaning into named helpers."""
    long = []
    for path in sorted(repo.glob("packages/*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(repo)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "split these by meaning into named helpers:\n" + "\n".join(long)
