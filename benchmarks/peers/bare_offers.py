"""The physical-limit reference for GET /v5/offers?limit=50 (from `../shared/limits/bare_offers.py`).

A bare Starlette route that checks a Basic header against a sha256 hash, runs the page + count
queries on Herald's own SQLite file with the stdlib driver, and answers the same envelope with
orjson. No ORM, no middleware. `/healthz` is the bare route a 404 and Herald's `/healthz` are
compared with (same server, same framework, nothing around it).

    HERALD_DB=path/to/herald.db uvicorn bare_offers:app --app-dir benchmarks/peers --no-access-log
"""

import base64
import hashlib
import os
import sqlite3
import uuid

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

DB = os.environ["HERALD_DB"]
_conn = sqlite3.connect(DB, check_same_thread=False)
_conn.execute("PRAGMA journal_mode=WAL")


def _auth(header: str) -> str | None:
    try:
        ws, _, secret = base64.b64decode(header.split(" ", 1)[1]).decode().partition(":")
        _, key_id, raw = secret.split("_", 2)
    except Exception:
        return None
    row = _conn.execute(
        "select secret_hash from api_keys where workspace_id=? and id=?", (ws, key_id)
    ).fetchone()
    return ws if row and row[0] == hashlib.sha256(raw.encode()).hexdigest() else None


async def offers(request: Request) -> Response:
    ws = _auth(request.headers.get("authorization", ""))
    if ws is None:
        return Response(b'{"code":"ER001"}', 401, media_type="text/plain")
    limit = int(request.query_params.get("limit", 20))
    rows = _conn.execute(
        "select id, name, stored_status, created_at, created_by from offers where workspace_id=? "
        "order by id desc limit ?",
        (ws, limit),
    ).fetchall()
    total = _conn.execute("select count(*) from offers where workspace_id=?", (ws,)).fetchone()[0]
    data = [
        {"id": f"offer_{r[0]}", "name": r[1], "status": r[2], "created_at": r[3], "created_by": r[4]}
        for r in rows
    ]
    body = {
        "response_id": f"resp_{uuid.uuid4()}",
        "type": "offer",
        "data": data,
        "pagination": {"limit": limit, "total_count": total, "next_cursor": None},
    }
    return Response(orjson.dumps(body), media_type="application/json")


async def healthz(_request: Request) -> Response:
    return Response(orjson.dumps({"status": "ok"}), media_type="application/json")


app = Starlette(routes=[Route("/v5/offers", offers), Route("/healthz", healthz)])
