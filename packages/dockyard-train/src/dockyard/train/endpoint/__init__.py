"""The OpenAI-compatible rollout endpoint for external agent scaffolds (docs/agents-endpoint.md).

* :mod:`.server` — ``/v1/chat/completions`` (tools), ``/v1/completions``, one base URL per episode;
* :mod:`.chat` — messages to the engine's tokens (token-in-token-out), Hermes tool calls back;
* :mod:`.recorder` — each request's prompt/completion ids, logprobs, policy versions, assembled
  into trajectories by the extension property (prime-rl's best-effort interleaving);
* :mod:`.scaffold` — scaffold runners (mini-swe-agent) and a mini-swe-agent environment over a
  dockyard sandbox session;
* :mod:`.rollout` — the collector's rollout mode: scaffold per episode, then ``finish`` scores the
  workspace diff.
"""

from dockyard.train.endpoint.recorder import EpisodeRecord, Turn, assemble, segments
from dockyard.train.endpoint.rollout import ExternalScaffold
from dockyard.train.endpoint.scaffold import EpisodeContext, MiniSweAgentRunner
from dockyard.train.endpoint.server import Endpoint, EndpointServer

__all__ = [
    "Endpoint",
    "EndpointServer",
    "EpisodeContext",
    "EpisodeRecord",
    "ExternalScaffold",
    "MiniSweAgentRunner",
    "Turn",
    "assemble",
    "segments",
]
