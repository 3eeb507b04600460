"""dockyard.torch: the PyTorch policy worker.

* :class:`dockyard.torch.worker.TorchPolicyWorker` — implements
  ``dockyard.core.interfaces.PolicyWorker`` over a local Hugging Face causal LM (FSDP2 on
  gloo/NCCL, packing, LoRA, DCP checkpoints, bucketed weight export).
* :mod:`dockyard.torch.config` — ``TorchPolicyConfig``.
* :mod:`dockyard.torch.testing` — tiny models and a local tokenizer for tests (no hub).

Importing this package imports nothing heavy; the submodules import torch.
"""
