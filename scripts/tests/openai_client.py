#!/usr/bin/env python3
"""The official `openai` Python client against `tessera serve` on the shipped shapes model.

Starts the server itself, then: a chat with an image as a data URL (the answer must equal the
CLI's `tessera generate` answer), the same chat streamed with usage, a raw completion, models,
embeddings, and the exception types the client raises for bad requests. Then, on a second
server with the real SmolLM2 weights, `response_format` `json_schema` (the output must parse and
validate) and a two-step agent loop through the client's tools API: a call forced by
`tool_choice` (its arguments valid under the tool's schema; streamed, the deltas join to a
call), the tool's result sent back, a final answer; the same loop through the Responses API.
Exits non-zero on any failure.

    python3 scripts/tests/openai_client.py [--tessera target/debug/tessera]
"""

import argparse
import base64
import json
import os
import subprocess

import openai
from served import Served

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMAGE = os.path.join(ROOT, "models", "shapes-vlm", "examples", "three_shapes.png")
QUESTION = "How many shapes are there?"
SMOLLM2 = os.path.join(ROOT, "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 3},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def expect_error(kind, call, what):
    try:
        call()
    except kind as e:
        check(True, f"{what} raises {kind.__name__} ({e.status_code})")
        return
    except openai.APIError as e:
        raise AssertionError(f"{what}: expected {kind.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"{what}: no error")


def validate_person(v):
    """PERSON's rules, checked by hand (no schema library needed)."""
    assert isinstance(v, dict) and set(v) == {"name", "age", "hobbies"}, v
    assert isinstance(v["name"], str) and len(v["name"]) <= 24, v
    assert isinstance(v["age"], int) and not isinstance(v["age"], bool) and 0 <= v["age"] <= 150, v
    assert isinstance(v["hobbies"], list) and len(v["hobbies"]) <= 3, v
    assert all(isinstance(h, str) and len(h) <= 24 for h in v["hobbies"]), v


def serve(tessera, model, name):
    argv = [tessera, "serve", "--served-model-name", name] + (["--model", model] if model else [])
    return Served(lambda port: argv + ["--port", str(port)])


def check_sigterm(server):
    if server.returncode not in (0, -15):
        raise SystemExit(f"tessera serve exited with {server.returncode} on SIGTERM:\n{server.tail()}")


def structured_output(tessera):
    with serve(tessera, SMOLLM2, "smollm2") as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        for temperature, seed in [(0, 0), (1.0, 1), (1.0, 2)]:
            res = client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": "Describe a person."}],
                temperature=temperature, seed=seed, max_tokens=400, response_format=fmt,
            )
            text = res.choices[0].message.content
            validate_person(json.loads(text))
            check(res.choices[0].finish_reason == "stop", f"json_schema output parses and validates: {text}")
    check_sigterm(server)


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}


def validate_call(name, arguments):
    """The call's arguments under its tool's schema, checked by hand."""
    args = json.loads(arguments)
    if name == "add":
        assert set(args) == {"a", "b"} and all(type(args[k]) is int for k in "ab"), arguments
    elif name == "get_weather":
        assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 20, arguments
    else:
        raise AssertionError(f"a call of {name!r}, not a tool")
    return args


def streamed_call(stream):
    """The call a stream's tool-call deltas join to, and the finish reason."""
    call, finish = {"id": None, "name": None, "arguments": ""}, None
    for chunk in stream:
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or []:
                assert d.index == 0, d
                if d.id:
                    call["id"], call["name"] = d.id, d.function.name
                call["arguments"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    return call, finish


def agent_loop(tessera):
    with serve(tessera, SMOLLM2, "smollm2") as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "What is 12 plus 30? Use the tool."}]
        for stream in (False, True):
            kwargs = dict(model="smollm2", messages=messages, tools=[ADD, WEATHER], temperature=0, max_tokens=100,
                          tool_choice={"type": "function", "function": {"name": "add"}})
            if stream:
                call, finish = streamed_call(client.chat.completions.create(stream=True, **kwargs))
            else:
                res = client.chat.completions.create(**kwargs)
                finish, tc = res.choices[0].finish_reason, res.choices[0].message.tool_calls[0]
                call = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
                check(tc.type == "function" and res.choices[0].message.content is None, "a call, no content")
            args = validate_call(call["name"], call["arguments"])
            check(finish == "tool_calls" and call["name"] == "add",
                  f"forced call (stream={stream}): add({call['arguments']}), finish_reason tool_calls")
            history = messages + [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call["id"], "type": "function",
                     "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                {"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])},
            ]
            final = client.chat.completions.create(model="smollm2", messages=history, tools=[ADD, WEATHER],
                                                   tool_choice="none", temperature=0, max_tokens=32)
            answer = final.choices[0].message.content
            check(isinstance(answer, str) and answer and final.choices[0].message.tool_calls is None,
                  f"final answer after the tool's result: {answer!r}")
        # `required`, sampled: any of the tools, each call valid under its schema.
        for seed in (1, 2, 3):
            res = client.chat.completions.create(model="smollm2", messages=messages, tools=[ADD, WEATHER],
                                                 tool_choice="required", temperature=1.0, seed=seed, max_tokens=100)
            tc = res.choices[0].message.tool_calls[0]
            validate_call(tc.function.name, tc.function.arguments)
            check(res.choices[0].finish_reason == "tool_calls", f"required, seed {seed}: {tc.function.name}"
                  f"({tc.function.arguments}) is valid")
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(
                         model="smollm2", messages=messages, tools=[ADD],
                         tool_choice={"type": "function", "function": {"name": "multiply"}}),
                     "tool_choice naming a function not in tools")
    check_sigterm(server)


