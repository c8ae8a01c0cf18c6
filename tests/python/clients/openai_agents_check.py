"""openai-agents 0.24 against kiln on its default model class (the Responses API): an agent
calls a function tool. The only settings are the client's address and, because the default
model is small, one forced call that ends the run with the tool's result."""

import asyncio

from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI

from common import API_KEY, BASE_URL, MODEL, QUESTION

set_default_openai_client(AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=120))
set_tracing_disabled(True)
calls = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


agent = Agent(
    name="weather",
    instructions="Answer questions about the weather.",
    model=MODEL,
    tools=[get_weather],
    # One call: allowed several, the small model repeats its call until max_tokens.
    model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=64),
    tool_use_behavior="stop_on_first_tool",
)


async def main():
    # One event loop for both runs: the client's connections belong to it.
    result = await Runner.run(agent, QUESTION, max_turns=2)
    assert len(calls) == 1 and calls[0], calls
    assert result.final_output == f"sunny in {calls[0]}", result.final_output
    streamed = Runner.run_streamed(agent, QUESTION, max_turns=2)
    kinds = [event.type async for event in streamed.stream_events()]
    assert "raw_response_event" in kinds, kinds
    assert len(calls) == 2 and streamed.final_output == f"sunny in {calls[1]}", (calls, streamed.final_output)


asyncio.run(main())
print("openai-agents checks passed")
