"""A Hermes tool-calling chat template (the convention of Qwen2.5 / Qwen3 / Hermes models) for
tokenizers whose own template knows no tools, e.g. the tiny ChatML models built by
:mod:`dockyard.torch.testing`. Real tool-calling models ship their own template: use that.

Rendering (``tools`` given)::

    <|im_start|>system
    {system prompt}

    # Tools
    ...
    <tools>
    {one JSON tool signature per line}
    </tools>
    ...<|im_end|>
    <|im_start|>assistant
    {content}<tool_call>
    {"name": ..., "arguments": {...}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {tool result}
    </tool_response><|im_end|>

Consecutive ``tool`` messages share one user turn. Written for dockyard after the published
Qwen2.5 template's layout (not a copy of its text).
"""

from __future__ import annotations

HERMES_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions. Function signatures are inside <tools></tools>:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each call, return a JSON object with the function name and arguments inside "
    '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' and loop.first %}"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' }}{{ m['content'] }}{{ '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for tc in m.get('tool_calls') or [] %}"
    "{% if loop.first and m['content'] %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ tc["function"]["name"] }}", "arguments": '
    "{{ tc['function']['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Jinja text; set it as ``policy.tokenizer.chat_template`` (or ``tokenizer.chat_template``)."""
