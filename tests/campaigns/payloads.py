"""Realistic campaign bodies, each valid at DRAFT_PUBLISH, and helpers to derive variants of them.

Valid given `ALL_FEATURES` and a workspace whose connectors include `CONNECTORS`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from herald.campaigns.schemas.campaign import CampaignDocument, sent_components
from herald.campaigns.validation import Stage, parse_create, validate_campaign
from herald.problems import Problem

ALL_FEATURES = frozenset({"campaign_audience_limit", "queuing", "portfolio", "versioning", "campaign_meta"})
NO_FEATURES: frozenset[str] = frozenset()
# The custom segment the realistic payloads' audiences exclude and the custom template their
# e-mail names: the test workspaces hold them (`lifecycle_helpers.add_payload_resources`), as
# publishing requires.
PAYLOAD_SEGMENT_ID = "64f1c2aa9b1e4c0012ab34cd"
PAYLOAD_TEMPLATE_ID, PAYLOAD_TEMPLATE_VERSION = "tmpl_order_confirmation", 3
# The workspace's e-mail connectors, name -> type.
CONNECTORS = {"transactional-smtp": "CUSTOM_SMTP", "marketing-api": "CUSTOM_API", "newsletters": "SENDGRID"}

_SEGMENT = {
    "included_filters": {
        "filter_operator": "and",
        "filters": [
            {
                "filter_type": "user_attributes",
                "data_type": "string",
                "category": "Tracked Standard Attribute",
                "name": "city",
                "operator": "in",
                "value": ["Pune", "Bengaluru"],
                "case_sensitive": False,
                "negate": False,
                "project_name": "retail-app",
            },
            {
                "filter_type": "actions",
                "action_name": "Added To Cart",
                "execution": {"type": "atleast", "count": 1},
                "executed": True,
                "attributes": {
                    "filter_operator": "and",
                    "filters": [
                        {
                            "filter_type": "user_attributes",
                            "data_type": "double",
                            "name": "cart_value",
                            "operator": "greaterThan",
                            "value": 999.0,
                            "project_name": "retail-app",
                        }
                    ],
                },
            },
        ],
    },
    "excluded_filters": {
        "filter_operator": "or",
        "filters": [{"filter_type": "custom_segments", "name": "Internal testers", "id": PAYLOAD_SEGMENT_ID}],
    },
    "is_all_user_campaign": False,
    "send_campaign_to_opt_out_users": False,
}

_GOALS = {
    "attribution_window_in_hours": 36,
    "goals": [
        {
            "goal_name": "Purchase",
            "goal_event_name": "Order Completed",
            "goal_event_attribute": {
                "name": "order_value",
                "condition": "between",
                "data_type": "DOUBLE",
                "value": "100",
                "value1": "5000",
                "negate": False,
            },
            "is_primary_goal": True,
            "revenue_attribute": "order_value",
            "revenue_currency": "INR",
        },
        {"goal_name": "App open", "goal_event_name": "App Opened", "is_primary_goal": False},
    ],
}


def _android(title: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "template_type": "BASIC",
        "basic_details": {
            "title": title,
            "message": message,
            "summary": "Limited offer",
            "notification_channel": "promotions",
            "default_click_action": "DEEPLINK",
            "default_click_action_value": "shop://sale",
            "key_value_pairs": [{"key": "source", "value": "campaign"}],
        },
        "buttons": [{"title": "Shop now", "click_action": "DEEPLINK", "click_action_value": "shop://sale"}],
        **extra,
    }


def _ios(title: str, message: str) -> dict[str, Any]:
    return {
        "template_type": "BASIC",
        "basic_details": {
            "title": title,
            "subtitle": "Today only",
            "message": message,
            "image_url": "https://cdn.example.com/sale.png",
        },
        "rich_media_category": "sale",  # not a known field: kept verbatim
    }


PUSH_ONE_TIME: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "marketer@example.com",
    "request_id": "push-one-time-0001",
    "basic_details": {
        "name": "Diwali Sale Blast",
        "platforms": ["ANDROID", "IOS"],
        "tags": ["festive", "sale"],
        "team": "Growth",
        "internal_note": "kept verbatim",
    },
    "campaign_content": {
        "content": {
            "push": {
                "android": _android("Hi {{UserAttribute['first_name']}}!", "The Diwali sale is live."),
                "ios": _ios("Hi {{UserAttribute['first_name']}}!", "The Diwali sale is live."),
            }
        }
    },
    "segmentation_details": _SEGMENT,
    "scheduling_details": {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": "2030-10-20T09:30:00",
        "expiry_time": "2030-10-22T23:59:00",
        "timezone": "Asia/Kolkata",
    },
    "delivery_controls": {
        "bypass_dnd": False,
        "campaign_throttle_rpm": 50000,
        "count_for_frequency_capping": True,
        "ignore_frequency_capping": False,
    },
    "conversion_goal_details": _GOALS,
    "control_group_details": {
        "is_campaign_control_group_enabled": True,
        "campaign_control_group_percentage": 10,
        "is_global_control_group_enabled": True,
    },
    "utm_params": {
        "utm_source": "herald",
        "utm_medium": "push",
        "utm_campaign": "diwali_2030",
        "utm_id": "d30",
    },
    "campaign_audience_limit": {
        "is_campaign_audience_limit_enabled": True,
        "metric": "SENT",
        "frequency": "TOTAL",
        "limit": 2_000_000,
    },
    "advanced": {
        "expiration_settings": {
            "expire_notification_after_value": 2,
            "expire_notification_after_type": "DAY",
            "remove_from_inbox_after_value": 7,
            "remove_from_inbox_after_type": "DAY",
        },
        "platform_level_priority": {
            "android_specific_priority": {"send_with_priority": True},
            "ios_specific_priority": {
                "apns_priority": "10",
                "interruption_level": "Time sensitive",
                "relevance_score": 1,
            },
        },
    },
}

PUSH_PERIODIC: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "PERIODIC",
    "created_by": "marketer@example.com",
    "basic_details": {"name": "Weekly digest", "platforms": ["ANDROID"]},
    "campaign_content": {"content": {"push": {"android": _android("Your week", "Five picks for you.")}}},
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": "2030-01-05T08:00:00+05:30",
        "timezone": "Asia/Kolkata",
        "periodic_details": {
            "sending_frequency": "WEEKLY",
            "repeat_frequency": 1,
            "no_of_occurences": 12,
            "repeat_on_days_of_week": ["MONDAY", "THURSDAY"],
        },
    },
    "delivery_controls": {"bypass_dnd": False, "queuing_enabled": True, "queue_duration": 6},
    "campaign_audience_limit": {
        "is_campaign_audience_limit_enabled": True,
        "metric": "SENT",
        "frequency": "INSTANCE",
        "limit": 100000,
    },
}

PUSH_EVENT_TRIGGERED: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "EVENT_TRIGGERED",
    "created_by": "lifecycle@example.com",
    "basic_details": {"name": "Cart reminder", "platforms": ["ANDROID", "IOS"]},
    "campaign_content": {
        "content": {
            "push": {
                "android": _android("Still thinking?", "{{ event.product_name }} is waiting in your cart."),
                "ios": _ios("Still thinking?", "{{ event.product_name }} is waiting in your cart."),
            }
        }
    },
    "trigger_condition": {
        "included_filters": {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "actions",
                    "action_name": "Added To Cart",
                    "execution": {"type": "atleast", "count": 1},
                    "executed": True,
                }
            ],
        },
        "secondary_included_filters": {
            "filter_operator": "and",
            "filters": [{"filter_type": "actions", "action_name": "Order Completed", "executed": False}],
        },
        "trigger_delay_type": "DELAY",
        "trigger_delay_value": 2,
        "trigger_delay_granularity": "HOURS",
        "trigger_relation": "AFTER",
    },
    "scheduling_details": {
        "delivery_type": "ASAP",
        "start_time": "2030-02-01T00:00:00Z",
        "expiry_time": "2030-12-31T23:59:59Z",
    },
    "delivery_controls": {
        "bypass_dnd": True,
        "minimum_delay_between_two_notification_in_hour": 6,
        "ignore_global_minimum_delay": False,
        "count_for_frequency_capping": True,
    },
}

PUSH_DEVICE_TRIGGERED: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "DEVICE_TRIGGERED",
    "created_by": "lifecycle@example.com",
    "basic_details": {
        "name": "Offline nudge",
        "platforms": ["ANDROID"],
        "send_to_triggered_platform_only": True,
    },
    "campaign_content": {
        "content": {"push": {"android": _android("We saved your place", "Pick up where you left off.")}}
    },
    "trigger_condition": {
        "included_filters": {
            "filter_operator": "and",
            "filters": [{"filter_type": "actions", "action_name": "Video Paused", "executed": True}],
        }
    },
    "delivery_controls": {
        "minimum_delay_between_two_notification_in_hour": 12,
        "max_time_to_show_message_of_same_camapign": "24",
        "expiry_time_of_sync_data_in_hour": "48",
        "send_message_in_offline_mode": True,
    },
}

PUSH_LOCATION_TRIGGERED: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "LOCATION_TRIGGERED",
    "created_by": "stores@example.com",
    "basic_details": {
        "name": "Store walk-in",
        "platforms": ["ANDROID", "IOS"],
        "geofences": [
            {
                "name": "MG Road store",
                "latitude": "12.9756",
                "longitude": "77.6050",
                "radius": "200",
                "triggered_at": "dwell",
                "dwell_time_value": "5",
                "dwell_time_granularity": "MINUTES",
                "response_time_value": "0",
                "response_time_granularity": "MINUTES",
            },
            {
                "name": "Airport kiosk",
                "latitude": "13.1986",
                "longitude": "77.7066",
                "radius": "500",
                "triggered_at": "ENTRY",
                "response_time_value": "10",
                "response_time_granularity": "MINUTES",
            },
        ],
    },
    "campaign_content": {
        "content": {
            "push": {
                "android": _android("You're nearby!", "Show this for 10% off."),
                "ios": _ios("Nearby", "10% off in store."),
            }
        }
    },
    "trigger_condition": {
        "included_filters": {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "loyalty_member",
                    "operator": "is",
                    "value": True,
                    "project_name": "retail-app",
                }
            ],
        }
    },
    "scheduling_details": {
        "timezone": "Asia/Kolkata",
        "geo_fence_timelimit": {
            "notification_schedule": "LIMITED_TIME",
            "timebounds": [{"start_time": "10:00", "end_time": "21:00"}],
        },
    },
    "delivery_controls": {
        "send_limit_value": "2",
        "send_limit_granularity_in_hours": "24",
        "bypass_dnd": False,
    },
}

PUSH_WEB: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "web-team@example.com",
    "basic_details": {"name": "Web launch", "platforms": ["WEB"]},
    "campaign_content": {
        "content": {
            "push": {
                "web": {
                    "template_type": "BASIC",
                    "basic_details": {"title": "New collection", "message": "See what just dropped."},
                    "redirect_url": "https://shop.example.com/new",
                }
            }
        }
    },
    "segmentation_details": {"is_all_user_campaign": True, "send_campaign_to_opt_out_users": False},
    "scheduling_details": {
        "delivery_type": "SEND_IN_USER_TIMEZONE",
        "start_time": "2030-03-01T10:00:00",
        "user_timezone_details": {"send_in_user_timezone": True, "send_if_user_timezone_has_passed": False},
    },
    "utm_params": {"utm_source": "herald", "utm_medium": "webpush"},
}

PUSH_MULTI_LOCALE_AB: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "global@example.com",
    "basic_details": {"name": "Spring sale (multi-locale A/B)", "platforms": ["ANDROID"]},
    "campaign_content": {
        "locales": ["es-ES", "fr-FR"],
        "variation_details": {
            "distribution_type": "MANUAL",
            "no_of_variations": 2,
            "manual_distribution_percentage": {"variation_1": 60, "variation_2": 40},
        },
        "content": {
            locale: {
                "variation_1": {
                    "push": {"android": _android(f"{greeting} {{{{UserAttribute['first_name']}}}}", "-20%")}
                },
                "variation_2": {
                    "push": {
                        "android": {
                            "template_type": "STYLIZED_BASIC",
                            "basic_details": {"title": f"<b>{greeting}</b>", "message": "-20% today"},
                        }
                    }
                },
            }
            for locale, greeting in (("default", "Hello"), ("es-ES", "Hola"), ("fr-FR", "Bonjour"))
        },
    },
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": {"delivery_type": "ASAP"},
}

_EMAIL_HTML = (
    "<html><head><style>.wrap{width:100%}</style></head><body><div class='wrap'>"
    "Hi {{UserAttribute['first_name'] | default('there')}}, our sale starts now."
    "{% if UserAttribute['vip'] %}Early access for you.{% endif %}</div></body></html>"
)

EMAIL_ONE_TIME_PROMOTIONAL: dict[str, Any] = {
    "channel": "EMAIL",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "crm@example.com",
    "request_id": "email-promo-2030-001",
    "basic_details": {
        "name": "Spring newsletter",
        "content_type": "PROMOTIONAL",
        "subscription_category": "newsletter",
        "user_attribute_identifier": "email",
        "tags": ["newsletter"],
    },
    "campaign_content": {
        "content": {
            "email": {
                "subject": "Spring is here, {{UserAttribute['first_name']}}",
                "preview_text": "New arrivals inside",
                "sender_name": "Example Shop",
                "from_address": "news@example.com",
                "reply_to_address": "support@example.com",
                "cc_ids": [],
                "bcc_ids": ["archive@example.com"],
                "html_content": _EMAIL_HTML,
                "email_editor": "CUSTOM_HTML",
                "attachments": [{"name": "catalogue.pdf", "url": "https://cdn.example.com/catalogue.pdf"}],
                "amp_content": "<html amp4email></html>",
            }
        }
    },
    "connector": {"connector_type": "CUSTOM_API", "connector_name": "marketing-api"},
    "segmentation_details": _SEGMENT,
    "scheduling_details": {
        "delivery_type": "SEND_IN_BTS",
        "start_time": "2030-04-01T06:00:00Z",
        "timezone": "Europe/Madrid",
        "bts_details": {
            "send_in_bts": True,
            "if_user_bts_is_not_available": "SEND_AT_START_TIME",
            "if_user_bts_outside_time_window": "SEND_AT_WINDOW_END",
            "window_end_time": "2030-04-01T20:00:00Z",
        },
    },
    "delivery_controls": {
        "bypass_dnd": False,
        "campaign_throttle_rpm": 20000,
        "count_for_frequency_capping": True,
    },
    "conversion_goal_details": _GOALS,
    "control_group_details": {"is_campaign_control_group_enabled": False},
    "utm_params": {"utm_source": "herald", "utm_medium": "email", "utm_content": "hero_banner"},
    "campaign_audience_limit": {"is_campaign_audience_limit_enabled": False},
}

EMAIL_EVENT_TRIGGERED: dict[str, Any] = {
    "channel": "EMAIL",
    "campaign_delivery_type": "EVENT_TRIGGERED",
    "created_by": "lifecycle@example.com",
    "basic_details": {"name": "Order confirmation", "content_type": "TRANSACTIONAL"},
    "campaign_content": {
        "content": {
            "email": {
                "subject": "Order {{ event.order_id }} confirmed",
                "from_address": "orders@example.com",
                "sender_name": "Example Shop",
                "custom_template_id": PAYLOAD_TEMPLATE_ID,
                "custom_template_version": PAYLOAD_TEMPLATE_VERSION,
            }
        }
    },
    "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "transactional-smtp"},
    "trigger_condition": {
        "included_filters": {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "actions",
                    "action_name": "Order Completed",
                    "executed": True,
                    "attributes": {
                        "filter_operator": "and",
                        "filters": [
                            {
                                "filter_type": "user_attributes",
                                "data_type": "string",
                                "name": "payment_mode",
                                "operator": "is",
                                "value": "{{ UserAttribute['preferred_payment'] }}",
                                "is_dynamic_value": True,
                                "project_name": "retail-app",
                            }
                        ],
                    },
                }
            ],
        },
        "trigger_delay_type": "ASAP",
    },
    "delivery_controls": {"bypass_dnd": True, "ignore_frequency_capping": True},
}

EMAIL_BUSINESS_EVENT: dict[str, Any] = {
    "channel": "EMAIL",
    "campaign_delivery_type": "BUSINESS_EVENT_TRIGGERED",
    "created_by": "merch@example.com",
    "basic_details": {
        "name": "Price drop alert",
        "content_type": "TRANSACTIONAL",
        "business_event": "price_drop",
    },
    "campaign_content": {
        "content": {
            "email": {
                "subject": "Prices dropped on items you viewed",
                "from_address": "deals@example.com",
                "html_content": "<p>Good news, {{UserAttribute['first_name']}}!</p>",
            }
        }
    },
    "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "transactional-smtp"},
    "segmentation_details": {
        "included_filters": {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "datetime",
                    "name": "last_seen",
                    "operator": "inTheLast",
                    "value": {"value": 30, "unit": "days"},
                    "project_name": "retail-app",
                }
            ],
        }
    },
    "scheduling_details": {"start_time": "2030-05-01T00:00:00Z", "expiry_time": "2030-06-01T00:00:00Z"},
}

EMAIL_PERIODIC: dict[str, Any] = {
    "channel": "EMAIL",
    "campaign_delivery_type": "PERIODIC",
    "created_by": "billing@example.com",
    "basic_details": {"name": "Monthly statement", "content_type": "TRANSACTIONAL"},
    "campaign_content": {
        "content": {
            "email": {
                "subject": "Your statement for this month",
                "from_address": "billing@example.com",
                "html_content": "<p>Your statement is ready.</p>",
            }
        }
    },
    "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "transactional-smtp"},
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": "2030-01-01T07:00:00",
        "timezone": "America/New_York",
        "periodic_details": {
            "sending_frequency": "MONTHLY",
            "repeat_frequency": 1,
            "repeat_on_date_of_month": [1, 15],
            "repeat_on_days_of_week_for_month": [
                {"week_granularity": "LAST", "repeat_on_days_of_week": ["FRIDAY"]}
            ],
        },
    },
    "delivery_controls": {"campaign_throttle_rpm": 1000},
    "campaign_audience_limit": {
        "is_campaign_audience_limit_enabled": True,
        "metric": "SENT",
        "frequency": "TOTAL",
        "limit": 9_999_999_999,
    },
}

PUSH_BROADCAST_LIVE_ACTIVITY: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "BROADCAST_LIVE_ACTIVITY",
    "created_by": "sports@example.com",
    "basic_details": {"name": "Match day live score", "platforms": ["IOS"]},
    "campaign_content": {
        "content": {
            "push": {
                "ios": {
                    "template_type": "BASIC",
                    "basic_details": {"title": "IND vs AUS", "message": "Live now"},
                    "live_activity": {
                        "attributes_type": "MatchAttributes",
                        "content_state": {"score": "0-0"},
                    },
                }
            }
        }
    },
    "segmentation_details": {"is_all_user_campaign": True},
    "advanced": {
        "platform_level_priority": {"ios_specific_priority": {"interruption_level": "TIME_SENSITIVE"}}
    },
}

PAYLOADS: dict[str, dict[str, Any]] = {
    "push_one_time_android_ios": PUSH_ONE_TIME,
    "push_periodic": PUSH_PERIODIC,
    "push_event_triggered_delay": PUSH_EVENT_TRIGGERED,
    "push_device_triggered": PUSH_DEVICE_TRIGGERED,
    "push_location_triggered": PUSH_LOCATION_TRIGGERED,
    "push_web": PUSH_WEB,
    "push_multi_locale_ab": PUSH_MULTI_LOCALE_AB,
    "email_one_time_promotional": EMAIL_ONE_TIME_PROMOTIONAL,
    "email_event_triggered": EMAIL_EVENT_TRIGGERED,
    "email_business_event": EMAIL_BUSINESS_EVENT,
    "email_periodic": EMAIL_PERIODIC,
    "push_broadcast_live_activity": PUSH_BROADCAST_LIVE_ACTIVITY,
}


# ---- helpers for table-driven tests -----------------------------------------------------------

_DROP = object()


def _parts(path: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in path.split(".")]


def variant(
    base: dict[str, Any], changes: dict[str, Any] | None = None, drop: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A deep copy of `base` with dot-path `changes` set and `drop` paths removed."""
    body = copy.deepcopy(base)
    for path, value in {**(changes or {}), **dict.fromkeys(drop, _DROP)}.items():
        *parents, last = _parts(path)
        node: Any = body
        for part in parents:
            node = node[part]
        if value is _DROP:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return body


