import subprocess
from pathlib import Path


def test_config_under_etc():
    assert Path("/app/config_path.txt").read_text().strip() == "/etc/greeter/greeter.conf"
    assert "Ahoy" in Path("/etc/greeter/greeter.conf").read_text()


def test_greetings():
    names = Path("/app/names.txt").read_text().split()
    want = [
        subprocess.run(
            ["/usr/local/bin/greeter", n], capture_output=True, text=True, check=True
        ).stdout.strip()
        for n in names
    ]
    assert want[0] == "Ahoy, Ada!"
    assert Path("/app/greetings.txt").read_text().splitlines() == want
