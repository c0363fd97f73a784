"""A scripted model for the OpenAI Agents SDK (no network), shared by the integration tests.

Import it only after ``tests.extras.need("agents")``: it imports the SDK. Each user message
gets a reasoning item and a ``lookup`` call; each tool output gets a final answer. The model
keeps every input it was given, so a test can check what the SDK sent.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-test-no-network")

from agents import Agent, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

set_tracing_disabled(True)

__all__ = ["ScriptedModel", "make_agent"]


class ScriptedModel(Model):
    """Calls ``lookup`` once per user message (after a reasoning item), then answers."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.calls = 0

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        self.calls += 1
        n = self.calls
        if items[-1].get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"answer {n}", annotations=[])
            output: list[Any] = [ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed",
                content=[text],
            )]
        else:
            output = [
                ResponseReasoningItem(id=f"rs_{n}", type="reasoning",
                                      summary=[Summary(type="summary_text", text=f"plan {n}")]),
                ResponseFunctionToolCall(id=f"fc_{n}", call_id=f"call_{n}", type="function_call",
                                         name="lookup", arguments=f'{{"q": "q{n}"}}'),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


@function_tool
def lookup(q: str) -> str:
    """Look a value up."""
    return f"value of {q}"


def make_agent(model: ScriptedModel) -> Agent[Any]:
    """An agent with the ``lookup`` tool on ``model``."""
    return Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[lookup])
