"""Chat templates with tools, rendered by transformers: the reference for tessera's rendering of `tools`,
assistant `tool_calls`, `role: tool` results and `chat_template_kwargs` (`enable_thinking`), and an assistant prefill (`continue_final_message=True`).

For each template in tests/fixtures/chat_templates/ and each case below, transformers'
`render_jinja_template(conversations=[messages], tools=…, chat_template=…, add_generation_prompt=True, **kwargs)`
(what `tokenizer.apply_chat_template` calls) renders the conversation. The messages are given in OpenAI's form,
then each assistant call's `arguments` JSON string is parsed into an object, as vLLM and llama.cpp (and tessera)
hand calls to templates. Writes tests/fixtures/chat_templates/rendered.json.

Dev-time only, no network. The venv: python3 -m venv ~/.cache/tessera-peers/convert-venv &&
~/.cache/tessera-peers/convert-venv/bin/pip install transformers jinja2; then
~/.cache/tessera-peers/convert-venv/bin/python scripts/reference_tool_templates.py
"""
import copy
import json
import os

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

# The special tokens each checkpoint's tokenizer passes to its template.
TOKENS = {
    "qwen2.5": {"eos_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>"},
    "llama-3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama-3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral-nemo": {"bos_token": "<s>", "eos_token": "</s>"},
    "gemma-4": {"bos_token": "<bos>", "eos_token": "<eos>"},
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add",
        "description": "Adds two integers <a & b>.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]

CALL_ID = "abcDEF123"  # 9 alphanumerics: what Mistral's template accepts


def cases():
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": CALL_ID, "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}
    result = {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": "18 degrees, sunny"}
    system = {"role": "system", "content": "You are a helpful assistant."}
    return {
        "tools_first_turn": ([ask], TOOLS, {}),
        "tools_with_system": ([system, ask], TOOLS, {}),
        # Qwen3's template refuses a null `content` (`'</think>' in None`): transformers and tessera both fail.
        "call_and_result": ([ask, call, result], TOOLS, {}),
        "call_and_result_empty_content": ([ask, {**call, "content": ""}, result], TOOLS, {}),
        "no_tools": ([system, ask], None, {}),
        "thinking_off": ([ask], TOOLS, {"enable_thinking": False}),
        "thinking_on": ([ask], None, {"enable_thinking": True}),
        # The last (assistant) message is continued: rendered without the generation prompt, cut where it ends.
        "prefill": ([ask, {"role": "assistant", "content": "The weather in Paris is"}], TOOLS, PREFILL),
    }


# Not a template variable: `continue_final_message=True` instead of `add_generation_prompt=True`.
PREFILL = {"continue_final_message": True}


def for_template(messages):
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls") or []:
            args = c["function"].get("arguments")
            if isinstance(args, str):
                c["function"]["arguments"] = json.loads(args)
    return out


def main():
    rendered = []
    for name, tokens in TOKENS.items():
        with open(os.path.join(DIR, f"{name}.jinja")) as f:
            template = f.read()
        for case, (messages, tools, kwargs) in cases().items():
            # Llama 3.x writes today's date unless given one.
            extra = {"date_string": "26 Jul 2024"} if name.startswith("llama") else {}
            kwargs = dict(kwargs)
            prefill = kwargs.pop("continue_final_message", False)
            try:
                out, _ = render_jinja_template(conversations=[for_template(messages)], tools=tools,
                                               chat_template=template, add_generation_prompt=not prefill,
                                               continue_final_message=prefill, **tokens, **extra, **kwargs)
                expected = out[0]
            except Exception as e:  # a template that refuses the conversation
                expected, error = None, str(e)
            entry = {"template": name, "case": case, "messages": messages, "tools": tools,
                     "kwargs": {**tokens, **extra, **kwargs}, "rendered": expected}
            if prefill:
                entry["continue_final"] = True
            if expected is None:
                entry["error"] = error
            rendered.append(entry)
    with open(os.path.join(DIR, "rendered.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": rendered}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(rendered)} renders written")


if __name__ == "__main__":
    main()
