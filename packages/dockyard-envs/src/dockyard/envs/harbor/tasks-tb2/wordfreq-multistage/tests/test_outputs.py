import subprocess
from pathlib import Path


def test_tool_installed_from_build_stage():
    assert Path("/usr/local/bin/wordfreq.pyz").is_file()
    assert not Path("/src").exists()  # only the artifact came over


def test_top5():
    out = subprocess.run(
        ["python3", "/usr/local/bin/wordfreq.pyz", "/app/essay.txt", "5"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    want = [line.split()[1] for line in out.splitlines()]
    assert Path("/app/top5.txt").read_text().split() == want
