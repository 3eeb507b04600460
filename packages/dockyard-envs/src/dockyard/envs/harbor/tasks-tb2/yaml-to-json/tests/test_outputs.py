import json
import subprocess
from pathlib import Path


def load_yaml():
    # the image's own interpreter has PyYAML (installed by the Dockerfile)
    out = subprocess.run(
        [
            "/usr/local/bin/python3",
            "-c",
            "import json,yaml;print(json.dumps(yaml.safe_load(open('/app/config.yaml'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_json_matches_yaml():
    assert json.loads(Path("/app/config.json").read_text()) == load_yaml()


def test_keys_sorted_and_indented():
    text = Path("/app/config.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True)
