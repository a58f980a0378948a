"""DRAFT_PUBLISH completeness (contract §5 C4): what a campaign needs before it can go live.

Component rules still run on every component at this stage; this module adds only what a draft
may lack: components, and the fields that the delivery type or the channel makes mandatory.
"""

from __future__ import annotations

from herald.campaigns.schemas.basic_details import EmailBasicDetails, EmailContentType, PushBasicDetails
from herald.campaigns.schemas.common import TRIGGERED_TYPES, Channel, DeliveryType
from herald.campaigns.schemas.content import DEFAULT_LOCALE, EmailCampaignContent, PushCampaignContent
from herald.campaigns.schemas.delivery_controls import PushDeliveryControls
from herald.campaigns.schemas.scheduling import NEEDS_TIMEZONE
from herald.campaigns.schemas.trigger import awaited_actions
from herald.campaigns.validation.audience import MINIMUM_AUDIENCE_MESSAGE
from herald.campaigns.validation.content import (
    CONTENT_ROOT,
    effective_template_type,
    missing_template_fields,
)
from herald.campaigns.validation.context import Context, invalid_value, required
from herald.campaigns.validation.sendable import email_problems, filled, present, sender_problem
from herald.campaigns.validation.trigger import FIRED_BY_ACTIONS, TRIGGER_REQUIRED
from herald.problems import Problem, join_path

_DT = DeliveryType


def check_publish(ctx: Context) -> list[Problem]:
    problems = _check_basic_details(ctx)
    if ctx.channel is Channel.PUSH:
        problems += _check_push_content(ctx)
        problems += _check_push_connector(ctx)
    elif ctx.channel is Channel.EMAIL:
        problems += _check_email_content(ctx)
        problems += _check_connector(ctx)
    problems += _check_locales(ctx)
    problems += _check_trigger(ctx)
    problems += _check_scheduling(ctx)
    if ctx.delivery_type not in TRIGGERED_TYPES and ctx.campaign.segmentation_details is None:
        # Contract C4: the non-triggered types need an audience to publish. A business-event
        # campaign without one is sent to every user at each event (one sent needs the minimum).
        problems.append(required("segmentation_details", MINIMUM_AUDIENCE_MESSAGE))
    problems += _check_delivery_controls(ctx)
    return problems


def _check_basic_details(ctx: Context) -> list[Problem]:
    details = ctx.campaign.basic_details
    problems: list[Problem] = []
    if ctx.delivery_type is _DT.BUSINESS_EVENT_TRIGGERED and (details is None or not details.business_event):
        problems.append(
            required(
                "basic_details.business_event",
                "'business_event' is required for BUSINESS_EVENT_TRIGGERED campaigns.",
            )
        )
    if ctx.delivery_type is _DT.LOCATION_TRIGGERED and (
        not isinstance(details, PushBasicDetails) or not details.geofences
    ):
        problems.append(
            required("basic_details.geofences", "'geofences' is required for LOCATION_TRIGGERED campaigns.")
        )
    if ctx.channel is Channel.PUSH and (not isinstance(details, PushBasicDetails) or not details.platforms):
        problems.append(
            required("basic_details.platforms", "A Push campaign needs at least one platform in 'platforms'.")
        )
    return problems


def _check_push_content(ctx: Context) -> list[Problem]:
    content = ctx.campaign.campaign_content
    details = ctx.campaign.basic_details
    if not isinstance(content, PushCampaignContent):
        return [required("campaign_content", "Push campaigns need content to publish.")]
    platforms = details.platforms if isinstance(details, PushBasicDetails) and details.platforms else []
    problems: list[Problem] = []
    for entry_path, by_key in content.entries():
        for platform in platforms:
            key = platform.value.lower()
            path = (*CONTENT_ROOT, *entry_path, key)
            obj = getattr(by_key, key)
            if obj is None:
                problems.append(required(join_path(*path), f"Content for {platform.value} is required."))
                continue
            template_type = effective_template_type(obj, ctx.campaign)
            if template_type is None:
                problems.append(required(join_path(*path, "template_type")))
                continue
            problems += [
                required(
                    join_path(*path, *field),
                    f"'{field[-1]}' is required by template type {template_type.value}.",
                )
                for field in missing_template_fields(obj, template_type, ctx.custom_templates.get(path))
            ]
    return problems


def _check_email_content(ctx: Context) -> list[Problem]:
    content = ctx.campaign.campaign_content
    problems: list[Problem] = []
    if not isinstance(content, EmailCampaignContent):
        problems.append(required("campaign_content", "Email campaigns need content to publish."))
    else:
        for entry_path, email in content.entries():
            path = (*CONTENT_ROOT, *entry_path)
            # Verified senders are the connector's check (`_check_senders`).
            problems += email_problems(email, path, ctx.custom_templates.get(path))
    details = ctx.campaign.basic_details
    if (
        isinstance(details, EmailBasicDetails)
        and details.content_type is EmailContentType.PROMOTIONAL
        and not details.subscription_category
    ):
        problems.append(
            required(
                "basic_details.subscription_category",
                "'subscription_category' is required for PROMOTIONAL e-mail.",
            )
        )
    return problems


