#!/usr/bin/env python3
"""The official `anthropic` Python client against `tessera serve`'s `/v1/messages`.

Starts the server itself, then on the shipped shapes model: a message with an image block
(base64) whose answer must equal the CLI's `tessera generate` answer, the same message streamed
(the client's text stream joins to it; the final message's usage), `count_tokens`, and the
exception types the client raises for bad requests. Then, on SmolLM2, a two-step agent loop
through the client's tools API, whole and streamed: a `tool_use` forced by `tool_choice` (its
input valid under the tool's schema), the `tool_result` sent back, a final text answer. Exits
non-zero on any failure.

    python3 scripts/tests/anthropic_client.py [--tessera target/debug/tessera]
"""

import argparse
import base64
import os
import subprocess

import anthropic
from openai_client import IMAGE, QUESTION, ROOT, SMOLLM2, check, check_sigterm, serve

ADD = {"name": "add", "description": "Adds two integers.",
       "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"], "additionalProperties": False}}
WEATHER = {"name": "get_weather", "description": "Current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"], "additionalProperties": False}}


# The client has no `temperature` parameter (the newest models take none); the API does.
GREEDY = {"temperature": 0}


def expect_error(kind, call, what):
    try:
        call()
    except kind as e:
        check(e.body.get("type") == "error" and e.body["error"]["message"],
              f"{what} raises {kind.__name__} ({e.status_code}): {e.body['error']['message']}")
        return
    except anthropic.APIError as e:
        raise AssertionError(f"{what}: expected {kind.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"{what}: no error")


def client_of(server):
    return anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0)


def image_message(tessera):
    cli = subprocess.run([tessera, "generate", "--image", IMAGE, "--prompt", QUESTION],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    cli_answer = cli.stdout.rstrip("\n")
    with serve(tessera, None, "shapes") as server:
        client = client_of(server)
        with open(IMAGE, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        messages = [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": QUESTION},
        ]}]
        res = client.messages.create(model="shapes", max_tokens=256, messages=messages, extra_body=GREEDY)
        answer = "".join(b.text for b in res.content if b.type == "text")
        check(answer == cli_answer, f"message answer {answer!r} equals the CLI's {cli_answer!r}")
        check(res.stop_reason == "end_turn" and res.usage.output_tokens >= 1, "stop_reason end_turn, usage")

        with client.messages.stream(model="shapes", max_tokens=256, messages=messages, extra_body=GREEDY) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        check(streamed == cli_answer, f"streamed answer {streamed!r} equals the CLI's")
        check(final.stop_reason == "end_turn" and final.usage.input_tokens == res.usage.input_tokens,
              "the stream's final message has the stop reason and usage")

        count = client.messages.count_tokens(model="shapes", messages=messages)
        check(count.input_tokens == res.usage.input_tokens, f"count_tokens: {count.input_tokens}")

        bad_image = [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"}},
            {"type": "text", "text": QUESTION},
        ]}]
        expect_error(anthropic.BadRequestError,
                     lambda: client.messages.create(model="shapes", max_tokens=8, messages=bad_image),
                     "an image that does not decode")
        expect_error(anthropic.NotFoundError,
                     lambda: client.messages.create(model="claude-opus-4", max_tokens=8, messages=messages),
                     "an unknown model")
        expect_error(anthropic.BadRequestError,
                     lambda: client.messages.create(model="shapes", max_tokens=8, messages=messages, extra_body={"temperature": 3}),
                     "temperature 3")
    check_sigterm(server)


def agent_loop(tessera):
    with serve(tessera, SMOLLM2, "smollm2") as server:
        client = client_of(server)
        messages = [{"role": "user", "content": "What is 12 plus 30? Use the tool."}]
        for stream in (False, True):
            kwargs = dict(model="smollm2", max_tokens=100, messages=messages, tools=[ADD, WEATHER], extra_body=GREEDY,
                          tool_choice={"type": "tool", "name": "add"})
            if stream:
                with client.messages.stream(**kwargs) as s:
                    res = s.get_final_message()
            else:
                res = client.messages.create(**kwargs)
            calls = [b for b in res.content if b.type == "tool_use"]
            check(res.stop_reason == "tool_use" and len(calls) == 1 and calls[0].name == "add",
                  f"forced tool_use (stream={stream}): add({calls[0].input if calls else None})")
            args = calls[0].input
            check(set(args) == {"a", "b"} and all(type(args[k]) is int for k in "ab"), "its input fits the schema")
            history = messages + [
                {"role": "assistant", "content": [b.model_dump() for b in res.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                              "content": str(args["a"] + args["b"])}]},
            ]
            final = client.messages.create(model="smollm2", max_tokens=32, messages=history, tools=[ADD, WEATHER],
                                           tool_choice={"type": "none"}, extra_body=GREEDY)
            answer = "".join(b.text for b in final.content if b.type == "text")
            check(answer and final.stop_reason in ("end_turn", "max_tokens"),
                  f"final answer after the tool's result: {answer!r}")
        expect_error(anthropic.BadRequestError,
                     lambda: client.messages.create(model="smollm2", max_tokens=8, messages=messages, tools=[ADD],
                                                    tool_choice={"type": "tool", "name": "multiply"}),
                     "tool_choice naming a tool not in tools")
    check_sigterm(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "target", "debug", "tessera"))
    args = ap.parse_args()
    image_message(args.tessera)
    agent_loop(args.tessera)
    print("anthropic client: all checks passed")


if __name__ == "__main__":
    main()
