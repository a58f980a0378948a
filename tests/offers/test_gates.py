"""O3 status gates, case by case: what each effective status lets an update change."""

from __future__ import annotations

from typing import Any

import pytest

from herald.offers import gates
from herald.offers.documents import merge
from herald.offers.status import OfferStatus

GOOD_GOAL = {"goal_name": "bought", "action": "purchase"}


class TestGates:
    ACTIVE_META = {
        "type": "SMV",
        "variantsPerLocale": ["A", "B"],
        "smv_distribution": {"split": {"A": 50, "B": 50}},
        "control_group": {"is_enabled": True, "percentage": 10},
    }

    def _gate(self, status: OfferStatus, change: dict[str, Any]) -> set[tuple[str, str]]:
        current = {
            "created_by": "a@example.com",
            "scheduling": {
                "start_datetime": "2026-01-01T00:00:00Z",
                "expiry_datetime": "2026-03-01T00:00:00Z",
            },
            "conversion": {"primary": GOOD_GOAL},
            "variation_meta": self.ACTIVE_META,
        }
        merged = merge(current, change)
        changed = gates.changed_fields(current, merged)
        return {(p.code, p.target) for p in gates.gate_problems(status, current, merged, changed)}

    @pytest.mark.parametrize(
        ("status", "change", "expected"),
        [
            (
                OfferStatus.ACTIVE,
                {"scheduling": {"start_datetime": "2026-01-02T00:00:00Z"}},
                {"scheduling.start_datetime"},
            ),
            (OfferStatus.ACTIVE, {"scheduling": {"expiry_datetime": "2026-04-01T00:00:00Z"}}, set()),
            (OfferStatus.ACTIVE, {"scheduling": {"start_datetime": "2026-01-01T00:00:00.000Z"}}, set()),
            (OfferStatus.ACTIVE, {"conversion": {"primary": {**GOOD_GOAL, "action": "x"}}}, {"conversion"}),
            (OfferStatus.ACTIVE, {"conversion": {"primary": GOOD_GOAL}}, set()),
            (
                OfferStatus.ACTIVE,
                {"variation_meta": {**ACTIVE_META, "smv_distribution": {"split": {"A": 70, "B": 30}}}},
                set(),
            ),
            (
                OfferStatus.ACTIVE,
                {"variation_meta": {**ACTIVE_META, "control_group": {"is_enabled": True, "percentage": 20}}},
                set(),
            ),
            (
                OfferStatus.ACTIVE,
                {"variation_meta": {**ACTIVE_META, "type": "DMV"}},
                {"variation_meta.type"},
            ),
            (
                OfferStatus.ACTIVE,
                {"variation_meta": {**ACTIVE_META, "control_group": {"is_enabled": False, "percentage": 10}}},
                {"variation_meta.control_group.is_enabled"},
            ),
            (
                OfferStatus.ACTIVE,
                {"variation_meta": {**ACTIVE_META, "variantsPerLocale": ["A", "C"]}},
                {"variation_meta.variantsPerLocale"},
            ),
            (OfferStatus.SCHEDULED, {"scheduling": {"start_datetime": "2026-01-02T00:00:00Z"}}, set()),
            (OfferStatus.SCHEDULED, {"variation_meta": {"type": "DMV"}}, set()),
            (OfferStatus.DRAFT, {"conversion": None}, set()),
            (OfferStatus.SCHEDULED, {"created_by": "b@example.com"}, set()),  # "any O2 field"
            (OfferStatus.ACTIVE, {"created_by": "b@example.com"}, set()),
        ],
    )
    def test_gate(self, status: OfferStatus, change: dict[str, Any], expected: set[str]) -> None:
        assert self._gate(status, change) == {("IMMUTABLE_FIELD", target) for target in expected}

    @pytest.mark.parametrize(
        ("status", "code"),
        [(OfferStatus.EXPIRED, "EXPIRED_OFFERING"), (OfferStatus.ARCHIVED, "ARCHIVED_OFFERING")],
    )
    def test_closed_statuses_refuse_everything(self, status: OfferStatus, code: str) -> None:
        refusal = gates.refusal(status)
        assert refusal is not None
        assert (refusal.status, refusal.code) == (403, code)

    @pytest.mark.parametrize("status", [OfferStatus.ACTIVE, OfferStatus.SCHEDULED, OfferStatus.DRAFT])
    def test_open_statuses_refuse_nothing_outright(self, status: OfferStatus) -> None:
        assert gates.refusal(status) is None
