"""`offer_content` and `variation_meta`: content shape, blocks and templates, variants and splits."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

import orjson

from herald.offers.requests import BlockType, ContentBlock, OfferContent, Slots, VariationMeta, VariationType
from herald.problems import Problem, join_path

_SLOT = re.compile(r"^content_[1-9][0-9]{0,2}$")
Path = tuple[str | int, ...]
CONTENT: Path = ("offer_content",)
SPLIT = "variation_meta.smv_distribution.split"


def flat_slots(content: OfferContent) -> Slots:
    return dict(content.model_extra or {})


def blocks(content: OfferContent) -> Iterator[tuple[ContentBlock, Path]]:
    """Every block with its path, in either content form."""
    for slot, block in flat_slots(content).items():
        yield block, (*CONTENT, slot)
    for locale, locale_content in (content.locales or {}).items():
        for variant, slots in locale_content.variations.items():
            for slot, block in slots.items():
                yield block, (*CONTENT, "locales", locale, "variations", variant, slot)


def template_ids(content: OfferContent) -> set[str]:
    """The templates the content names (for loading them before `check_content`)."""
    found: set[str] = set()
    for block, _ in blocks(content):
        template_id = (block.meta or {}).get("templateId")
        if block.type is BlockType.TEMPLATE and isinstance(template_id, str):
            found.add(template_id)
    return found


def check_content(content: OfferContent, templates: Mapping[str, Sequence[str]]) -> list[Problem]:
    """Shape and blocks. `templates` maps the workspace's template ids to their required fields."""
    problems: list[Problem] = []
    flat = flat_slots(content)
    if content.locales is not None and flat:
        problems.append(
            Problem(
                "MUTUALLY_EXCLUSIVE",
                "offer_content.locales",
                "offer_content holds either flat content slots or locales, not both.",
            )
        )
    if content.locales is None:
        problems += _check_slots(flat, CONTENT)
    elif not content.locales:
        problems.append(
            Problem("REQUIRED_FIELD_MISSING", "offer_content.locales", "Name at least one locale.")
        )
    for locale, locale_content in (content.locales or {}).items():
        path = (*CONTENT, "locales", locale, "variations")
        if not locale_content.variations:
            problems.append(
                Problem("REQUIRED_FIELD_MISSING", join_path(*path), "Give at least one variation.")
            )
        for variant, slots in locale_content.variations.items():
            problems += _check_slots(slots, (*path, variant))
    for block, path in blocks(content):
        problems += check_block(block, path, templates)
    return problems


def _check_slots(slots: Slots, path: Path) -> list[Problem]:
    if not slots:
        return [Problem("REQUIRED_FIELD_MISSING", join_path(*path, "content_1"), "'content_1' is required.")]
    return [
        Problem("UNKNOWN_FIELD", join_path(*path, slot), "Content slots are named content_1, content_2, ...")
        for slot in slots
        if not _SLOT.fullmatch(slot)
    ]


def check_block(block: ContentBlock, path: Path, templates: Mapping[str, Sequence[str]]) -> list[Problem]:
    value_path = join_path(*path, "value")
    match block.type:
        case BlockType.JSON:
            if not isinstance(block.value, str):
                return [
                    Problem("INVALID_TYPE", value_path, "A json block's value is a JSON text (a string).")
                ]
            # orjson: RFC 8259 exactly (no NaN or Infinity, no number beyond a double) and depth
            # bounded without recursion (the standard module's parser overflowed the stack on a
            # value of a thousand brackets: a 500).
            try:
                orjson.loads(block.value)
            except ValueError:
                return [Problem("INVALID_TYPE", value_path, "A json block's value must be valid JSON text.")]
            return []
        case BlockType.CONTENT_BLOCK:
            if not isinstance(block.value, str) or not block.value:
                return [
                    Problem("INVALID_TYPE", value_path, "A content_block's value names the block (a string).")
                ]
            return []
        case BlockType.TEMPLATE:
            return _check_template_block(block, path, templates)
    return []  # pragma: no cover - the enum is exhausted above