def _check_connector(ctx: Context) -> list[Problem]:
    connector = ctx.campaign.connector
    if connector is None:
        return [required("connector", "Email campaigns need a connector to send through.")]
    known = ctx.configured_connectors
    name = connector.connector_name
    if known is None:
        return []
    if name in known:
        if known[name] == connector.connector_type.value:
            return _check_senders(ctx, name)
        message = f"Connector '{name}' is of type {known[name]}, not {connector.connector_type.value}."
        return [invalid_value("connector.connector_type", message)]
    if name in (ctx.push_connectors or ()):
        message = f"Connector '{name}' carries push messages, not e-mail."
    else:
        message = f"No connector named '{name}' is configured in this workspace."
    return [invalid_value("connector.connector_name", message)]


def _check_senders(ctx: Context, connector_name: str) -> list[Problem]:
    # Every message (locale, variation) goes out from its own address: each must be one the
    # connector may send from, or the server (or the sender's domain) would refuse or flag it.
    senders = (ctx.connector_senders or {}).get(connector_name)
    content = ctx.campaign.campaign_content
    if not senders or not isinstance(content, EmailCampaignContent):
        return []
    problems: list[Problem] = []
    for entry_path, email in content.entries():
        path = (*CONTENT_ROOT, *entry_path)
        address = filled(email, ctx.custom_templates.get(path)).get("from_address")
        # One that is no address is also `_check_email_content`'s problem: reported once.
        problem = sender_problem(address, path, senders) if present(address) else None
        if problem is not None:
            problems.append(problem)
    return problems


def _check_push_connector(ctx: Context) -> list[Problem]:
    # A Push campaign names no connector: it goes through the workspace's only push connector (as
    # test sends do by default). With none, or several, the engine could send nothing.
    known = ctx.push_connectors
    if known is None or len(known) == 1:
        return []
    if not known:
        message = (
            "No push connector is configured in this workspace; add one with "
            "`herald connectors add --type CUSTOM_API --channel push`."
        )
    else:
        message = (
            f"This workspace has several push connectors ({', '.join(sorted(known))}); a Push "
            "campaign is sent through the only one, so remove the others."
        )
    return [required("connector", message)]


def _check_locales(ctx: Context) -> list[Problem]:
    # Every listed locale must have content of its own, or its users would get nothing.
    content = ctx.campaign.campaign_content
    if content is None or not content.locales:
        return []
    present = content.content if isinstance(content.content, dict) else {}
    return [
        required(
            join_path(*CONTENT_ROOT, locale), f"Locale '{locale}' is listed in locales but has no content."
        )
        for locale in content.locales
        if locale != DEFAULT_LOCALE and locale not in present
    ]


def _check_trigger(ctx: Context) -> list[Problem]:
    trigger = ctx.campaign.trigger_condition
    if ctx.delivery_type in TRIGGER_REQUIRED.get(ctx.channel, frozenset()) and trigger is None:
        return [
            required(
                "trigger_condition",
                f"'trigger_condition' is required for {ctx.delivery_type.value} campaigns.",
            )
        ]
    if ctx.delivery_type not in FIRED_BY_ACTIONS or trigger is None:
        return []
    kind = ctx.delivery_type.value
    if trigger.included_filters is None or not trigger.included_filters.filters:
        return [
            required(
                "trigger_condition.included_filters",
                f"{kind} campaigns need at least one filter in included_filters.",
            )
        ]
    if not awaited_actions(trigger):
        # Only an event can fire it: filters on user attributes alone, or on actions not done,
        # would publish a campaign that never sends.
        return [
            required(
                "trigger_condition.included_filters",
                f"{kind} campaigns are sent when a user does something: included_filters must "
                "ask for at least one action done (an actions filter, not executed: false).",
            )
        ]
    return []


def _check_scheduling(ctx: Context) -> list[Problem]:
    details = ctx.campaign.scheduling_details
    if details is None:
        if ctx.delivery_type in (_DT.ONE_TIME, _DT.PERIODIC):
            return [
                required(
                    "scheduling_details",
                    f"'scheduling_details' is required for {ctx.delivery_type.value} campaigns.",
                )
            ]
        return []
    if details.delivery_type in NEEDS_TIMEZONE and details.timezone is None:
        return [
            required(
                "scheduling_details.timezone",
                f"'timezone' is required when delivery_type is {details.delivery_type}.",
            )
        ]
    return []


def _check_delivery_controls(ctx: Context) -> list[Problem]:
    if ctx.channel is not Channel.PUSH or ctx.delivery_type is not _DT.EVENT_TRIGGERED:
        return []
    controls = ctx.campaign.delivery_controls
    if isinstance(controls, PushDeliveryControls) and controls.bypass_dnd is not None:
        return []
    return [
        required(
            "delivery_controls.bypass_dnd", "'bypass_dnd' is required for EVENT_TRIGGERED Push campaigns."
        )
    ]
