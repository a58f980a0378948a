"""C7 Get campaign meta through the HTTP API: row shape, children, rejection comments,
reachability and its daily cache, the feature flag, filters and tenancy."""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete, select

from herald.audience import segments
from herald.audience.models import Segment, SegmentMember, User
from herald.campaigns import reachability, review
from herald.campaigns.models import Campaign, CampaignReachability
from herald.clock import FrozenClock
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import PAYLOADS
from tests.factories import Tenant, is_replay_of
from tests.sql_probes import recorded_statements

IDS = [f"{n:024x}" for n in range(100, 140)]
FUTURE = {"start_time": "2026-03-01T10:00:00Z"}


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the segmentation seam by a counter: each call records the campaign it counted."""
    calls: list[str] = []

    async def fake(_session: Any, _workspace_id: str, row: Campaign, _now: datetime) -> int:
        calls.append(row.campaign_id)
        return 1000 + len(calls)

    monkeypatch.setattr(reachability, "audience_count", fake)
    return calls


class TestRows:
    async def test_a_scheduled_push_campaign(
        self, client: httpx.AsyncClient, ws: Tenant, counted: list[str]
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_one_time_android_ios"])
        await h.publish(client, ws, campaign_id)
        [row] = await h.meta_rows(client, ws)
        assert row == {
            "campaign_id": campaign_id,
            "version_number": 1,
            "channel": "PUSH",
            "platform": ["ANDROID", "IOS"],
            "created_by": "marketer@example.com",
            "campaign_delivery_type": "ONE_TIME",
            "campaign_name": "Diwali Sale Blast",
            "campaign_team": "Growth",
            "campaign_tags": ["festive", "sale"],
            "campaign_status": "SCHEDULED",
            "campaign_start_time": "2030-10-20T04:00:00",  # 09:30 in Asia/Kolkata
            "reachability_details": {"count": 1001, "last_updated_time": "2026-01-15T12:00:00"},
        }

    async def test_email_rows_have_no_platforms_and_no_version_without_versioning(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        flat = await h.workspace(app, versioning=False)
        body = copy.deepcopy(PAYLOADS["email_event_triggered"])
        # Email's basic_details keeps an unknown key as sent: a `platforms` of its own is no
        # platform of the row (contract §5: `[]` for Email); it was shown there as sent.
        body["basic_details"]["platforms"] = ["KAIOS", "weird"]
        campaign_id = await h.create(client, flat, body)
        await h.publish(client, flat, campaign_id)
        [row] = await h.meta_rows(client, flat)
        assert row["platform"] == []
        assert "version_number" not in row
        assert row["campaign_status"] == "ACTIVE"
        assert row["campaign_start_time"] is None
        assert row["reachability_details"] is None

    async def test_periodic_parent_counts_its_children_and_children_name_their_parent(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        await h.seed(
            app,
            ws,
            h.line(
                id=IDS[0],
                channel="PUSH",
                campaign_delivery_type="PERIODIC",
                created_at="2025-12-01T00:00:00Z",
            ),
            *(
                h.line(
                    id=IDS[n],
                    channel="PUSH",
                    campaign_delivery_type="PERIODIC",
                    parent_id=IDS[0],
                    status="SENT",
                    created_at=f"2025-12-0{n + 1}T00:00:00Z",
                )
                for n in (1, 2, 3)
            ),
            h.line(
                id=IDS[4],
                channel="PUSH",
                campaign_delivery_type="PERIODIC",
                created_at="2025-11-01T00:00:00Z",
            ),
        )
        parents = await h.meta_rows(client, ws)
        assert [(r["campaign_id"], r.get("total_child_campaigns")) for r in parents] == [
            (IDS[0], 3),
            (IDS[4], 0),
        ]
        assert all("parent_campaign_id" not in r for r in parents)
        everything = await h.meta_rows(client, ws, include_child_campaigns=True)
        children = [r for r in everything if "parent_campaign_id" in r]
        assert [(r["campaign_id"], r["parent_campaign_id"]) for r in children] == [
            (IDS[3], IDS[0]),
            (IDS[2], IDS[0]),
            (IDS[1], IDS[0]),
        ]
        assert all("total_child_campaigns" not in r for r in children)

    async def test_rejection_comment_shows_while_draft(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        async with app.state.herald.database.writer() as session:
            await review.reject(
                session, ws.workspace_id, campaign_id, "Wrong tone", app.state.herald.clock.now()
            )
            await session.commit()
        [draft] = await h.meta_rows(client, ws, campaign_fields={"status": ["DRAFT"]})
        assert draft["rejection_comment"] == "Wrong tone"
        await h.publish(client, ws, campaign_id)
        [live] = await h.meta_rows(client, ws)
        assert "rejection_comment" not in live

    async def test_imported_channels_appear(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        channels = ["SMS", "WHATSAPP", "FACEBOOK", "GOOGLE ADS", "CONNECTORS"]
        await h.seed(app, ws, *(h.line(channel=c, status="SENT") for c in channels))
        rows = await h.meta_rows(client, ws)
        assert sorted(r["channel"] for r in rows) == sorted(channels)


class TestReachability:
    @pytest.mark.parametrize(
        ("kind", "status", "has_it"),
        [
            ("ONE_TIME", "SCHEDULED", True),
            ("BUSINESS_EVENT_TRIGGERED", "SCHEDULED", True),
            ("EVENT_TRIGGERED", "SCHEDULED", True),
            ("PERIODIC", "SCHEDULED", False),
            ("DEVICE_TRIGGERED", "SCHEDULED", False),
            ("LOCATION_TRIGGERED", "SCHEDULED", False),
            ("ONE_TIME", "ACTIVE", False),
            ("EVENT_TRIGGERED", "ACTIVE", False),
            ("ONE_TIME", "SENT", False),
            ("ONE_TIME", "DRAFT", False),
        ],
    )
    async def test_only_scheduled_one_time_and_event_campaigns_have_it(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        ws: Tenant,
        counted: list[str],
        kind: str,
        status: str,
        has_it: bool,
    ) -> None:
        [campaign_id] = await h.seed(
            app,
            ws,
            h.line(channel="PUSH", campaign_delivery_type=kind, status=status, scheduling_details=FUTURE),
        )
        [row] = await h.meta_rows(client, ws, campaign_fields={"status": [status]})
        if has_it:
            assert row["reachability_details"] == {"count": 1001, "last_updated_time": "2026-01-15T12:00:00"}
            assert counted == [campaign_id]
        else:
            assert row["reachability_details"] is None
            assert counted == []

    async def test_computed_once_a_day_and_cached_for_24_hours(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock, counted: list[str]
    ) -> None:
        first, second = await h.seed(
            app,
            ws,
            *(h.line(channel="EMAIL", status="SCHEDULED", scheduling_details=FUTURE) for _ in range(2)),
        )

        async def details() -> dict[str, Any]:
            rows = await h.meta_rows(client, ws)
            return {r["campaign_id"]: r["reachability_details"] for r in rows}

        initial = await details()
        assert sorted(counted) == sorted([first, second])
        clock.advance(hours=23, minutes=59, seconds=59)
        assert await details() == initial
        assert len(counted) == 2  # served from the cache
        clock.advance(seconds=1)
        again = await details()
        assert len(counted) == 4
        assert {d["last_updated_time"] for d in again.values()} == {"2026-01-16T12:00:00"}
        assert {d["count"] for d in again.values()} == {1003, 1004}

    async def test_a_page_reads_its_cached_figures_with_its_rows(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, counted: list[str]
    ) -> None:
        await h.seed(
            app,
            ws,
            *(h.line(channel="EMAIL", status="SCHEDULED", scheduling_details=FUTURE) for _ in range(4)),
            h.line(status="ACTIVE"),
        )
        first = await h.meta_rows(client, ws)
        assert len(counted) == 4
        with recorded_statements(app) as statements:
            again = await h.meta_rows(client, ws)
        assert again == first
        assert len(counted) == 4
        # The figures come with the page's own statement (run on the driver: not recorded here),
        # never in statements of their own.
        assert [s for s, _ in statements if "campaign_reachability" in s] == []

    async def test_concurrent_requests_compute_once(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, counted: list[str]
    ) -> None:
        [campaign_id] = await h.seed(app, ws, h.line(status="SCHEDULED", scheduling_details=FUTURE))
        results = await asyncio.gather(*(h.meta_rows(client, ws) for _ in range(6)))
        assert counted == [campaign_id]
        assert {rows[0]["reachability_details"]["count"] for rows in results} == {1001}

    async def test_versions_share_one_estimate(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, counted: list[str]
    ) -> None:
        await h.seed(
            app,
            ws,
            h.line(id=IDS[0], status="SCHEDULED", scheduling_details=FUTURE),
            h.line(
                id=IDS[1], campaign_id=IDS[0], version_number=2, status="SCHEDULED", scheduling_details=FUTURE
            ),
        )
        rows = await h.meta_rows(client, ws)
        assert [r["version_number"] for r in rows] == [2, 1]
        assert counted == [IDS[0]]
        assert rows[0]["reachability_details"] == rows[1]["reachability_details"]

    async def test_the_estimate_comes_from_the_audience(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        now = app.state.herald.clock.now()
        async with app.state.herald.database.writer() as session:
            # reachable by SMS: a mobile number and no opt-out (u2 opted out, u3 has no number)
            for n, (opted_out, mobile) in enumerate(
                ((False, "+911"), (False, "+912"), (True, "+913"), (False, None))
            ):
                session.add(
                    User(
                        workspace_id=ws.workspace_id,
                        customer_id=f"u{n}",
                        mobile=mobile,
                        sms_opt_out=opted_out,
                        attributes={},
                        created_at=now,
                        updated_at=now,
                    )
                )
            await session.commit()
        await h.seed(
            app,
            ws,
            h.line(
                status="SCHEDULED",
                scheduling_details=FUTURE,
                segmentation_details={"is_all_user_campaign": True},
            ),
        )
        [row] = await h.meta_rows(client, ws)
        assert row["reachability_details"]["count"] == 2

    async def test_a_row_whose_audience_cannot_be_evaluated_has_none_and_the_page_is_200(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, caplog: pytest.LogCaptureFixture
    ) -> None:
        services = app.state.herald
        now = services.clock.now()
        async with services.database.writer() as session:
            session.add(_user(ws, "u1", now))
            segment, _ = await segments.create_static_segment(session, now, ws.workspace_id, "Gone", ["u1"])
            await session.commit()
        gone = {
            "included_filters": {
                "filter_operator": "and",
                "filters": [{"filter_type": "custom_segments", "name": "Gone", "id": segment.id}],
            }
        }
        everyone = {"is_all_user_campaign": True}
        good, bad, other = await h.seed(
            app,
            ws,
            *(
                h.line(
                    id=IDS[n], status="SCHEDULED", scheduling_details=FUTURE, segmentation_details=audience
                )
                for n, audience in enumerate((everyone, gone, everyone))
            ),
        )
        # The segment is deleted after the campaign that names it was saved.
        async with services.database.writer() as session:
            await session.execute(delete(SegmentMember).where(SegmentMember.segment_id == segment.id))
            await session.execute(delete(Segment).where(Segment.id == segment.id))
            await session.commit()

        with caplog.at_level(logging.WARNING, logger="herald.campaigns"):
            rows = await h.meta_rows(client, ws)
        details = {row["campaign_id"]: row["reachability_details"] for row in rows}
        assert details == {
            good: {"count": 1, "last_updated_time": "2026-01-15T12:00:00"},
            bad: None,
            other: {"count": 1, "last_updated_time": "2026-01-15T12:00:00"},
        }
        [record] = [r for r in caplog.records if r.name == "herald.campaigns"]
        assert record.levelno == logging.WARNING
        message = record.getMessage()
        assert bad in message
        assert ws.workspace_id in message
        assert segment.id in message  # the reason names what is missing
        # Nothing was cached for the bad row: it is tried again (and logged again) next time.
        async with services.database.reader() as session:
            cached = await session.scalars(
                select(CampaignReachability.campaign_id).where(
                    CampaignReachability.workspace_id == ws.workspace_id
                )
            )
            assert sorted(cached.all()) == sorted([good, other])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="herald.campaigns"):
            again = await h.meta_rows(client, ws)
        assert {row["campaign_id"]: row["reachability_details"] for row in again} == details
        assert len([r for r in caplog.records if r.name == "herald.campaigns"]) == 1


def _user(ws: Tenant, customer_id: str, now: datetime) -> User:
    return User(
        workspace_id=ws.workspace_id,
        customer_id=customer_id,
        mobile="+911",
        attributes={},
        created_at=now,
        updated_at=now,
    )


class TestRequest:
    async def test_feature_off_is_400_not_enabled(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        tenant = await h.workspace(app, campaign_meta=False)
        response = await h.meta(client, tenant, {"limit": 5, "page": 1})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert "not enabled for this workspace" in error["message"]
        assert error["details"][0]["code"] == "FEATURE_NOT_ENABLED"

    @pytest.mark.parametrize(
        ("body", "code", "target"),
        [
            ({"page": 1}, "REQUIRED_FIELD_MISSING", "limit"),
            ({"limit": 16, "page": 1}, "OUT_OF_RANGE", "limit"),
            ({"limit": 1, "page": 0}, "OUT_OF_RANGE", "page"),
            (
                {"limit": 1, "page": 1, "campaign_fields": {"sender_name": "x"}},
                "UNKNOWN_FIELD",
                "campaign_fields.sender_name",
            ),
            (
                {"limit": 1, "page": 1, "campaign_fields": {"delivery_type": ["ONE_TIME"]}},
                "INVALID_ENUM_VALUE",
                "campaign_fields.delivery_type",
            ),
        ],
    )
    async def test_bad_bodies_are_400(
        self, client: httpx.AsyncClient, ws: Tenant, body: dict[str, Any], code: str, target: str
    ) -> None:
        response = await h.meta(client, ws, body)
        assert response.status_code == 400
        assert (code, target) in [(d["code"], d["target"]) for d in response.json()["error"]["details"]]

    async def test_needs_an_idempotency_key(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        response = await client.post(
            f"{h.BASE}/meta", json={"limit": 1, "page": 1}, headers=ws.headers(campaigns=True)
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "MISSING_IDEMPOTENCY_KEY"

    async def test_filters(self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant) -> None:
        await h.seed(
            app,
            ws,
            h.line(
                id=IDS[0],
                campaign_delivery_type="ONE_TIME",
                created_at="2025-12-01T00:00:00Z",
                basic_details={"name": "Alpha", "tags": ["a"]},
            ),
            h.line(
                id=IDS[1],
                campaign_delivery_type="PERIODIC",
                created_at="2025-12-02T00:00:00Z",
                basic_details={"name": "Beta", "tags": ["b"]},
            ),
            h.line(
                id=IDS[2],
                campaign_delivery_type="EVENT_TRIGGERED",
                created_at="2025-12-03T00:00:00Z",
                basic_details={"name": "alphabet"},
            ),
        )

        async def ids(**fields: Any) -> list[str]:
            return [r["campaign_id"] for r in await h.meta_rows(client, ws, campaign_fields=fields)]

        assert await ids(id=IDS[1]) == [IDS[1]]
        assert await ids(name="ALPHA") == [IDS[2], IDS[0]]
        assert await ids(delivery_type="PERIODIC") == [IDS[1]]
        assert await ids(campaign_delivery_type=["PERIODIC", "EVENT_TRIGGERED"]) == [IDS[2], IDS[1]]
        assert await ids(delivery_type="ONE_TIME", campaign_delivery_type=["PERIODIC"]) == [IDS[1], IDS[0]]
        assert await ids(tags=["a", "b"]) == [IDS[1], IDS[0]]
        assert await ids(created_date={"to_date": "2025-12-01"}) == [IDS[0]]
        assert await ids(channels=["EMAIL"]) == []

    async def test_name_folds_every_letter_not_only_ascii(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # SQLite's own lower() folds ASCII only: 'Ü' would match 'Ü' and never 'ü'.
        await h.seed(
            app,
            ws,
            h.line(id=IDS[0], basic_details={"name": "Ünïcode naïve"}),
            h.line(id=IDS[1], basic_details={"name": "unicode naive"}),
        )
        for name in ("ünïcode", "NAÏVE", "ÜNÏCODE NAÏVE"):
            rows = await h.meta_rows(client, ws, campaign_fields={"name": name})
            assert [row["campaign_id"] for row in rows] == [IDS[0]], name

    async def test_another_workspace_rows_never_appear(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        stranger = await h.workspace(app)
        await h.seed(app, stranger, h.line(), h.line(status="DRAFT"))
        assert (
            await h.meta_rows(
                client,
                ws,
                include_archive_campaigns=True,
                include_child_campaigns=True,
                campaign_fields={"status": ["DRAFT", "ACTIVE"]},
            )
            == []
        )


class TestPagesAndReplays:
    """The page is read with the request's Idempotency-Key claim (one statement on PostgreSQL):
    its order, and what a repeated key answers, are those of a page read on its own."""

    async def test_pages_across_statuses_in_one_order(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        flat = await h.workspace(app, versioning=False)
        statuses = ["ACTIVE", "DRAFT", "SENT", "PAUSED", "SCHEDULED", "STOPPED"]
        # Three rows to a created_at: the id breaks the tie (descending).
        lines = [
            h.line(
                id=IDS[n],
                status=statuses[n % len(statuses)],
                created_at=f"2025-12-{1 + n // 3:02d}T12:00:00Z",
            )
            for n in range(20)
        ]
        await h.seed(app, flat, *lines)
        expected = [IDS[n] for n in reversed(range(20)) if lines[n]["status"] != "DRAFT"]
        pages = []
        for page in range(1, 6):
            response = await h.meta(client, flat, {"limit": 4, "page": page})
            assert response.status_code == 200, response.text
            pages.append([row["campaign_id"] for row in response.json()["data"]["campaigns"]])
        assert [len(page) for page in pages] == [4, 4, 4, 4, 0]
        assert [campaign_id for page in pages for campaign_id in page] == expected

    async def test_a_repeated_key_replays_the_first_page_and_another_body_conflicts(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        await h.seed(app, ws, h.line())
        headers = ws.write_headers(campaigns=True)
        body = {"limit": 5, "page": 1}
        first = await client.post(f"{h.BASE}/meta", json=body, headers=headers)
        assert first.status_code == 200
        assert "Idempotent-Replayed" not in first.headers
        await h.seed(app, ws, h.line())  # the page would show two rows now
        again = await client.post(f"{h.BASE}/meta", json=body, headers=headers)
        assert (again.status_code, again.headers["Idempotent-Replayed"]) == (200, "true")
        assert is_replay_of(again, first)
        assert len(first.json()["data"]["campaigns"]) == 1
        other = await client.post(f"{h.BASE}/meta", json={"limit": 5, "page": 2}, headers=headers)
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        fresh = await h.meta_rows(client, ws, limit=5)
        assert len(fresh) == 2

    async def test_a_reused_key_answers_before_the_body_and_the_feature_flag_are_looked_at(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        headers = ws.write_headers(campaigns=True)
        assert (await client.post(f"{h.BASE}/meta", json={"limit": 5, "page": 1}, headers=headers)).is_success
        bad = await client.post(f"{h.BASE}/meta", json={"limit": 50, "page": 1}, headers=headers)
        assert bad.status_code == 409
        assert bad.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        # A refused request (400) stores nothing: its key is refused afresh, not replayed.
        off = await h.workspace(app, campaign_meta=False)
        refused_headers = off.write_headers(campaigns=True)
        for _ in range(2):
            refused = await client.post(
                f"{h.BASE}/meta", json={"limit": 5, "page": 1}, headers=refused_headers
            )
            assert refused.status_code == 400
            assert refused.json()["error"]["details"][0]["code"] == "FEATURE_NOT_ENABLED"
