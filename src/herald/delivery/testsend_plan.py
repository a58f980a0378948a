"""Which messages a test sends (pure): every platform x locale x variation, narrowed on request,
and whether each is complete enough to send.

A Push campaign whose `basic_details.platforms` is set is tested on those platforms only (the
others would never be delivered). Flat content is the `default` locale's `variation_1`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herald.campaigns.schemas.basic_details import BasicDetails, PushBasicDetails, PushTemplateType
from herald.campaigns.schemas.common import Channel, Platform
from herald.campaigns.schemas.content import (
    DEFAULT_LOCALE,
    VARIATION_PREFIX,
    CampaignContent,
    EmailCampaignContent,
    EmailContent,
    PushCampaignContent,
    PushPlatformContent,
)
from herald.campaigns.validation.content import CONTENT_ROOT, missing_template_fields, variation_keys
from herald.campaigns.validation.sendable import TemplateBodies, email_problems
from herald.delivery.messages import Slot
from herald.problems import Problem, join_path

FIRST_VARIATION = variation_keys(1)[0]


@dataclass(frozen=True)
class SlotMessage:
    slot: Slot
    path: tuple[str, ...]  # of the message object, from the body root
    source: PushPlatformContent | EmailContent

    def message(self) -> dict[str, Any]:
        """The object as it was written (unset fields absent, unknown keys kept)."""
        return self.source.model_dump(mode="json", exclude_unset=True)


def _entry_slot(entry_path: tuple[str, ...]) -> tuple[str, str]:
    return (entry_path[0], entry_path[1]) if len(entry_path) == 3 else (DEFAULT_LOCALE, FIRST_VARIATION)


def _order(content: CampaignContent) -> Callable[[SlotMessage], tuple[int, str, int, int]]:
    """`default` first, then locales as `locales` lists them; variations by number; platforms
    Android, iOS, Web. Not the stored key order, which PostgreSQL's JSONB does not keep."""
    listed = {locale: rank for rank, locale in enumerate([DEFAULT_LOCALE, *(content.locales or [])])}
    platforms = {platform: rank for rank, platform in enumerate(Platform)}

    def key(item: SlotMessage) -> tuple[int, str, int, int]:
        slot = item.slot
        number = slot.variation.removeprefix(VARIATION_PREFIX)
        return (
            listed.get(slot.locale, len(listed)),
            slot.locale,
            int(number) if number.isdigit() else 0,
            platforms[slot.platform] if slot.platform else 0,
        )

    return key


def slot_messages(content: CampaignContent, basic_details: BasicDetails | None) -> list[SlotMessage]:
    """Every message of the content, in a stable order (see `_order`)."""
    return sorted(_slot_messages(content, basic_details), key=_order(content))


def _slot_messages(content: CampaignContent, basic_details: BasicDetails | None) -> list[SlotMessage]:
    found: list[SlotMessage] = []
    if isinstance(content, EmailCampaignContent):
        for entry_path, email in content.entries():
            locale, variation = _entry_slot(entry_path)
            slot = Slot(Channel.EMAIL, None, locale, variation)
            found.append(SlotMessage(slot, (*CONTENT_ROOT, *entry_path), email))
        return found
    assert isinstance(content, PushCampaignContent)
    listed = basic_details.platforms if isinstance(basic_details, PushBasicDetails) else None
    for entry_path, platforms in content.entries():
        locale, variation = _entry_slot(entry_path)
        for platform, key, obj in platforms.by_platform():
            if listed and platform not in listed:
                continue
            slot = Slot(Channel.PUSH, platform, locale, variation)
            found.append(SlotMessage(slot, (*CONTENT_ROOT, *entry_path, key), obj))
    return found


def _slot_value(slot: Slot, name: str) -> str | None:
    if name == "platform":
        return slot.platform.value if slot.platform else None
    return slot.locale if name == "locale_name" else slot.variation


def narrow(
    messages: list[SlotMessage], platform: Platform | None, locale: str | None, variation: str | None
) -> tuple[list[SlotMessage], list[Problem]]:
    """The messages that match the narrowing of `test_campaign_meta`; a value that matches
    nothing is a problem naming what there is."""
    problems: list[Problem] = []
    wanted_by_name = {
        "platform": platform.value if platform else None,
        "locale_name": locale,
        "variation": variation,
    }
    for name, wanted in wanted_by_name.items():
        if wanted is None:
            continue
        present = list(dict.fromkeys(_slot_value(m.slot, name) for m in messages))
        if wanted not in present:
            shown = ", ".join(str(value) for value in present) or "none"
            problems.append(
                Problem(
                    "INVALID_ENUM_VALUE",
                    f"test_campaign_meta.{name}",
                    f"The campaign has no content for {name} '{wanted}' (it has: {shown}).",
                )
            )
    if problems:
        return [], problems
    kept = [
        m
        for m in messages
        if (platform is None or m.slot.platform is platform)
        and (locale is None or m.slot.locale == locale)
        and (variation is None or m.slot.variation == variation)
    ]
    return kept, []


def _template_type(obj: PushPlatformContent, basic_details: BasicDetails | None) -> PushTemplateType:
    if obj.template_type is not None:
        return PushTemplateType(obj.template_type)
    if isinstance(basic_details, PushBasicDetails) and basic_details.template_type is not None:
        return basic_details.template_type
    return PushTemplateType.BASIC  # a test of untyped content is shown as a basic notification


def readiness_problems(
    messages: list[SlotMessage],
    basic_details: BasicDetails | None,
    senders: list[str] | None,
    templates: TemplateBodies,
) -> list[Problem]:
    """What each message lacks to be sent (`sendable`: as publishing judges it), the custom template
    it names filled in (`templates`). `senders`: the SMTP connector's verified senders (None when
    the connector is not SMTP)."""
    problems: list[Problem] = []
    for item in messages:
        source = item.source
        template = templates.get(item.path)
        if isinstance(source, EmailContent):
            problems += email_problems(source, item.path, template, senders)
        else:
            template_type = _template_type(source, basic_details)
            problems += [
                Problem(
                    "REQUIRED_FIELD_MISSING",
                    join_path(*item.path, *field),
                    f"'{field[-1]}' is required to send a {template_type.value} notification.",
                )
                for field in missing_template_fields(source, template_type, template)
            ]
    return problems
