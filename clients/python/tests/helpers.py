from __future__ import annotations

from typing import Any, List, Tuple

KEY = "proj:test"


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def held(client: Any, key: str = KEY) -> List[Tuple[str, str, str]]:
    """The live locks of the key as (mode, path, token), straight from PATHLOCK.LOCKS."""
    return [
        (text(m), text(p), text(t))
        for p, m, t, _ttl, _fence, *_ in client.execute_command("PATHLOCK.LOCKS", key)
    ]


def renew_calls(client: Any) -> int:
    stats = {name.lower(): value for name, value in client.info("commandstats").items()}
    return int(stats.get("cmdstat_pathlock.renew", {}).get("calls", 0))
