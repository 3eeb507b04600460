"""Build the task's repository: a secret and a database dump committed by mistake, long ago.

Deterministic (fixed identities and dates), so every commit hash is the same on every build.
"""

import os
import subprocess

os.remove(__file__)

T0 = 1730000000
PEOPLE = {"kim": ("Kim Novak", "kim@example.com"), "raj": ("Raj Iyer", "raj@example.com")}
count = 0


def git(*args):
    subprocess.run(["git", *args], check=True, stdout=subprocess.DEVNULL)


def commit(msg, who, files=(), remove=()):
    global count
    for name in remove:
        git("rm", "-q", name)
    for name, text in dict(files).items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w") as f:
            f.write(text)
    count += 1
    name, email = PEOPLE[who]
    date = f"{T0 + count * 86400} +0000"
    git("add", "-A")
    subprocess.run(
        ["git", "commit", "-qm", msg],
        check=True,
        env=dict(
            os.environ,
            GIT_AUTHOR_NAME=name,
            GIT_AUTHOR_EMAIL=email,
            GIT_COMMITTER_NAME=name,
            GIT_COMMITTER_EMAIL=email,
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_DATE=date,
        ),
    )


def dump(n, version):
    rows = [
        f"INSERT INTO users VALUES ({i}, 'user{i:05d}', 'user{i:05d}@example.com', {version});"
        for i in range(n)
    ]
    return "-- dump of the production users table\n" + "\n".join(rows) + "\n"


APP = '''"""The shop's web app (stub)."""
from settings import load


def main():
    cfg = load()
    print(f"listening on {cfg['port']}")


if __name__ == "__main__":
    main()
'''
git("init", "-q", "-b", "main")
commit(
    "initial skeleton",
    "kim",
    {
        "app.py": APP,
        "README.md": "# shop\n",
        ".gitignore": "__pycache__/\n",
        "settings.py": 'def load():\n    return {"port": 8080}\n',
    },
)
commit(
    "settings from ini files",
    "kim",
    {
        "config/defaults.ini": "[server]\nport = 8080\n",
        "settings.py": """import configparser


def load(path="config/defaults.ini"):
    p = configparser.ConfigParser()
    p.read(path)
    return {"port": p.getint("server", "port")}
""",
    },
)
commit(
    "fixtures for local development",
    "raj",
    {
        "data/fixtures.json": '{"users": [{"id": 1, "name": "alice"}]}\n',
        "data/dump.sql": dump(30000, 1),
        "config/.env.local": "STRIPE_SECRET_KEY=sk_live_9f3Kq2XbT7mWcR4vLp8ZsN1d\nDB_PASSWORD=hunter2-prod\n",
        "README.md": "# shop\n\nLocal data lives in `data/`.\n",
    },
)
commit(
    "read the port from the environment",
    "raj",
    {
        "settings.py": """import configparser
import os


def load(path="config/defaults.ini"):
    p = configparser.ConfigParser()
    p.read(path)
    return {"port": int(os.environ.get("PORT", p.getint("server", "port")))}
"""
    },
)
git("tag", "-a", "v0.2", "-m", "shop 0.2")
commit(
    "refresh fixtures",
    "raj",
    {
        "data/dump.sql": dump(32000, 2),
        "data/fixtures.json": '{"users": [{"id": 1, "name": "alice"}, {"id": 2, "name": "bob"}]}\n',
    },
)
git("checkout", "-q", "-b", "feature/reports")
commit(
    "reports: user count",
    "raj",
    {
        "reports.py": """import json


def user_count(path="data/fixtures.json"):
    with open(path) as f:
        return len(json.load(f)["users"])
"""
    },
)
commit(
    "reports: document",
    "raj",
    {"README.md": "# shop\n\nLocal data lives in `data/`.\nReports: `reports.py`.\n"},
)
git("checkout", "-q", "main")
commit(
    "docs: how to run",
    "kim",
    {"README.md": "# shop\n\nLocal data lives in `data/`.\n\nRun: `python3 app.py`.\n"},
)
commit(
    "stop tracking local files",
    "kim",
    {".gitignore": "__pycache__/\nconfig/.env.local\ndata/dump.sql\n"},
    remove=["config/.env.local", "data/dump.sql"],
)
commit(
    "health check",
    "kim",
    {"app.py": APP.replace("def main():", 'def health():\n    return "ok"\n\n\ndef main():')},
)
assert count == 10, count
