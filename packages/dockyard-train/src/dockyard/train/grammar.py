"""Grammar-constrained tool calls: the structural tag the policy's turns are decoded under.

``policy.generation.tool_call_grammar`` (:class:`~dockyard.core.config.policy.
ToolCallGrammarConfig`) and the environment's tools (:meth:`~dockyard.core.interfaces.
Environment.tool_specs`) become an xgrammar structural tag in the model's tool-call syntax
(xgrammar's ``get_model_structural_tag``: ``qwen_3`` is the Hermes ``<tool_call>{"name": ...,
"arguments": ...}</tool_call>`` block, each tool's arguments under its JSON schema). vLLM
decodes every turn under it; the engine returns the allowed-token set of every sampled token
(:class:`~dockyard.core.experience.AllowedTokens`), and the trainer takes its logprobs over the
same sets: the policy that is trained is the masked, renormalised one that sampled,
``π_G(a | s) = π(a | s) · 1[a ∈ G(s)] / Σ_{b ∈ G(s)} π(b | s)``, its gradient flowing through
the normaliser; the KL to the reference is taken under the same mask.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config.policy import ToolCallGrammarConfig

_INSTALL = (
    "policy.generation.tool_call_grammar needs xgrammar (it comes with vLLM: "
    "pip install 'dockyard-serve[vllm]')"
)


def tool_call_structural_tag(cfg: ToolCallGrammarConfig, tools: list[dict[str, Any]]) -> str:
    """The structural tag (JSON) that constrains a turn to ``tools``' calls."""
    if not tools:
        raise ValueError(
            "policy.generation.tool_call_grammar.enabled, but the environment has no tools "
            "(its tool_specs() is empty): the grammar constrains tool calls; turn it off for "
            "this environment"
        )
    try:
        # lazy: xgrammar comes with vLLM, which the trainer's host may not have
        import xgrammar as xgr
    except ImportError as e:
        raise ImportError(_INSTALL) from e
    if cfg.max_string_length is not None:
        tools = [_bounded(t, cfg.max_string_length) for t in tools]
    tag = xgr.get_model_structural_tag(
        cfg.format,
        tools=list[Any](tools),
        tool_choice="required" if cfg.require_call else "auto",
        reasoning=cfg.reasoning,
        parallel_tool_calls=cfg.parallel_tool_calls,
        max_whitespace_cnt=cfg.max_whitespace,
    )
    return tag.model_dump_json()


def _bounded(schema: Any, n: int) -> Any:
    """``schema`` (a JSON value) with ``maxLength: n`` on every string type that has none."""
    if isinstance(schema, list):
        return [_bounded(x, n) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v, n) for k, v in schema.items()}
    kind = out.get("type")
    if (
        kind == "string" or (isinstance(kind, list) and "string" in kind)
    ) and "maxLength" not in out:
        out["maxLength"] = n
    return out


def grammar_problems(cfg: ToolCallGrammarConfig) -> list[str]:
    """What is wrong with the grammar settings, found without an environment (pre-flight):
    xgrammar missing, or a ``format`` it does not know."""
    if not cfg.enabled:
        return []
    try:
        # lazy: xgrammar comes with vLLM, which the trainer's host may not have
        import xgrammar as xgr
    except ImportError:
        return [_INSTALL]
    probe: list[Any] = [
        {"type": "function", "function": {"name": "probe", "parameters": {"type": "object"}}}
    ]
    try:
        xgr.get_model_structural_tag(cfg.format, tools=probe, tool_choice="auto")
    except (KeyError, ValueError) as e:
        return [f"policy.generation.tool_call_grammar.format {cfg.format!r}: {e}"]
    return []
