"""Every table, imported in one place so Alembic's autogenerate sees the whole schema."""

from herald.audience.models import Event, Segment, SegmentMember, User
from herald.campaigns.models import Campaign, CampaignReachability, CampaignRequestId, CampaignTag
from herald.db import Base
from herald.delivery.engine.models import (
    AttributionWindow,
    BestTime,
    Conversion,
    Execution,
    ExecutionUser,
    PeriodicResume,
    TriggerInbox,
)
from herald.delivery.models import Connector, OutboxEntry
from herald.http.idempotency import IdempotencyRecord
from herald.offers.models import Offer, OfferTag
from herald.personalization.models import ContentApi, ContentBlock, CustomTemplate, ProductSet
from herald.workspaces.models import ApiKey, OfferTemplate, Tag, Workspace

__all__ = [
    "ApiKey",
    "AttributionWindow",
    "Base",
    "BestTime",
    "Campaign",
    "CampaignReachability",
    "CampaignRequestId",
    "CampaignTag",
    "Connector",
    "ContentApi",
    "ContentBlock",
    "Conversion",
    "CustomTemplate",
    "Event",
    "Execution",
    "ExecutionUser",
    "IdempotencyRecord",
    "Offer",
    "OfferTag",
    "OfferTemplate",
    "OutboxEntry",
    "PeriodicResume",
    "ProductSet",
    "Segment",
    "SegmentMember",
    "Tag",
    "TriggerInbox",
    "User",
    "Workspace",
]
