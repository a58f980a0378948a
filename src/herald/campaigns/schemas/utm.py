"""`utm_params`: tracking parameters added to the campaign's links.

Besides the five named keys, up to five custom keys are allowed, each prefixed `utm_`. Custom keys
are kept as extra fields (typed as strings); the prefix and count rules live in validation so each
offending key gets its own precise target.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from herald.campaigns.schemas.common import NonEmptyText, Text
from herald.schemas import APIModel

UTM_PREFIX = "utm_"
MAX_CUSTOM_UTM_KEYS = 5


def _key_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """For the OpenAPI document: every key, named or custom, starts with the prefix, and there are
    no more than the named keys and the custom ones together. How many of them are custom JSON
    Schema cannot count, so the description says it."""
    schema["propertyNames"] = {"pattern": f"^{UTM_PREFIX}"}
    schema["maxProperties"] = len(model.model_fields) + MAX_CUSTOM_UTM_KEYS
    schema["description"] = (
        f"The named keys, plus up to {MAX_CUSTOM_UTM_KEYS} custom keys prefixed `{UTM_PREFIX}` "
        "(string values)."
    )


class UtmParams(APIModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=_key_rules)

    # Values of custom keys are strings like the named ones.
    __pydantic_extra__: dict[str, Text]

    utm_source: NonEmptyText
    utm_medium: NonEmptyText
    utm_campaign: Text | None = None
    utm_term: Text | None = None
    utm_content: Text | None = None

    def custom_keys(self) -> list[str]:
        return list(self.__pydantic_extra__ or {})
