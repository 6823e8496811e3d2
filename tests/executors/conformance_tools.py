"""Real tools that reproduce the fixtures' recorded outputs, importable by the sandbox's child."""

from __future__ import annotations

import json

from turnstile.core.messages import Image, Text
from turnstile.executors._demo import WEATHER

MISSING = {"火星": ValueError("没有城市「火星」的天气数据")}


def get_weather(city: str) -> dict[str, object]:
    """查询城市的实时天气"""
    if city in MISSING:
        raise MISSING[city]
    if city not in WEATHER:
        raise LookupError(f"没有 {city} 的天气数据; 可查询: {', '.join(WEATHER)}")
    return WEATHER[city]


def save_note(title: str, body: str) -> str:
    """保存一条笔记"""
    return f"saved {title}"


def get_chart(city: str) -> list[Text | Image]:
    """A temperature chart of a city."""
    return [Text(f"chart of {city}"), Image(url=f"https://example.com/{city}.png")]


def find_flights(origin: str, destination: str, date: str) -> str:
    """Flights between two cities on a date."""
    return json.dumps([{"flight": "MU5101", "departs": "08:00", "price": 1280}], ensure_ascii=False)


def get_forecast(city: str, date: str) -> str:
    """The weather forecast for a city on a date."""
    return json.dumps(
        {"city": city, "date": date, "forecast": "小雨", "high": 24}, ensure_ascii=False
    )


def book_hotel(city: str, nights: int) -> str:
    """Book a hotel room for some nights."""
    return json.dumps({"booking": "H-20817", "city": city, "nights": nights}, ensure_ascii=False)
