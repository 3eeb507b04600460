"""One module per algorithm driver: :mod:`~dockyard.train.algorithms.grpo` (on-policy and
asynchronous GRPO) and :mod:`~dockyard.train.algorithms.sft` (supervised fine-tuning).

Each exposes ``train(cfg, ...)`` whose body is the algorithm's loop; a command in
:mod:`dockyard.train.cli` parses the config and calls it. To add an algorithm, write its module
here, a command module beside the others in ``cli/`` and register it in ``cli.COMMANDS``.
"""
