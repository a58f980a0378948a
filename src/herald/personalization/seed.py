"""Example personalization resources for the demo workspace: one of each kind."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from herald.personalization import resources

FOOTER = (
    '<p style="font-size:12px;color:#666">You receive this because you are a member, '
    "{{ UserAttribute['first_name'] | default('friend') }}. "
    '<a href="https://example.com/preferences">Manage preferences</a></p>'
)
BESTSELLERS = [
    {"title": "Trail Runner 2", "price": 89.0, "url": "https://example.com/p/trail-runner-2"},
    {"title": "City Backpack", "price": 59.0, "url": "https://example.com/p/city-backpack"},
    {"title": "Merino Beanie", "price": 25.0, "url": "https://example.com/p/merino-beanie"},
]
WELCOME_EMAIL = {
    "subject": "Welcome, {{ UserAttribute['first_name'] | default('there') }}!",
    "html_content": (
        "<h1>Hello {{ user.first_name | default('there') }}</h1>"
        "<p>Our bestsellers this week:</p><ul>"
        "{% for item in ProductSet['bestsellers'] %}"
        '<li><a href="{{ item.url }}">{{ item.title }}</a> — {{ "%.2f" | format(item.price) }} EUR</li>'
        "{% endfor %}</ul>"
        "{{ ContentBlock['footer'] }}"
    ),
}
PROMO_PUSH = {
    "basic_details": {
        "title": "{{ user.first_name | default('Hi') }}, {{ ProductSet['bestsellers'][0].title }} is back",
        "message": "Now {{ ProductSet['bestsellers'][0].price }} EUR. {{ ContentBlock['signature'] }}",
    }
}


async def seed_examples(session: AsyncSession, now: datetime, workspace_id: str) -> None:
    """Content blocks `footer` (HTML) and `signature` (text), product set `bestsellers`, content API
    `weather` (a public forecast API), and custom templates `welcome_email` (EMAIL) and `promo_push`
    (PUSH)."""
    await resources.create_content_block(session, now, workspace_id, "footer", FOOTER, "html")
    await resources.create_content_block(session, now, workspace_id, "signature", "— The Herald team")
    await resources.create_product_set(session, now, workspace_id, "bestsellers", BESTSELLERS)
    await resources.create_content_api(
        session,
        now,
        workspace_id,
        "weather",
        "https://api.open-meteo.com/v1/forecast?latitude={{ user.latitude | default(48.85) }}"
        "&longitude={{ user.longitude | default(2.35) }}&current_weather=true",
        timeout_seconds=2.0,
    )
    await resources.create_custom_template(
        session, now, workspace_id, "welcome_email", "EMAIL", WELCOME_EMAIL
    )
    await resources.create_custom_template(session, now, workspace_id, "promo_push", "PUSH", PROMO_PUSH)
