"""An agent loop with a tool call: the model asks for a tool, Python runs it, the model answers.

    python examples/agent_tools.py ["What is the weather in Paris?"]

The tools are OpenAI-style function schemas. pymtp renders them with the GGUF's chat template
(a Hermes-style system message for templates without tools, such as the default model's),
and pymtp.tools.parse_tool_calls turns the reply into OpenAI `tool_calls`. A turn that must
call a tool (tool_choice="required") is constrained to a valid call of one of them.
Needs pip install 'pymtp-llm[agents]'.
"""

import json
import sys

import pymtp
from pymtp.tools import parse_tool_calls, tool_format

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def get_weather(city: str) -> dict:
    """A stand-in for a real weather service."""
    return {"city": city, "temperature_c": 14, "sky": "rain"}


FUNCTIONS = {"get_weather": get_weather}


def run_agent(question: str, session: pymtp.Session, max_turns: int = 4) -> tuple[str, list[dict]]:
    """Answer question, calling tools as the model asks; returns the answer and the messages."""
    messages = [{"role": "user", "content": question}]
    fmt = tool_format(session.model.chat_template())  # how this template writes calls
    for _ in range(max_turns):
        # Until a tool has answered, the turn must call one: a 135M model otherwise answers from
        # memory (tool_choice="auto" lets a larger model decide). Then the model answers in words.
        need_tool = not any(m["role"] == "tool" for m in messages)
        if need_tool:
            reply = pymtp.chat(messages, session, tools=TOOLS, tool_choice="required", max_tokens=80)
            calls = parse_tool_calls(reply.text, fmt, TOOLS).tool_calls
        else:
            reply = pymtp.chat(messages, session, max_tokens=80)
            calls = []
        if not calls:
            return reply.text, messages
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for call in calls:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            output = FUNCTIONS[name](**args)
            print(f"tool call:   {name}({args}) -> {output}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(output)})
    raise RuntimeError(f"no answer after {max_turns} turns")


if __name__ == "__main__":
    question = sys.argv[1] if len(sys.argv) > 1 else "What is the weather in Paris?"
    with pymtp.load() as session:
        answer, messages = run_agent(question, session)
    print(f"question:    {question}")
    print(f"answer:      {answer}")