def problems(
    raw: dict[str, Any],
    stage: Stage = Stage.DRAFT_PUBLISH,
    features: frozenset[str] = ALL_FEATURES,
    **kwargs: Any,
) -> list[Problem]:
    """Parse a create body and validate it at `stage`; parse problems are returned as they are."""
    body, found = parse_create(raw)
    if body is None:
        return found
    sent = sent_components(body) if stage is not Stage.DRAFT_PUBLISH else None
    kwargs.setdefault("configured_connectors", CONNECTORS)
    return validate_campaign(CampaignDocument.from_create(body), stage, features, sent, **kwargs)


def codes(found: list[Problem]) -> set[tuple[str, str]]:
    return {(problem.code, problem.target) for problem in found}


@dataclass(frozen=True)
class Case:
    """One row of a rule table: a variant of a payload, the stage, and the one expected problem."""

    base: dict[str, Any]
    changes: dict[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    expect: tuple[str, str] | None = None  # (code, target); None: the variant is valid
    stage: Stage = Stage.DRAFT_PUBLISH
    features: frozenset[str] = ALL_FEATURES


def fails(
    case_id: str,
    base: dict[str, Any],
    expect: tuple[str, str],
    changes: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    stage: Stage = Stage.DRAFT_PUBLISH,
    features: frozenset[str] = ALL_FEATURES,
) -> Any:
    return pytest.param(Case(base, changes or {}, drop, expect, stage, features), id=case_id)


def passes(
    case_id: str,
    base: dict[str, Any],
    changes: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    stage: Stage = Stage.DRAFT_PUBLISH,
    features: frozenset[str] = ALL_FEATURES,
) -> Any:
    return pytest.param(Case(base, changes or {}, drop, None, stage, features), id=case_id)


def check(case: Case) -> list[Problem]:
    found = problems(variant(case.base, case.changes, case.drop), case.stage, case.features)
    if case.expect is None:
        assert found == []
    else:
        assert case.expect in codes(found), found
    return found
