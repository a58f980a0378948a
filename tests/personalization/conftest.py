"""Fixtures for personalization tests: a workspace with a known user and room in its rate limits."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from tests.factories import Tenant, make_tenant
from tests.personalization.helpers import OPEN_LIMITS, add_user


@pytest.fixture
async def workspace(app: FastAPI) -> Tenant:
    tenant = await make_tenant(app, rate_limits=OPEN_LIMITS)
    await add_user(
        app,
        tenant,
        "u1",
        email="ana@example.com",
        first_name="Ana",
        last_name="Lima",
        gaid="gaid-1",
        push_id="push-1",
        city="Lyon",
        points=120,
        vip=True,
        interests=["shoes", "hats"],
    )
    return tenant


@pytest.fixture
async def other_workspace(app: FastAPI) -> Tenant:
    return await make_tenant(app, rate_limits=OPEN_LIMITS)
