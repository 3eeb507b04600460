"""``python -m dockyard.train.cli ...``: the ``dockyard`` command, for environments without its
console script on the ``PATH``."""

from dockyard.train.cli import console_main

console_main()
