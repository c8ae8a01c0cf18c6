"""What every framework check shares: the server's base URL (argv[1]), its model's id, and
the shapes the checks extract. Frameworks are driven as their users drive them."""

import sys

import httpx
from pydantic import BaseModel, Field

BASE_URL = sys.argv[1]
MODEL = httpx.get(f"{BASE_URL}/models", timeout=30).json()["data"][0]["id"]
API_KEY = "unused"
QUESTION = "What is the weather in Paris right now?"
EXTRACT = "Extract the city and its country: Paris is the capital of France."


class Weather(BaseModel):
    """The arguments of get_weather."""

    city: str = Field(max_length=20)


class Place(BaseModel):
    """A city and its country."""

    city: str = Field(max_length=20)
    country: str = Field(max_length=20)


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny in {city}"
