"""Per-(repo, version) environment setup: from the ``swebench`` package, or from our spec files.

An :class:`EnvSetup` says how an instance's repository is prepared and tested: ``pre_install``
and ``install`` commands, extra ``packages``, the ``python`` version, the ``test_cmd``, and the
``log_parser`` that turns a test log into per-test statuses.

Where it comes from, first match wins (:func:`resolve_setup`):

1. **SWE-bench's own specifications**, for the repositories and versions it knows:
   ``swebench.harness.constants.MAP_REPO_VERSION_TO_SPECS[repo][version]`` (``pre_install``,
   ``install``, ``pip_packages``/``packages``, ``python``, ``test_cmd``) and
   ``swebench.harness.log_parsers.MAP_REPO_TO_PARSER[repo]``. A dependency, not a copy: install
   ``dockyard-envs[swebench]`` (swebench 4.x; 5.x moved these specs into per-instance images).
2. **Our spec format** (YAML or JSON) for repositories it does not know, keyed like SWE-bench's
   map (``"*"`` matches any version)::

       pypi/inflection:
         "*":
           python: "3.11"
           pre_install: []
           install: []
           test_cmd: pytest
           log_parser: pytest_report

   The shipped synthetic tasks are expressed in it (``swe/specs/shipped.yaml``).

**Provisioning.** A setup is translated into a build plan (:mod:`dockyard.envs.swe.plan`: a
``python:<release>`` base, environment steps, repository steps) and built into a sandbox
environment once per (repo, version), cached and mounted read-only by every task and session of
it (:mod:`dockyard.envs.swe.provision`); the repository steps run in each task's copy of the
repository before the patch. SWE-bench's ``packages`` string is read with shell rules
(:func:`shell_words`) into ``conda_packages``; ``pip_packages`` become ``packages``.

**Where the verdict comes from.** ``log_parser: pytest_report`` (and any SWE-bench spec whose
``test_cmd`` is pytest) means the sandbox's own pytest runner runs the ``FAIL_TO_PASS`` /
``PASS_TO_PASS`` ids and writes its report *outside* the tree the code under test can write
(SANDBOX-THREATS rows 11/12): no stdout is parsed. A SWE-bench log parser is used only where the
test command is not pytest (Django's ``runtests.py``, SymPy's ``bin/test``, ...): then the log is
the tests' own output and a patch could forge lines in it, which :func:`parse_test_log` cannot
rule out — such verdicts are flagged ``verdict_source: "log_parser"``.
"""

from __future__ import annotations

import importlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dockyard.envs.swe.records import SweInstance

OUR_RUNNER = "pytest_report"
"""``log_parser`` value: the sandbox's pytest runner decides (a report outside the tree)."""

SWEBENCH_INSTALL = 'pip install "dockyard-envs[swebench]"'


@dataclass
class EnvSetup:
    """How one (repo, version) environment is set up and tested (see the module docstring)."""

    repo: str
    version: str
    test_cmd: str
    log_parser: str = OUR_RUNNER
    python: str | None = None
    pre_install: list[str] = field(default_factory=list)
    install: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)  # pip requirements (``pip_packages``)
    source: str = "dockyard"  # "swebench" or the spec file it came from
    requirements_file: str = ""  # SWE-bench's ``packages: requirements.txt|environment.yml``
    conda_packages: list[str] = field(default_factory=list)  # SWE-bench's ``packages: "a 'b<2'"``
    eval_commands: list[str] = field(default_factory=list)  # run before the tests (``export``...)
    other: dict[str, Any] = field(default_factory=dict)  # keys of other languages' specs
    language: str = "py"  # SWE-bench's MAP_REPO_TO_EXT: py, js, go, java, rs, php, rb, c

    @property
    def uses_our_runner(self) -> bool:
        """The verdict comes from the sandbox's pytest report, never from parsing a log."""
        if self.log_parser == OUR_RUNNER:
            return True
        words = _words(self.test_cmd)
        return bool(words) and (
            words[0] in ("pytest", "py.test") or words[:3] == ["python", "-m", "pytest"]
        )


