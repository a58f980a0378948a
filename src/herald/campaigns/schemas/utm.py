"""`utm_params`: tracking parameters added to the campaign's links.

Besides the five named keys, up to five custom keys are allowed, each prefixed `utm_`. Custom keys
are kept as extra fields (typed as strings); the prefix and count rules live in validation so each
offending key gets its own precise target.
"""

from __future__ import annotations

from pydantic import ConfigDict

from herald.campaigns.schemas.common import NonEmptyText, Text
from herald.schemas import APIModel

UTM_PREFIX = "utm_"
MAX_CUSTOM_UTM_KEYS = 5


class UtmParams(APIModel):
    model_config = ConfigDict(extra="allow")

    # Values of custom keys are strings like the named ones.
    __pydantic_extra__: dict[str, Text]

    utm_source: NonEmptyText
    utm_medium: NonEmptyText
    utm_campaign: Text | None = None
    utm_term: Text | None = None
    utm_content: Text | None = None

    def custom_keys(self) -> list[str]:
        return list(self.__pydantic_extra__ or {})
