"""The error catalog page (`GET /errors`), generated from `herald.codes`: one section per code, with
`id="<CODE>"` so that an error's `doc_url` (`<base>/errors#<CODE>`) lands on it."""

from __future__ import annotations

from html import escape
from typing import Any

import orjson

from herald.codes import CODES, Code

_KIND_TITLES = {
    "gateway": "Gateway refusals (body: JSON text sent as text/plain)",
    "error": "Error codes (`error.code` of the error envelope)",
    "detail": "Detail codes (`error.details[].code`)",
}
_EXAMPLE_ID = "resp_6f1c2a9e-8d4b-4c3a-9e1f-2b7d5a0c4e11"


def _envelope(code: str, message: str, details: list[dict[str, str]], target: str | None = None) -> Any:
    error: dict[str, Any] = {"code": code, "message": message, "doc_url": f"<base>/errors#{code}"}
    if target:
        error["target"] = target
    return {"response_id": _EXAMPLE_ID, "error": {**error, "details": details, "request_id": ""}}


def example(entry: Code) -> Any:
    if entry.kind == "gateway":
        target = "Authentication Invalid" if entry.status == 401 else "Authorization Failed"
        return {"code": entry.code, "target": target, "message": entry.meaning}
    if entry.kind == "error":
        return _envelope(entry.code, entry.meaning, [])
    detail = {"code": entry.code, "target": "<field>", "message": entry.meaning}
    within = entry.within.split(",")[0].strip()
    return _envelope(within, entry.meaning, [detail], target="<field>")


def _section(entry: Code) -> str:
    body = orjson.dumps(example(entry), option=orjson.OPT_INDENT_2).decode()
    rows = [
        f"<dt>HTTP status</dt><dd>{entry.status}</dd>",
        f"<dt>Meaning</dt><dd>{escape(entry.meaning)}</dd>",
    ]
    if entry.target:
        rows.append(f"<dt>target</dt><dd>{escape(entry.target)}</dd>")
    if entry.within:
        rows.append(f"<dt>Arrives in</dt><dd>{escape(entry.within)}</dd>")
    return (
        f'<section id="{escape(entry.code)}"><h3><a href="#{escape(entry.code)}">{escape(entry.code)}</a></h3>'
        f"<dl>{''.join(rows)}</dl><pre>{escape(body)}</pre></section>"
    )


def render() -> str:
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Herald error catalog</title>"
        "<style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
        "dt{font-weight:bold}pre{background:#f4f4f4;padding:.5rem;overflow:auto}</style></head><body>",
        "<h1>Herald error catalog</h1><p>Every code Herald answers with. Errors share one envelope: "
        "<code>{response_id, error: {code, message, doc_url, target?, details[], request_id}}</code>; "
        "<code>&lt;base&gt;</code> is the address the request was sent to (or HERALD_BASE_URL).</p>",
    ]
    for kind, title in _KIND_TITLES.items():
        parts.append(f"<h2>{escape(title)}</h2>")
        parts.extend(_section(entry) for entry in CODES if entry.kind == kind)
    parts.append("</body></html>")
    return "".join(parts)


PAGE = render()