def _words(cmd: str) -> list[str]:
    try:
        words = shlex.split(cmd)
    except ValueError:
        return []
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # leading VAR=value assignments
    return words


def shell_words(text: str, what: str) -> list[str]:
    """``text`` split with POSIX shell rules (``'numpy==1.19.2' pytest`` -> two words, no
    quotes). Raises ValueError naming ``what`` for text a shell could not parse."""
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError as e:
        raise ValueError(f"{what}: {text[:120]!r} is not shell words ({e})") from e


_OTHER_KEYS = ("build", "apt-pkgs", "docker_specs", "pre_test", "execute_test_as_nonroot")
"""Keys of SWE-bench's specs that only its other languages' images (node, go, java, ...) read."""


def _as_list(v: Any, what: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v.strip() else []
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise ValueError(f"{what} must be a string or a list of strings")


def _swebench_maps() -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    except ImportError as e:
        raise ImportError(
            f"SWE-bench's environment specs need the swebench package (4.x): {SWEBENCH_INSTALL}"
        ) from e
    return MAP_REPO_VERSION_TO_SPECS, MAP_REPO_TO_PARSER


def _language(repo: str) -> str:
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.constants import MAP_REPO_TO_EXT
    except ImportError:  # an older swebench: Python only
        return "py"
    return str(MAP_REPO_TO_EXT.get(repo, "py"))


def swebench_setup(repo: str, version: str) -> EnvSetup | None:
    """The setup SWE-bench's package specifies for ``(repo, version)``, or None if it has none.

    Raises ImportError (with the install command) when swebench is not installed."""
    specs, parsers = _swebench_maps()
    spec = specs.get(repo, {}).get(version)
    if spec is None:
        return None
    where = f"swebench {repo} {version}"
    pkgs = spec.get("packages")
    req_file, conda = "", []
    if isinstance(pkgs, str) and pkgs.strip() in ("requirements.txt", "environment.yml"):
        req_file = pkgs.strip()  # the repository's own file, read at environment_setup_commit
    elif pkgs is not None:
        conda = shell_words(pkgs, f"{where} packages") if isinstance(pkgs, str) else pkgs
    parser = parsers.get(repo)
    return EnvSetup(
        repo=repo,
        version=version,
        test_cmd=" ".join(_as_list(spec.get("test_cmd"), "test_cmd")),
        log_parser=parser.__name__ if parser is not None else "parse_log_pytest",
        python=spec.get("python"),
        pre_install=_as_list(spec.get("pre_install"), "pre_install"),
        install=_as_list(spec.get("install"), "install"),
        packages=_as_list(spec.get("pip_packages"), f"{where} pip_packages"),
        source="swebench",
        requirements_file=req_file,
        conda_packages=_as_list(conda, f"{where} packages"),
        eval_commands=_as_list(spec.get("eval_commands"), f"{where} eval_commands"),
        other={k: spec[k] for k in _OTHER_KEYS if spec.get(k)},
        language=_language(repo),
    )


_SPEC_KEYS = {
    "python",
    "pre_install",
    "install",
    "packages",
    "test_cmd",
    "log_parser",
    "eval_commands",
}


def parse_spec_file(path: str | Path) -> dict[tuple[str, str], EnvSetup]:
    """Our spec format (module docstring), from a ``.yaml`` / ``.yml`` / ``.json`` file.

    Raises:
        ValueError: naming the file, the repo / version and the bad key.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a spec file maps repo -> version -> setup")
    out: dict[tuple[str, str], EnvSetup] = {}
    for repo, versions in data.items():
        if not isinstance(versions, dict):
            raise ValueError(f"{path}: {repo}: map each version (or '*') to its setup")
        for version, spec in versions.items():
            where = f"{path}: {repo} {version}"
            if not isinstance(spec, dict):
                raise ValueError(f"{where}: the setup must be a mapping")
            unknown = set(spec) - _SPEC_KEYS
            if unknown:
                raise ValueError(
                    f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_SPEC_KEYS)}"
                )
            if not isinstance(spec.get("test_cmd"), str) or not spec["test_cmd"].strip():
                raise ValueError(f"{where}: 'test_cmd' (a shell command) is required")
            parser = spec.get("log_parser", OUR_RUNNER)
            if not isinstance(parser, str):
                raise ValueError(f"{where}: 'log_parser' must be a name")
            out[(str(repo), str(version))] = EnvSetup(
                repo=str(repo),
                version=str(version),
                test_cmd=spec["test_cmd"],
                log_parser=parser,
                python=None if spec.get("python") is None else str(spec["python"]),
                pre_install=_as_list(spec.get("pre_install"), f"{where}: pre_install"),
                install=_as_list(spec.get("install"), f"{where}: install"),
                packages=_as_list(spec.get("packages"), f"{where}: packages"),
                eval_commands=_as_list(spec.get("eval_commands"), f"{where}: eval_commands"),
                source=str(path),
            )
    return out


def shipped_spec_files() -> list[Path]:
    root = resources.files("dockyard.envs.swe") / "specs"
    return sorted(Path(str(p)) for p in root.iterdir() if str(p).endswith((".yaml", ".json")))


def resolve_setup(inst: SweInstance, spec_files: Sequence[str | Path] = ()) -> EnvSetup:
    """The setup of ``inst``'s (repo, version): SWE-bench's, else ours (exact version, then
    ``"*"``; the given files before the shipped ones).

    Raises:
        LookupError: nobody specifies it (the message says how to add a spec).
    """
    if inst.flavor == "swebench" and inst.version and "/" in inst.repo:
        try:
            found = swebench_setup(inst.repo, inst.version)
        except ImportError:
            found = None  # fall through to our specs; the error below says what to install
        if found is not None:
            return found
    tables = [parse_spec_file(p) for p in [*spec_files, *shipped_spec_files()]]
    for key in ((inst.repo, inst.version), (inst.repo, "*")):
        for table in tables:
            if key in table:
                return table[key]
    raise LookupError(
        f"{inst.instance_id}: no environment spec for {inst.repo} {inst.version or '(no version)'}: "
        f"neither SWE-bench's package ({SWEBENCH_INSTALL}) nor a spec file knows it; write one "
        "(docs/envs/swe-agent.md, 'Environment specs') and pass it with --spec"
    )


def swebench_parser(name: str) -> Any:
    """The function ``name`` of ``swebench.harness.log_parsers`` (or of its per-language modules).

    Raises ImportError (with the install command) or LookupError (unknown name)."""
    try:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    except ImportError as e:
        raise ImportError(
            f"SWE-bench's log parsers need the swebench package (4.x): {SWEBENCH_INSTALL}"
        ) from e
    for parser in MAP_REPO_TO_PARSER.values():
        if getattr(parser, "__name__", None) == name:
            return parser
    for lang in ("python", "javascript", "c", "go", "java", "php", "ruby", "rust"):
        try:
            mod = importlib.import_module(f"swebench.harness.log_parsers.{lang}")
        except ImportError:
            continue
        if name.startswith("parse_log_") and callable(getattr(mod, name, None)):
            return getattr(mod, name)
    raise LookupError(f"swebench.harness.log_parsers has no parser {name!r}")


def parse_test_log(
    setup: EnvSetup, log: str, instance: dict[str, Any] | None = None
) -> dict[str, str]:
    """Per-test statuses (``PASSED`` / ``FAILED`` / ...) from a test log, with SWE-bench's parser
    named by ``setup.log_parser`` (a function of ``swebench.harness.log_parsers``).

    Only for test commands our runner does not drive (module docstring). ``instance`` (the
    SWE-bench record) builds the ``TestSpec`` some parsers read; without it they get None."""
    if setup.uses_our_runner:
        raise ValueError(
            f"{setup.repo} {setup.version}: the test command is pytest-driven by the sandbox's "
            "runner; its report decides, never a parsed log"
        )
    parser = swebench_parser(setup.log_parser)
    spec = None
    if instance is not None:
        # lazy: swebench is the optional swebench extra (and takes 2 s to import)
        from swebench.harness.test_spec.test_spec import make_test_spec

        spec = make_test_spec(instance)  # type: ignore[arg-type]
    statuses: Any = parser(log, spec)
    return {str(k): str(v) for k, v in statuses.items()}
