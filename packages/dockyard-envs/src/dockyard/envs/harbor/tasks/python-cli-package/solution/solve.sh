#!/bin/bash
cd /app
cat > pyproject.toml <<'EOF'
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tally"
version = "1.4.0"
description = "Count lines, words and the most frequent words of text files"
readme = "README.md"
requires-python = ">=3.9"
dependencies = []

[project.scripts]
tally = "tally.cli:main"

[tool.setuptools]
packages = ["tally"]
EOF
# a package-relative import (the bare `core` only resolved with tally/ itself on sys.path)
sed -i 's|^from core import Counts, count_text|from . import __version__\nfrom .core import Counts, count_text|' tally/cli.py
# the program name under -m, and --version
sed -i 's|    p = argparse.ArgumentParser(description=|    p = argparse.ArgumentParser(prog="tally", description=|' tally/cli.py
sed -i 's|^    p.add_argument("--ignore-case"|    p.add_argument("--version", action="version", version=f"tally {__version__}")\n&|' tally/cli.py
cat > tally/__main__.py <<'EOF'
"""python3 -m tally"""

import sys

from .cli import main

sys.exit(main())
EOF
python3 -m tally --version
