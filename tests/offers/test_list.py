"""O1 `GET /v5/offers`: every filter, the 400 codes, sparse fields, cursor walks, effective status."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.offers import cursor
from herald.offers.rules.scheduling import zulu
from herald.services import Services
from herald.workspaces import service as workspaces_service
from tests.factories import Tenant
from tests.offers.builders import OFFERS, create_id, flat_body, import_offers


async def _list(client: httpx.AsyncClient, tenant: Tenant, params: Any = None) -> dict[str, Any]:
    response = await client.get(OFFERS, params=params, headers=tenant.headers())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _names(client: httpx.AsyncClient, tenant: Tenant, params: Any = None) -> list[str]:
    return [item["name"] for item in (await _list(client, tenant, params))["data"]]


async def _tags(app: FastAPI, tenant: Tenant, *tag_ids: str) -> None:
    services: Services = app.state.herald
    async with services.database.writer() as session:
        for tag_id in tag_ids:
            await workspaces_service.create_tag(
                session, services.clock.now(), tenant.workspace_id, tag_id, tag_id
            )
        await session.commit()


HISTORY_START = datetime(2025, 6, 1, tzinfo=UTC)


def _history(count: int) -> list[dict[str, Any]]:
    """`count` complete offerings created a second apart, long ago (for the importer)."""
    return [
        {
            **flat_body(HISTORY_START, f"History_{index:03d}"),
            "created_at": zulu(HISTORY_START + timedelta(seconds=index)),
        }
        for index in range(count)
    ]


class TestFilters:
    async def test_id_is_an_exact_match(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        first = await create_id(client, tenant, flat_body(clock.now(), "First_Offer"))
        await create_id(client, tenant, flat_body(clock.now(), "Second_Offer"))
        assert await _names(client, tenant, {"id": first}) == ["First_Offer"]
        assert await _names(client, tenant, {"id": "offer_" + "0" * 24}) == []

    async def test_name_contains_is_a_case_insensitive_literal_substring(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        for name in ("Summer_Sale_1", "WINTER_summer_2", "Winter_Only", "Summer1Sale"):
            await create_id(client, tenant, flat_body(clock.now(), name))
        assert sorted(await _names(client, tenant, {"name_contains": "SUMMER"})) == [
            "Summer1Sale",
            "Summer_Sale_1",
            "WINTER_summer_2",
        ]
        # `_` and `%` are literal, not LIKE wildcards.
        assert sorted(await _names(client, tenant, {"name_contains": "r_S"})) == [
            "Summer_Sale_1",
            "WINTER_summer_2",
        ]
        assert await _names(client, tenant, {"name_contains": "%"}) == []

    async def test_status_in_takes_one_or_several_statuses(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        now = clock.now()
        await create_id(client, tenant, flat_body(now, "Is_Scheduled"))
        await create_id(client, tenant, flat_body(now, "Is_Active", starts_in=timedelta(0)))
        archived = await create_id(client, tenant, flat_body(now, "Is_Archived", starts_in=timedelta(0)))
        await client.post(f"{OFFERS}/{archived}/archive", headers=tenant.write_headers())
        ended = now - timedelta(days=1)
        await import_offers(
            app,
            tenant,
            [
                {"name": "Is_Draft", "created_by": "d@example.com", "status": "draft"},
                {
                    **flat_body(now, "Is_Expired"),
                    "scheduling": {
                        "start_datetime": zulu(ended - timedelta(days=9)),
                        "expiry_datetime": zulu(ended),
                    },
                },
            ],
        )
        for status in ("scheduled", "active", "archived", "draft", "expired"):
            assert await _names(client, tenant, {"status_in": status}) == [f"Is_{status.capitalize()}"]
        assert sorted(await _names(client, tenant, {"status_in": "draft, expired"})) == [
            "Is_Draft",
            "Is_Expired",
        ]
        # A status named many times is named once (SQLite refused a condition of 1,000 terms: a 500).
        many = ",".join(["expired", "draft"] * 1000)
        assert sorted(await _names(client, tenant, {"status_in": many})) == ["Is_Draft", "Is_Expired"]

    async def test_tags_must_all_be_present(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await _tags(app, tenant, "t1", "t2")
        await create_id(client, tenant, flat_body(clock.now(), "Only_T1", tags=["t1"]))
        await create_id(client, tenant, flat_body(clock.now(), "Both_Tags", tags=["tag_t1", "t2"]))
        await create_id(client, tenant, flat_body(clock.now(), "Only_T2", tags=["t2"]))
        assert sorted(await _names(client, tenant, {"tags": "tag_t1"})) == ["Both_Tags", "Only_T1"]
        assert await _names(client, tenant, [("tags", "tag_t1"), ("tags", "tag_t2")]) == ["Both_Tags"]
        # The two spellings of a tag, and a repeat, are one tag.
        same = [("tags", "tag_t1"), ("tags", "t1"), ("tags", "tag_t2"), ("tags", "t2"), ("tags", "t2")]
        assert await _names(client, tenant, same) == ["Both_Tags"]

    async def test_more_tags_than_an_offer_can_carry_match_nothing(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        ids = [f"t{i}" for i in range(10)]
        await _tags(app, tenant, *ids)
        await create_id(client, tenant, flat_body(clock.now(), "Ten_Tags", tags=ids))
        assert await _names(client, tenant, [("tags", t) for t in ids]) == ["Ten_Tags"]
        # An eleventh (or a thousandth) tag: no offer has them all, answered at once.
        many = [("tags", f"tag_x{i}") for i in range(1000)] + [("tags", t) for t in ids]
        page = await _list(client, tenant, many)
        assert (page["data"], page["pagination"]["total_count"], page["pagination"]["has_more"]) == (
            [],
            0,
            False,
        )

    async def test_created_date_bounds_are_inclusive_days(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        for day in range(3):  # created 2026-01-15, -16, -17
            await create_id(client, tenant, flat_body(clock.now(), f"Created_Day{day}"))
            clock.advance(days=1)
        assert await _names(client, tenant, {"created_date_gte": "2026-01-16"}) == [
            "Created_Day2",
            "Created_Day1",
        ]
        assert await _names(client, tenant, {"created_date_lte": "2026-01-16"}) == [
            "Created_Day1",
            "Created_Day0",
        ]
        both = {"created_date_gte": "2026-01-16", "created_date_lte": "2026-01-16"}
        assert await _names(client, tenant, both) == ["Created_Day1"]
        # The last day a date can name: every offer, though its next day is past what a date holds.
        assert len(await _names(client, tenant, {"created_date_lte": "9999-12-31"})) == 3
        assert await _names(client, tenant, {"created_date_gte": "9999-12-31"}) == []

    async def test_created_by_may_repeat_or_be_comma_separated(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        for who in ("ann", "bob", "cid"):
            await create_id(
                client, tenant, flat_body(clock.now(), f"Made_By_{who}", created_by=f"{who}@example.com")
            )
        repeated = [("created_by", "ann@example.com"), ("created_by", "cid@example.com")]
        assert await _names(client, tenant, repeated) == ["Made_By_cid", "Made_By_ann"]
        assert await _names(client, tenant, {"created_by": "bob@example.com,cid@example.com"}) == [
            "Made_By_cid",
            "Made_By_bob",
        ]

    async def test_filters_combine(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await create_id(client, tenant, flat_body(clock.now(), "Combo_Active", starts_in=timedelta(0)))
        await create_id(client, tenant, flat_body(clock.now(), "Combo_Scheduled"))
        await create_id(client, tenant, flat_body(clock.now(), "Other_Active", starts_in=timedelta(0)))
        params = {"name_contains": "combo", "status_in": "active", "created_by": "owner@example.com"}
        body = await _list(client, tenant, params)
        assert [item["name"] for item in body["data"]] == ["Combo_Active"]
        assert body["pagination"]["total_count"] == 1


class TestFields:
    async def test_fields_selects_a_subset_in_contract_order(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        body = await _list(client, tenant, {"fields": "status,id"})
        assert body["data"] == [{"id": offer_id, "status": "scheduled"}]

    async def test_tags_are_omitted_when_there_are_none(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await create_id(client, tenant, flat_body(clock.now()))
        assert (await _list(client, tenant, {"fields": "name,tags"}))["data"] == [{"name": "Flat_Offer_1"}]

    async def test_tags_are_listed_by_their_public_ids(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await _tags(app, tenant, "t1", "t2")
        await create_id(client, tenant, flat_body(clock.now(), "Tagged", tags=["t2", "tag_t1"]))
        await create_id(client, tenant, flat_body(clock.now(), "Untagged"))
        body = await _list(client, tenant, {"fields": "name,tags"})
        assert body["data"] == [{"name": "Untagged"}, {"name": "Tagged", "tags": ["tag_t2", "tag_t1"]}]


class TestErrors:
    async def test_every_bad_parameter_is_reported_in_one_400(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        params = {
            "limit": "101",
            "name_contains": "n" * 101,
            "status_in": "active,paused",
            "fields": "id,colour",
            "created_date_gte": "2026-13-01",
            "created_date_lte": "15/01/2026",
            "cursor": "!!!not-base64",
        }
        response = await client.get(OFFERS, params=params, headers=tenant.headers())
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert {(d["code"], d["target"]) for d in error["details"]} == {
            ("OUT_OF_RANGE", "limit"),
            ("OUT_OF_RANGE", "name_contains"),
            ("INVALID_ENUM_VALUE", "status_in"),
            ("INVALID_FIELDS_PARAM", "fields"),
            ("INVALID_TYPE", "created_date_gte"),
            ("INVALID_TYPE", "created_date_lte"),
            ("INVALID_CURSOR", "cursor"),
        }

    @pytest.mark.parametrize(
        ("extra", "headers", "expected"),
        [
            ("&status_in=draft", {}, {("INVALID_TYPE", "status_in")}),  # given twice
            ("&name_contains=a%00b", {}, {("INVALID_TYPE", "name_contains")}),
            ("&created_by=%FF&created_by=%FF", {}, {("INVALID_TYPE", "created_by")}),  # named once
            ("&created_by=%FF", {}, {("INVALID_TYPE", "created_by")}),
            ("", {"X-SVC-Request-Id": "not-a-uuid"}, {("INVALID_TYPE", "X-SVC-Request-Id")}),
        ],
    )
    async def test_a_fault_found_before_the_parameters_are_read_is_named_beside_theirs(
        self, client: httpx.AsyncClient, tenant: Tenant, extra: str, headers: dict[str, str], expected: Any
    ) -> None:
        # Contract §3: every violation in one answer. A repeated parameter, a control character,
        # a non-UTF-8 escape or a malformed request id were answered alone.
        query = "limit=0&status_in=zz&fields=q" + extra
        response = await client.get(f"{OFFERS}?{query}", headers={**tenant.headers(), **headers})
        assert response.status_code == 400
        listed = [(d["code"], d["target"]) for d in response.json()["error"]["details"]]
        assert len(listed) == len(set(listed)), listed
        assert set(listed) == expected | {
            ("OUT_OF_RANGE", "limit"),
            ("INVALID_FIELDS_PARAM", "fields"),
            *(() if "status_in" in extra else [("INVALID_ENUM_VALUE", "status_in")]),
        }

    @pytest.mark.parametrize(
        ("params", "expected"),
        [
            ({"limit": "0"}, ("OUT_OF_RANGE", "limit")),
            ({"limit": "ten"}, ("INVALID_TYPE", "limit")),
            # Digits only: not Python int()'s leniency (underscores, a sign, spaces, a decimal point).
            ({"limit": "5_0"}, ("INVALID_TYPE", "limit")),
            ({"limit": "+5"}, ("INVALID_TYPE", "limit")),
            ({"limit": " 5 "}, ("INVALID_TYPE", "limit")),
            ({"limit": "5.0"}, ("INVALID_TYPE", "limit")),
            ({"limit": "-5"}, ("OUT_OF_RANGE", "limit")),
            ({"created_date_gte": "2026-1-5"}, ("INVALID_TYPE", "created_date_gte")),
            ({"cursor": base64.b64encode(b"offers:xyz").decode()}, ("INVALID_CURSOR", "cursor")),
            ({"cursor": base64.b64encode(b"people:" + b"a" * 24).decode()}, ("INVALID_CURSOR", "cursor")),
            (
                {"cursor": base64.b64encode(b"offers:" + b"a" * 24 + b"\n").decode()},
                ("INVALID_CURSOR", "cursor"),
            ),
            ({"status_in": "ACTIVE"}, ("INVALID_ENUM_VALUE", "status_in")),
            ({"fields": ""}, ("INVALID_FIELDS_PARAM", "fields")),
        ],
    )
    async def test_bad_parameter(
        self, client: httpx.AsyncClient, tenant: Tenant, params: dict[str, str], expected: tuple[str, str]
    ) -> None:
        response = await client.get(OFFERS, params=params, headers=tenant.headers())
        assert response.status_code == 400
        assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [expected]

    async def test_a_parameter_of_one_value_given_twice_is_refused(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        # `limit=1&limit=2` read as 2 (the last) while a proxy in front may read 1; `tags` and
        # `created_by` repeat by design.
        for query in (
            "limit=1&limit=2",
            "status_in=active&status_in=draft",
            "name_contains=a&name_contains=a",
        ):
            response = await client.get(f"{OFFERS}?{query}", headers=tenant.headers())
            assert response.status_code == 400, query
            name = query.split("=", 1)[0]
            assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
                ("INVALID_TYPE", name)
            ]
        both = await client.get(
            f"{OFFERS}?tags=tag_a&tags=tag_b&created_by=a@x.io&created_by=b@x.io", headers=tenant.headers()
        )
        assert both.status_code == 200, both.text


class TestPagination:
    async def test_default_page_is_20(self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant) -> None:
        await import_offers(app, tenant, _history(25))
        body = await _list(client, tenant)
        assert len(body["data"]) == 20
        assert body["pagination"]["limit"] == 20
        assert body["pagination"]["has_more"] is True

    async def test_cursor_walk_returns_every_row_once_newest_first(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        ids = await import_offers(app, tenant, _history(45))
        seen: list[str] = []
        pages = 0
        params: dict[str, Any] = {"limit": 10, "fields": "id"}
        while True:
            body = await _list(client, tenant, params)
            pages += 1
            pagination = body["pagination"]
            assert pagination["total_count"] == 45
            assert pagination["limit"] == 10
            seen += [item["id"] for item in body["data"]]
            assert pagination["has_more"] is (pagination["next_cursor"] is not None)
            if not pagination["has_more"]:
                break
            params["cursor"] = pagination["next_cursor"]
        assert pages == 5
        assert seen == ids  # ids descending = newest first
        assert len(set(seen)) == 45

    async def test_offers_created_during_a_walk_do_not_shift_it(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        ids = await import_offers(app, tenant, _history(6))
        first = await _list(client, tenant, {"limit": 3, "fields": "id"})
        newer = await create_id(client, tenant, flat_body(clock.now()))
        second = await _list(
            client, tenant, {"limit": 3, "fields": "id", "cursor": first["pagination"]["next_cursor"]}
        )
        walked = [item["id"] for item in first["data"] + second["data"]]
        assert walked == ids
        assert newer not in walked
        assert second["pagination"]["next_cursor"] is None

    async def test_walk_with_a_filter_counts_only_matches(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        await import_offers(app, tenant, _history(7))
        drafts = [
            {"name": f"Draft_Number_{i}", "created_by": "d@example.com", "status": "draft"} for i in range(5)
        ]
        await import_offers(app, tenant, drafts)
        params: dict[str, Any] = {"limit": 2, "status_in": "draft"}
        names: list[str] = []
        while True:
            body = await _list(client, tenant, params)
            assert body["pagination"]["total_count"] == 5
            names += [item["name"] for item in body["data"]]
            if body["pagination"]["next_cursor"] is None:
                break
            params["cursor"] = body["pagination"]["next_cursor"]
        assert sorted(names) == [f"Draft_Number_{i}" for i in range(5)]

    async def test_cursor_past_the_end_gives_an_empty_last_page(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        await import_offers(app, tenant, _history(2))
        body = await _list(client, tenant, {"cursor": cursor.encode("0" * 24)})
        assert body["data"] == []
        assert body["pagination"] == {"next_cursor": None, "limit": 20, "has_more": False, "total_count": 2}


class TestEffectiveStatus:
    async def test_status_follows_the_clock_in_items_and_filters(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await create_id(
            client, tenant, flat_body(clock.now(), starts_in=timedelta(hours=1), runs_for=timedelta(hours=1))
        )

        async def status_and_matches() -> tuple[str, dict[str, int]]:
            status = (await _list(client, tenant, {"fields": "status"}))["data"][0]["status"]
            counts = {}
            for name in ("scheduled", "active", "expired"):
                counts[name] = (await _list(client, tenant, {"status_in": name}))["pagination"]["total_count"]
            return status, counts

        assert await status_and_matches() == ("scheduled", {"scheduled": 1, "active": 0, "expired": 0})
        clock.advance(minutes=59, seconds=59)
        assert (await status_and_matches())[0] == "scheduled"
        clock.advance(seconds=1)  # exactly at start
        assert await status_and_matches() == ("active", {"scheduled": 0, "active": 1, "expired": 0})
        clock.advance(minutes=59, seconds=59)
        assert (await status_and_matches())[0] == "active"
        clock.advance(seconds=1)  # exactly at expiry
        assert await status_and_matches() == ("expired", {"scheduled": 0, "active": 0, "expired": 1})


class TestTenancy:
    async def test_another_workspace_never_sees_or_counts_offers(
        self, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        for params in ({}, {"id": offer_id}, {"name_contains": "Flat"}, {"status_in": "scheduled"}):
            body = await _list(client, other_tenant, params)
            assert body["data"] == []
            assert body["pagination"]["total_count"] == 0


class TestUnknownParameters:
    async def test_an_unknown_query_parameter_is_400_unknown_field(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        for path in (f"{OFFERS}?limit=3&lmit=4", f"{OFFERS}/templates?limit=3&lmit=4"):
            response = await client.get(path, headers=tenant.headers())
            assert response.status_code == 400, path
            assert response.json()["error"]["details"] == [
                {
                    "code": "UNKNOWN_FIELD",
                    "target": "lmit",
                    "message": "'lmit' is not a recognised field here.",
                }
            ]

    async def test_a_nameless_query_parameter_is_400(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        response = await client.get(f"{OFFERS}/templates?limit=4&=null", headers=tenant.headers())
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "UNKNOWN_FIELD"