def responses_api(tessera):
    """The Responses API: a call forced by `tool_choice`, whole and streamed (the stream's
    completed response equals the whole one), its output sent back as an input item, a final
    answer equal to the chat endpoint's for the same history."""
    tool = {"type": "function", **ADD["function"]}
    with serve(tessera, SMOLLM2, "smollm2") as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
        question = {"role": "user", "content": "What is 12 plus 30? Use the tool."}
        kwargs = dict(model="smollm2", input=[question], tools=[tool], temperature=0, max_output_tokens=100,
                      tool_choice={"type": "function", "name": "add"}, store=False)
        res = client.responses.create(**kwargs)
        calls = [o for o in res.output if o.type == "function_call"]
        check(res.status == "completed" and len(calls) == 1 and calls[0].name == "add",
              f"responses: a forced function_call add({calls[0].arguments if calls else None})")
        args = validate_call("add", calls[0].arguments)
        done = None
        for event in client.responses.create(stream=True, **kwargs):
            if event.type == "response.completed":
                done = event.response
        check(done is not None and [(o.type, o.name, o.arguments) for o in done.output]
              == [(o.type, o.name, o.arguments) for o in res.output], "responses: the stream completes with the same call")
        result = str(args["a"] + args["b"])
        history = [question, {"type": "function_call", "call_id": calls[0].call_id, "name": "add",
                              "arguments": calls[0].arguments},
                   {"type": "function_call_output", "call_id": calls[0].call_id, "output": result}]
        final = client.responses.create(model="smollm2", input=history, tools=[tool], tool_choice="none",
                                        temperature=0, max_output_tokens=32)
        chat = client.chat.completions.create(
            model="smollm2", tools=[ADD], tool_choice="none", temperature=0, max_tokens=32,
            messages=[question, {"role": "assistant", "content": None, "tool_calls": [
                {"id": calls[0].call_id, "type": "function",
                 "function": {"name": "add", "arguments": calls[0].arguments}}]},
                {"role": "tool", "tool_call_id": calls[0].call_id, "content": result}])
        check(final.output_text == chat.choices[0].message.content,
              f"responses: the final answer {final.output_text!r} equals chat's")
        expect_error(openai.BadRequestError,
                     lambda: client.responses.create(model="smollm2", input="hi", previous_response_id="resp_1"),
                     "responses: previous_response_id (nothing is stored)")
    check_sigterm(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "target", "debug", "tessera"))
    args = ap.parse_args()

    cli = subprocess.run(
        [args.tessera, "generate", "--image", IMAGE, "--prompt", QUESTION],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    cli_answer = cli.stdout.rstrip("\n")
    with serve(args.tessera, None, "shapes") as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
        with open(IMAGE, "rb") as f:
            url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        messages = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": QUESTION},
        ]}]

        res = client.chat.completions.create(model="shapes", messages=messages, temperature=0)
        answer = res.choices[0].message.content
        check(answer == cli_answer, f"chat answer {answer!r} equals the CLI's {cli_answer!r}")
        check(res.choices[0].finish_reason == "stop", "finish_reason stop")
        check(res.usage.total_tokens == res.usage.prompt_tokens + res.usage.completion_tokens, "usage adds up")

        stream = client.chat.completions.create(
            model="shapes", messages=messages, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
        pieces, usage, finish = [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
        check("".join(pieces) == cli_answer, f"streamed answer {''.join(pieces)!r} equals the CLI's")
        check(finish == "stop" and usage is not None and usage.completion_tokens >= 1, "stream ends with usage")

        comp = client.completions.create(model="shapes", prompt="Question: How many", max_tokens=3, temperature=0)
        check(comp.usage.completion_tokens <= 3 and comp.choices[0].text is not None, "raw completion")

        models = client.models.list()
        check([m.id for m in models.data] == ["shapes"], "models lists the served model")

        emb = client.embeddings.create(model="shapes", input=["How many shapes", "What color"])
        check(len(emb.data) == 2 and len(emb.data[0].embedding) == 192, "embeddings: 2 vectors of 192")

        bad_image = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}},
            {"type": "text", "text": QUESTION},
        ]}]
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=bad_image),
                     "an image that does not decode")
        expect_error(openai.NotFoundError,
                     lambda: client.chat.completions.create(model="gpt-4", messages=messages),
                     "an unknown model")
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=messages, n=2),
                     "n = 2")
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=messages, temperature=5),
                     "temperature 5")
    check_sigterm(server)
    structured_output(args.tessera)
    agent_loop(args.tessera)
    responses_api(args.tessera)
    print("openai client: all checks passed")


if __name__ == "__main__":
    main()
