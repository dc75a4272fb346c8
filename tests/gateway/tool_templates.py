"""Minimal chat templates of our own in two vendors' tool wire formats (not their templates),
for tests: Qwen3's (hermes: `<tool_call>` blocks, `<tool_response>` user turns) and Llama
3.1's (tools in a system turn that names `ipython`, calls as bare JSON with `parameters`, tool
results in `ipython` turns)."""

from __future__ import annotations

QWEN3_STYLE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>
Call a function with <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' and loop.first %}
{%- elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>
{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}
</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

LLAMA31_STYLE = """\
{%- if tools %}<|start_header_id|>system<|end_header_id|>

Environment: ipython
Answer a function call as JSON {"name": <function name>, "parameters": <arguments>}.
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|eot_id|>{% endif %}
{%- for m in messages %}<|start_header_id|>\
{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>

{% if m.tool_calls %}{% for c in m.tool_calls %}\
{{ {"name": c.function.name, "parameters": c.function.arguments} | tojson }}\
{% if not loop.last %}; {% endif %}{% endfor %}{% else %}{{ m.content }}{% endif %}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""
