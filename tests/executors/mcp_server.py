"""An MCP weather server for the MCP tests: imported, it serves in-process; run as a module
(`python -m tests.executors.mcp_server`), over stdio."""

from __future__ import annotations

from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("weather")


class Weather(TypedDict):
    温度: int
    天气: str


WEATHER: dict[str, Weather] = {
    "北京": {"温度": 26, "天气": "晴"},
    "上海": {"温度": 29, "天气": "多云"},
}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_weather(city: str) -> Weather:
    """查询城市的实时天气"""
    if city not in WEATHER:
        raise ToolError(f"没有 {city} 的天气数据")
    return WEATHER[city]


@server.tool()
def save_note(title: str) -> str:
    """保存一条笔记"""
    return f"saved {title}"


if __name__ == "__main__":
    server.run("stdio")
