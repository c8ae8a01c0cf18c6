"""pydantic-ai 2.38 against kiln: an agent's typed output through its output tool (a forced
tool call), run and streamed, and through NativeOutput (response_format json_schema)."""

from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from common import API_KEY, BASE_URL, EXTRACT, MODEL, Place

model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=BASE_URL, api_key=API_KEY))
settings = ModelSettings(temperature=0, max_tokens=64)

agent = Agent(model, output_type=Place, model_settings=settings, retries=0)
place = agent.run_sync(EXTRACT).output
assert isinstance(place, Place) and place.city, place


async def streamed() -> Place:
    async with agent.run_stream(EXTRACT) as result:
        return await result.get_output()


import asyncio  # noqa: E402

streamed_place = asyncio.run(streamed())
assert streamed_place == place, (streamed_place, place)

native = Agent(model, output_type=NativeOutput(Place), model_settings=settings, retries=0)
structured = native.run_sync(EXTRACT).output
assert isinstance(structured, Place) and structured.city, structured
print("pydantic-ai checks passed")