def _check_template_block(
    block: ContentBlock, path: Path, templates: Mapping[str, Sequence[str]]
) -> list[Problem]:
    problems: list[Problem] = []
    meta = block.meta or {}
    id_path = join_path(*path, "meta", "templateId")
    template_id = meta.get("templateId")
    required: Sequence[str] = ()
    if template_id is None:
        problems.append(Problem("REQUIRED_FIELD_MISSING", id_path, "A template block names its template."))
    elif not isinstance(template_id, str) or template_id not in templates:
        problems.append(
            Problem("INVALID_TEMPLATE_ID", id_path, f"No template {template_id!r} in this workspace.")
        )
    else:
        required = templates[template_id]
    if not isinstance(block.value, dict):
        problems.append(
            Problem("INVALID_TYPE", join_path(*path, "value"), "A template block's value is an object.")
        )
        return problems
    problems += [
        Problem(
            "MISSING_TEMPLATE_FIELD",
            join_path(*path, "value", field),
            f"Template '{template_id}' needs the field '{field}'.",
        )
        for field in required
        if field not in block.value
    ]
    return problems


def check_variation_meta(meta: VariationMeta) -> list[Problem]:
    """What `variation_meta` says on its own: control group, split total, names."""
    problems: list[Problem] = []
    group = meta.control_group
    if group is not None and group.is_enabled:
        if group.percentage is None:
            problems.append(
                Problem(
                    "REQUIRED_FIELD_MISSING",
                    "variation_meta.control_group.percentage",
                    "An enabled control group needs a percentage (1-99).",
                )
            )
        elif group.percentage < 1:
            problems.append(
                Problem(
                    "OUT_OF_RANGE",
                    "variation_meta.control_group.percentage",
                    "An enabled control group's percentage is 1-99.",
                )
            )
    names = meta.variantsPerLocale or []
    if len(set(names)) != len(names):
        problems.append(
            Problem("INVALID_TYPE", "variation_meta.variantsPerLocale", "Variant names must be distinct.")
        )
    distribution = meta.smv_distribution
    if distribution is not None and meta.type is VariationType.DMV:
        problems.append(
            Problem(
                "UNKNOWN_FIELD",
                "variation_meta.smv_distribution",
                "smv_distribution applies to type SMV only; DMV distributes on its own.",
            )
        )
    elif distribution is not None and sum(distribution.split.values()) != 100:
        problems.append(
            Problem(
                "INVALID_SPLIT",
                SPLIT,
                f"Split percentages must add up to 100, not {sum(distribution.split.values())}.",
            )
        )
    return problems


def content_variants(content: OfferContent) -> dict[str, list[str]] | None:
    """Variant names per locale, or None for flat content (a single, unnamed variant)."""
    if content.locales is None:
        return None
    return {locale: list(c.variations) for locale, c in content.locales.items()}


def check_variants(meta: VariationMeta, content: OfferContent) -> list[Problem]:
    """Content variants against `variantsPerLocale`, and SMV split keys against the variants."""
    problems: list[Problem] = []
    declared = meta.variantsPerLocale
    per_locale = content_variants(content)
    variants: list[str] = []
    if per_locale is None:
        if declared is not None and len(declared) != 1:
            problems.append(
                Problem(
                    "VARIANT_COUNT_MISMATCH",
                    "offer_content",
                    f"Flat content is one variant, but variantsPerLocale lists {len(declared)}.",
                )
            )
        variants = list(declared or [])
    else:
        expected = declared if declared is not None else next(iter(per_locale.values()), [])
        for locale, names in per_locale.items():
            if set(names) != set(expected):
                problems.append(
                    Problem(
                        "VARIANT_COUNT_MISMATCH",
                        join_path("offer_content", "locales", locale, "variations"),
                        f"Locale '{locale}' has variants {sorted(names)}; every locale needs {sorted(expected)}.",
                    )
                )
        variants = list(expected)
    if meta.type is VariationType.SMV:
        distribution = meta.smv_distribution
        if distribution is None and variants:
            problems.append(
                Problem(
                    "REQUIRED_FIELD_MISSING",
                    "variation_meta.smv_distribution",
                    "SMV offers with named variants need smv_distribution.split.",
                )
            )
        elif distribution is not None and set(distribution.split) != set(variants):
            problems.append(
                Problem(
                    "SPLIT_KEY_MISMATCH",
                    SPLIT,
                    f"Split keys {sorted(distribution.split)} must be the variants {sorted(variants)}.",
                )
            )
    return problems
