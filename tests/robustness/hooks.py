"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by `test_schemathesis.py`).

Random bodies almost never pass the campaign rules, so the stateful phase would never get a campaign
to chain get → patch → validate → search from. Half of the bodies drawn for a campaign create are
therefore a valid draft (random name and request id) when the case is meant to be valid; the
other half, and every negative case, stay what Schemathesis drew.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import strategies as st

# The request-id and Idempotency-Key headers are `format: uuid4` (a UUID v4 as text, see
# herald.http.openapi.UUID4): without the strategy, header values of that pattern cannot be drawn.
schemathesis.openapi.format("uuid4", st.uuids(version=4).map(str))

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40)


def _valid_draft(name: str, request_id: str, channel: str) -> dict[str, Any]:
    return {
        "channel": channel,
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "robustness@example.com",
        "request_id": request_id,
        "basic_details": {"name": name},
    }


VALID_DRAFTS = st.builds(_valid_draft, _TEXT, st.uuids().map(str), st.sampled_from(["PUSH", "EMAIL"]))


def _with_body(case: schemathesis.Case, body: dict[str, Any]) -> schemathesis.Case:
    case.body = body
    return case


@schemathesis.hook.apply_to(method="POST", path="/v5/campaigns")
def flatmap_case(context: schemathesis.HookContext, case: schemathesis.Case) -> st.SearchStrategy[Any]:
    # Only data meant to be valid is swapped: negative cases must stay what Schemathesis made them.
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return st.just(case)
    return st.one_of(st.just(case), VALID_DRAFTS.map(lambda body: _with_body(case, body)))
