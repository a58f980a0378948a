"""A movable clock (`HERALD_CLOCK_FILE`) whose file goes away or stops holding a time while the server
runs: /readyz says not ready, requests are answered 503, and all is well again once it is fixed."""

from __future__ import annotations

from pathlib import Path

import httpx

from herald.config import Settings
from herald.main import create_app
from tests.factories import make_tenant


async def test_a_clock_file_gone_or_garbled_is_not_ready(database_url: str, tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    clock.write_text("1767268800")
    app = create_app(Settings(database_url=database_url, clock_file=str(clock)))
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()["checks"]["clock"]) == (200, "ok")
            tenant = await make_tenant(app)
            for broken in ("gone", "not a time"):
                if broken == "gone":
                    clock.unlink()
                else:
                    clock.write_text("soon")
                answer = await client.get("/readyz")
                assert answer.status_code == 503, broken
                assert answer.json()["failed"] == ["clock"]
                assert "HERALD_CLOCK_FILE" in answer.json()["checks"]["clock"]
                # A request meanwhile is told the service is unavailable, not that it crashed.
                offers = await client.get("/v5/offers", headers=tenant.headers())
                assert (offers.status_code, offers.json()["error"]["code"]) == (503, "SERVICE_UNAVAILABLE")
            clock.write_text("1767268801")
            assert (await client.get("/readyz")).status_code == 200
    finally:
        await app.state.herald.aclose()
