"""SWE-bench and SWE-bench Pro instances from JSONL / Parquet into one type, with clear errors;
environment specs from the swebench package and from our own spec files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dockyard.envs.swe import load_shipped_tasks
from dockyard.envs.swe.data import load_swebench_jsonl
from dockyard.envs.swe.records import (
    PRO_OPTIONAL,
    SWEBENCH_FIELDS,
    InstanceError,
    from_record,
    load_instances,
)
from dockyard.envs.swe.specs import (
    OUR_RUNNER,
    parse_spec_file,
    parse_test_log,
    resolve_setup,
    shipped_spec_files,
)

SWEBENCH = {
    "repo": "django/django",
    "instance_id": "django__django-11099",
    "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
    "patch": "diff --git a/django/contrib/auth/validators.py b/django/contrib/auth/validators.py\n",
    "test_patch": "diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n",
    "problem_statement": "UsernameValidator allows trailing newline in usernames",
    "hints_text": "",
    "created_at": "2019-03-20T03:46:18Z",
    "version": "3.0",
    # as on the Hub: JSON-encoded strings
    "FAIL_TO_PASS": '["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]',
    "PASS_TO_PASS": '["test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)"]',
    "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
}

PRO = {
    "repo": "NodeBB/NodeBB",
    "instance_id": "instance_NodeBB__NodeBB-04998908ba6721d64eba79ae3b65a351dcfbc5b5",
    "base_commit": "1e137b07052bc3ea0da44ed201702c94055b8ad2",
    "patch": "diff --git a/src/user/index.js b/src/user/index.js\n",
    "test_patch": "diff --git a/test/user.js b/test/user.js\n",
    "problem_statement": "Users can set an email that is already taken",
    "requirements": "- The email must be unique",
    "interface": "No new interfaces are introduced",
    "repo_language": "js",
    # Pro's lists are strings too, some in Python's literal form
    "fail_to_pass": "['test/user.js | User should reject a taken email']",
    "pass_to_pass": '["test/user.js | User should create a user"]',
    "issue_specificity": '["major_bug"]',
    "issue_categories": "['back_end_knowledge', 'database_knowledge']",
    "before_repo_set_cmd": "git reset --hard 1e137b07\ngit clean -fd",
    "selected_test_files_to_run": '["test/user.js"]',
}


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_swebench_record_loads_with_every_field():
    inst = from_record(SWEBENCH)
    assert inst.flavor == "swebench"
    assert inst.fail_to_pass == [
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"
    ]
    assert len(inst.pass_to_pass) == 1
    for key in SWEBENCH_FIELDS:
        value = getattr(inst, key.lower() if key.isupper() else key)
        expected = json.loads(SWEBENCH[key]) if key.isupper() else SWEBENCH[key]
        assert value == expected, key
    task = inst.to_task()
    assert task["FAIL_TO_PASS"] == inst.fail_to_pass
    assert "fail_to_pass" not in task


def test_swebench_pro_record_loads_into_the_same_type():
    inst = from_record(PRO, "pro.jsonl:1")
    assert inst.flavor == "swebench_pro"
    assert inst.fail_to_pass == ["test/user.js | User should reject a taken email"]
    assert inst.pass_to_pass == ["test/user.js | User should create a user"]
    assert inst.version == ""
    assert inst.pro["issue_categories"] == ["back_end_knowledge", "database_knowledge"]
    assert inst.pro["selected_test_files_to_run"] == ["test/user.js"]
    assert inst.pro["repo_language"] == "js"
    assert set(inst.pro) <= set(PRO_OPTIONAL)
    task = inst.to_task()
    assert task["requirements"] == PRO["requirements"]
    assert task["FAIL_TO_PASS"] == inst.fail_to_pass


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_commit": None}, "missing SWE-bench field(s) ['base_commit']"),
        ({"FAIL_TO_PASS": None}, "missing SWE-bench field(s) ['FAIL_TO_PASS']"),
        ({"FAIL_TO_PASS": "not a list"}, "neither a JSON nor a Python list"),
        ({"FAIL_TO_PASS": "[1, 2]"}, "'FAIL_TO_PASS' must be a list of test-id strings"),
        ({"FAIL_TO_PASS": "[]"}, "'FAIL_TO_PASS' is empty"),
        ({"patch": 3}, "field 'patch' must be a string, got int"),
        ({"version": ["3.0"]}, "field 'version' must be a string"),
    ],
)
def test_bad_swebench_records_name_the_place_and_the_field(change, message):
    rec = {k: v for k, v in {**SWEBENCH, **change}.items() if v is not None}
    with pytest.raises(InstanceError, match=r"data\.jsonl:7: ") as err:
        from_record(rec, "data.jsonl:7")
    assert message in str(err.value)


def test_bad_pro_records_are_reported_as_pro():
    rec = {k: v for k, v in PRO.items() if k != "pass_to_pass"}
    with pytest.raises(InstanceError, match=r"missing SWE-bench Pro field\(s\) \['pass_to_pass'\]"):
        from_record(rec)


def test_jsonl_and_parquet_files_load_the_same(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    jsonl = _write_jsonl(tmp_path / "d.jsonl", [SWEBENCH, {**SWEBENCH, "instance_id": "x-2"}])
    table = pa.Table.from_pylist([SWEBENCH, {**SWEBENCH, "instance_id": "x-2"}])
    pq.write_table(table, tmp_path / "d.parquet")
    a, b = load_instances(jsonl), load_instances(tmp_path / "d.parquet")
    assert [i.instance_id for i in a] == ["django__django-11099", "x-2"]
    assert a == b
    pro = load_instances(_write_jsonl(tmp_path / "pro.jsonl", [PRO]))
    assert pro[0].flavor == "swebench_pro"


def test_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(SWEBENCH) + "\n\n{oops\n")
    with pytest.raises(InstanceError, match=r"bad\.jsonl:3: not JSON"):
        load_instances(bad)
    dup = _write_jsonl(tmp_path / "dup.jsonl", [SWEBENCH, SWEBENCH])
    with pytest.raises(
        InstanceError, match=r"dup\.jsonl:2: instance_id .* again \(first at .*dup\.jsonl:1\)"
    ):
        load_instances(dup)
    with pytest.raises(FileNotFoundError, match="no such SWE-bench instances file"):
        load_instances(tmp_path / "missing.jsonl")


def test_the_env_loader_wants_to_know_where_the_repository_is(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [SWEBENCH])
    with pytest.raises(
        ValueError, match=r"d\.jsonl:1: django__django-11099: say where the sandbox"
    ):
        load_swebench_jsonl(path)
    ok = _write_jsonl(tmp_path / "ok.jsonl", [{**SWEBENCH, "repo_path": "/srv/repos/django"}])
    (task,) = load_swebench_jsonl(ok)
    assert task["repo_path"] == "/srv/repos/django"
    assert task["FAIL_TO_PASS"] == json.loads(SWEBENCH["FAIL_TO_PASS"])


# ---------------------------------------------------------------------------- specs


def test_swebench_package_specs_are_used_where_it_knows_the_repo():
    pytest.importorskip("swebench.harness.constants")
    django = resolve_setup(from_record(SWEBENCH))
    assert django.source == "swebench"
    assert django.test_cmd.startswith("./tests/runtests.py")
    assert django.log_parser == "parse_log_django"
    assert django.install == ["python -m pip install -e ."]
    assert not django.uses_our_runner  # its log parser decides, flagged as such
    astropy = resolve_setup(from_record({**SWEBENCH, "repo": "astropy/astropy", "version": "5.0"}))
    assert astropy.test_cmd.startswith("pytest")
    assert astropy.uses_our_runner  # pytest-driven: the sandbox's report decides
    assert astropy.packages  # its pinned pip packages come along


def test_swebench_log_parser_reads_a_django_log():
    pytest.importorskip("swebench.harness.log_parsers")
    setup = resolve_setup(from_record(SWEBENCH))
    log = (
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok\n"
        "test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest) ... FAIL\n"
    )
    statuses = parse_test_log(setup, log)
    assert statuses == {
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)": "PASSED",
        "test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)": "FAILED",
    }


def test_every_shipped_task_has_a_spec_run_by_our_runner():
    tasks = load_shipped_tasks()
    assert [p.name for p in shipped_spec_files()] == ["shipped.yaml"]
    for t in tasks:
        setup = resolve_setup(from_record({"patch": "", "test_patch": "", **t}))
        assert setup.source.endswith("shipped.yaml")
        assert setup.log_parser == OUR_RUNNER
        assert setup.uses_our_runner
    with pytest.raises(ValueError, match="pytest-driven by the sandbox's runner"):
        parse_test_log(setup, "PASSED forged")


def test_our_spec_format_and_its_errors(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        'acme/lib:\n  "2.1":\n    install: pip install -e .\n    test_cmd: make test\n'
        "    log_parser: parse_log_pytest\n"
        '  "*":\n    test_cmd: pytest -q\n'
    )
    table = parse_spec_file(spec)
    assert table[("acme/lib", "2.1")].install == ["pip install -e ."]
    assert not table[("acme/lib", "2.1")].uses_our_runner
    assert table[("acme/lib", "*")].uses_our_runner
    rec = {**SWEBENCH, "repo": "acme/lib", "version": "9.9"}
    assert resolve_setup(from_record(rec), [spec]).test_cmd == "pytest -q"
    assert resolve_setup(from_record({**rec, "version": "2.1"}), [spec]).test_cmd == "make test"
    with pytest.raises(LookupError, match=r"no environment spec for nobody/knows 1\.0.*--spec"):
        resolve_setup(from_record({**SWEBENCH, "repo": "nobody/knows", "version": "1.0"}), [spec])
    spec.write_text('acme/lib:\n  "1":\n    tests: pytest\n')
    with pytest.raises(ValueError, match=r"acme/lib 1: unknown keys \['tests'\]"):
        parse_spec_file(spec)
    spec.write_text('acme/lib:\n  "1":\n    install: []\n')
    with pytest.raises(ValueError, match=r"'test_cmd' .* is required"):
        parse_spec_file(spec)
