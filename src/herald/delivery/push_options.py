"""A Push campaign's `advanced` settings as one message carries them (pure): how long the
notification lives and how urgently the platform delivers it. Live and test sends put the same
object in the webhook body (`advanced`), so a gateway maps it to its transport's fields:

    {"expiration_settings": {...as stored}, "expires_at": "<UTC, created_at + expire_notification_after>",
     "priority": {...the platform's own part of platform_level_priority}}

`interruption_level` is given in the spec's spelling (`Time sensitive`) whichever form was stored.
Keys without a value are left out; a campaign without `advanced` carries none (None).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from herald.campaigns.schemas.advanced import Advanced, ExpireAfterType
from herald.campaigns.schemas.common import Platform
from herald.timefmt import rfc3339

_UNIT = {ExpireAfterType.HOUR: timedelta(hours=1), ExpireAfterType.DAY: timedelta(days=1)}


def push_options(
    advanced: Advanced | None, platform: Platform | None, now: datetime
) -> dict[str, Any] | None:
    if advanced is None:
        return None
    options: dict[str, Any] = {}
    expiration = advanced.expiration_settings
    if expiration is not None:
        options["expiration_settings"] = expiration.model_dump(mode="json", exclude_none=True)
        value, unit = expiration.expire_notification_after_value, expiration.expire_notification_after_type
        if value is not None and unit is not None:
            options["expires_at"] = rfc3339(now + value * _UNIT[unit])
    priority = advanced.platform_level_priority
    if priority is not None:
        if platform is Platform.ANDROID and priority.android_specific_priority is not None:
            options["priority"] = priority.android_specific_priority.model_dump(
                mode="json", exclude_none=True
            )
        elif platform is Platform.IOS and priority.ios_specific_priority is not None:
            ios = priority.ios_specific_priority
            shown = ios.model_dump(mode="json", exclude_none=True)
            if ios.interruption_level is not None:
                shown["interruption_level"] = ios.interruption_level.canonical.value
            options["priority"] = shown
    return options or None
