from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List, Tuple

import redis.asyncio

KEY = "proj:test"


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def held(client: Any, key: str = KEY) -> List[Tuple[str, str, str]]:
    """The live locks of the key as (mode, path, token), straight from PATHLOCK.LOCKS."""
    return [
        (text(m), text(p), text(t))
        for p, m, t, _ttl, _fence, *_ in client.execute_command("PATHLOCK.LOCKS", key)
    ]


def run_async(port: int, body: Callable[[Any], Awaitable[None]], **kwargs: Any) -> None:
    """Runs an async test body with an asyncio client of the port's server, on a loop of its own."""

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=port, **kwargs)
        try:
            await body(client)
        finally:
            await client.aclose()

    asyncio.run(main())


def renew_calls(client: Any) -> int:
    stats = {name.lower(): value for name, value in client.info("commandstats").items()}
    return int(stats.get("cmdstat_pathlock.renew", {}).get("calls", 0))
