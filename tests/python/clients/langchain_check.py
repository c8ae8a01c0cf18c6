"""langchain-openai 1.8 against kiln: bind_tools with a forced tool (its schemas do not say
additionalProperties), invoked and streamed, and with_structured_output."""

from langchain_openai import ChatOpenAI

from common import API_KEY, BASE_URL, EXTRACT, MODEL, QUESTION, Place, get_weather

llm = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=64, max_retries=0)
forced = llm.bind_tools([get_weather], tool_choice="get_weather")

message = forced.invoke(QUESTION)
assert len(message.tool_calls) == 1, message
call = message.tool_calls[0]
assert call["name"] == "get_weather" and list(call["args"]) == ["city"], call

chunks = None
for chunk in forced.stream(QUESTION):
    chunks = chunk if chunks is None else chunks + chunk
assert [(c["name"], c["args"]) for c in chunks.tool_calls] == [(call["name"], call["args"])], chunks.tool_calls

for method in ("function_calling", "json_schema"):
    place = llm.with_structured_output(Place, method=method).invoke(EXTRACT)
    assert isinstance(place, Place) and place.city, (method, place)
print("langchain checks passed")
