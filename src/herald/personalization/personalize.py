"""Personalizing campaign content for one user: the use case preview (and test sends) build on.

1. `prepare` (in a read session): syntax of every text, custom templates filled in, and the content
   blocks, product sets and content APIs the texts name loaded — 400 for what the request got wrong.
2. `personalize` (no session held): content APIs called, then every text rendered in a worker thread
   with one budget — 422 when a template fails or exceeds a limit for this user.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread
import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from herald.errors import Unprocessable, ValidationFailed
from herald.personalization import content_api, fields, resources
from herald.personalization.compiling import Reference, TemplateInvalid, check_template, compile_template
from herald.personalization.content_api import ApiConfig, Resolver
from herald.personalization.limits import DEFAULT_LIMITS, Limits, RenderFailed, RenderLimitExceeded
from herald.personalization.render import Block, RenderData, Renderer
from herald.personalization.state import Missing
from herald.problems import Problem

# Content API URLs are small templates written by the workspace's admins.
URL_LIMITS = Limits(steps=10_000, seconds=0.25, output_chars=8_000, field_chars=4_000, value_size=4_000)


@dataclass(frozen=True, slots=True)
class Prepared:
    content: dict[str, Any]  # campaign_content, custom templates filled in
    blocks: Mapping[str, Block]
    product_sets: Mapping[str, Any]
    apis: Mapping[str, ApiConfig]
    # Its texts with an expression, in the order they render (`texts_to_render`).
    expressions: tuple[Expression, ...] = ()


@dataclass(frozen=True, slots=True)
class Expression:
    """A text of `content["content"]` to render: where it is, the field it is (for problems and
    missing values) and whether it is HTML."""

    path: fields.Path  # below `content["content"]`
    text: str
    field: str
    html: bool


def texts_to_render(content: dict[str, Any]) -> tuple[Expression, ...]:
    """Each text of the content with an expression, found once per prepared content: a content
    rendered for thousands of users is walked once, not once per user."""
    root = len(fields.CONTENT_ROOT)
    return tuple(
        Expression(path[root:], text, fields.dotted(path), fields.is_html(path))
        for path, text in fields.texts(content.get("content"))
        if fields.has_expression(text)
    )


@dataclass(frozen=True, slots=True)
class Personalized:
    content: dict[str, Any]
    missing: list[Missing]


def syntax_problems(content: Any) -> list[Problem]:
    """INVALID_TEMPLATE for every text of `campaign_content` (raw JSON) that does not parse."""
    inner = content.get("content") if isinstance(content, dict) else None
    problems: list[Problem] = []
    for path, text in fields.texts(inner):
        if fields.has_expression(text):
            message = check_template(text)
            if message is not None:
                problems.append(Problem("INVALID_TEMPLATE", fields.dotted(path), message))
    return problems


def _version(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


async def custom_templates(
    session: AsyncSession, workspace_id: str, channel: str, campaign_content: Mapping[str, Any]
) -> tuple[dict[fields.Path, dict[str, Any]], list[Problem]]:
    """The body of the custom template each message object of `campaign_content` (JSON) names, by
    the object's path from the body root; and the templates (and versions) it names that the
    workspace does not hold for `channel`: what `prepare` refuses, so what publishing and test
    sends refuse (the engine prepares the content the same way when the campaign starts)."""
    bodies: dict[fields.Path, dict[str, Any]] = {}
    problems: list[Problem] = []
    for path, target in fields.template_slots(campaign_content.get("content")):
        template_id = target["custom_template_id"]
        raw_version = target.get("custom_template_version")
        version = _version(raw_version)
        if raw_version is not None and version is None:
            problems.append(
                Problem(
                    "INVALID_TYPE",
                    fields.dotted((*path, "custom_template_version")),
                    "Expected a version number.",
                )
            )
            continue
        template = await resources.load_custom_template(session, workspace_id, template_id, version)
        if template is None or template.channel != channel:
            which = f"version {version} of " if version is not None else ""
            problems.append(
                Problem(
                    "INVALID_TEMPLATE_ID",
                    fields.dotted((*path, "custom_template_id")),
                    f"There is no {which}{channel} custom template '{template_id}' in this workspace.",
                )
            )
            continue
        bodies[path] = template.body
    return bodies, problems


async def _fill_templates(
    session: AsyncSession,
    workspace_id: str,
    channel: str,
    content: dict[str, Any],
    loaded: dict[fields.Path, dict[str, Any]] | None = None,
) -> list[Problem]:
    if loaded is None:
        bodies, problems = await custom_templates(session, workspace_id, channel, content)
    else:
        bodies, problems = loaded, []
    for path, target in list(fields.template_slots(content.get("content"))):
        if path in bodies:
            fields.fill_from(target, bodies[path])
    return problems


def _references(sources: Iterable[str]) -> set[Reference]:
    found: set[Reference] = set()
    for source in sources:
        if fields.has_expression(source):
            try:
                found |= compile_template(source).references
            except TemplateInvalid:
                continue  # reported when it is rendered
    return found


async def prepare(
    session: AsyncSession,
    workspace_id: str,
    channel: str,
    campaign_content: dict[str, Any],
    templates: dict[fields.Path, dict[str, Any]] | None = None,
) -> Prepared:
    """Check and complete the content, and load the workspace resources its texts name.
    `templates`: the bodies `custom_templates` read for this content, its problems already
    answered by the caller (a test send checks them first): not read again."""
    content = copy.deepcopy(campaign_content)
    problems = syntax_problems(content)
    problems += await _fill_templates(session, workspace_id, channel, content, templates)
    if problems:
        raise ValidationFailed(problems)
    references = _references(text for _, text in fields.texts(content.get("content")))
    # Blocks may name blocks (and anything else); follow them as deep as they may nest.
    blocks: dict[str, Block] = {}
    for _ in range(DEFAULT_LIMITS.block_depth + 1):
        wanted = {ref.name for ref in references if ref.kind == "ContentBlock"} - set(blocks)
        if not wanted:
            break
        found = await resources.load_blocks(session, workspace_id, wanted)
        blocks |= found
        references |= _references(block.body for block in found.values())
    apis = await resources.load_content_apis(
        session, workspace_id, {ref.name for ref in references if ref.kind == "ContentApi"}
    )
    references |= _references(api.url for api in apis.values())
    product_sets = await resources.load_product_sets(
        session, workspace_id, {ref.name for ref in references if ref.kind == "ProductSet"}
    )
    return Prepared(content, blocks, product_sets, apis, texts_to_render(content))


def _api_calls(
    prepared: Prepared, user: Mapping[str, Any], event: Mapping[str, Any]
) -> dict[str, tuple[ApiConfig, str]]:
    renderer = Renderer(RenderData(user, event, {}, {}, {}), URL_LIMITS)
    calls: dict[str, tuple[ApiConfig, str]] = {}
    for name, api in prepared.apis.items():
        try:
            url = (
                renderer.render(api.url, name, quote_outputs=True)
                if fields.has_expression(api.url)
                else api.url
            )
        except (TemplateInvalid, RenderLimitExceeded, RenderFailed):
            continue  # the API's value stays missing
        calls[name] = (api, url)
    return calls


def _render_all(
    prepared: Prepared, data: RenderData, limits: Limits, renderer: Renderer | None = None
) -> tuple[dict[str, Any], list[Missing], list[Problem]]:
    """Every text of `prepared.expressions` rendered for `data`, in a copy of the content that
    shares with `prepared.content` (and with other users' copies) every part that holds none of
    them: renders are read, never written (`SendPlan._message` copies a message before tagging
    it). Walking and copying the whole content per user was about 7 % of the engine's samples in
    batched mode (benchmarks/README.md, the twelfth pass). `renderer`: one of `limits` to reuse
    (moved on to `data`), for many users of one content."""
    if renderer is None:
        renderer = Renderer(data, limits)
    else:
        renderer.start(data)
    problems: list[Problem] = []
    rendered: list[tuple[fields.Path, str]] = []
    for expression in prepared.expressions:
        try:
            text = renderer.render(expression.text, expression.field, html=expression.html)
        except RenderLimitExceeded as exc:
            problems.append(Problem("RENDER_LIMIT_EXCEEDED", expression.field, str(exc)))
            # The budget is shared: nothing more can be rendered, and nothing rendered is kept.
            return dict(prepared.content), renderer.missing, problems
        except (RenderFailed, TemplateInvalid) as exc:
            problems.append(Problem("TEMPLATE_RENDER_FAILED", expression.field, str(exc)))
            continue
        rendered.append((expression.path, text))
    content = dict(prepared.content)
    if rendered:
        content["content"] = _with_texts(prepared.content["content"], rendered)
    return content, renderer.missing, problems


def _with_texts(tree: Any, rendered: list[tuple[fields.Path, str]]) -> Any:
    """`tree` with each (path, text) of `rendered` in place, copying only the containers on the
    way to them."""
    top = _shallow(tree)
    copied = {id(tree): top}
    for path, text in rendered:
        node = top
        for key in path[:-1]:
            child = node[key]
            mine = copied.get(id(child))
            if mine is None:
                mine = copied[id(child)] = _shallow(child)
                node[key] = mine
            node = mine
        node[path[-1]] = text
    return top


def _shallow(container: Any) -> Any:
    return dict(container) if isinstance(container, dict) else list(container)


# Most contents render in well under a millisecond, less than a hop to a worker thread costs: they
# are rendered on the event loop within this small budget. One that needs more is rendered again,
# with its whole budget, on a worker thread, which keeps the event loop serving while it runs. Every
# limit of the small budget is at most the whole one's, so a render that stays within it gives what
# the whole budget would.
INLINE_STEPS = 2_000
INLINE_SECONDS = 0.002


async def _rendered(
    prepared: Prepared, data: RenderData, limits: Limits
) -> tuple[dict[str, Any], list[Missing], list[Problem]]:
    inline = replace(
        limits, steps=min(limits.steps, INLINE_STEPS), seconds=min(limits.seconds, INLINE_SECONDS)
    )
    rendered = _render_all(prepared, data, inline)
    if not any(problem.code == "RENDER_LIMIT_EXCEEDED" for problem in rendered[2]):
        return rendered
    return await anyio.to_thread.run_sync(_render_all, prepared, data, limits)


async def personalize(
    prepared: Prepared,
    user: Mapping[str, Any],
    event: Mapping[str, Any],
    *,
    limits: Limits = DEFAULT_LIMITS,
    resolver: Resolver = content_api.system_resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Personalized:
    """Every text of the prepared content rendered for `user` and `event`."""
    answers = await content_api.fetch_all(_api_calls(prepared, user, event), resolver, transport)
    data = RenderData(user, event, prepared.blocks, prepared.product_sets, answers)
    content, missing, problems = await _rendered(prepared, data, limits)
    if problems:
        target = problems[0].target if len(problems) == 1 else None
        raise Unprocessable(
            "The content cannot be personalized for this user.", target=target, details=problems
        )
    return Personalized(content, missing)


@dataclass(frozen=True, slots=True)
class PartlyRendered:
    """Texts that failed to render for this user (`error` says which and why, `failed` where
    they are, below `content["content"]`), each alone: every other text is rendered in `content`
    (the failed ones as written), so a part of the content holding none of them, such as one
    platform's message of several, can still be sent."""

    content: dict[str, Any]
    failed: tuple[fields.Path, ...]
    error: Unprocessable


def _outcome(
    prepared: Prepared, rendered: tuple[dict[str, Any], list[Missing], list[Problem]]
) -> Personalized | PartlyRendered | Unprocessable:
    content, missing, problems = rendered
    if problems:
        target = problems[0].target if len(problems) == 1 else None
        error = Unprocessable(
            "The content cannot be personalized for this user.", target=target, details=problems
        )
        if any(problem.code != "TEMPLATE_RENDER_FAILED" for problem in problems):
            return error  # a budget exceeded: nothing rendered is kept
        where = {expression.field: expression.path for expression in prepared.expressions}
        failed = [where.get(problem.target) for problem in problems]
        if any(path is None for path in failed):
            return error  # a failure that is no one text's: nothing is kept
        return PartlyRendered(content, tuple(path for path in failed if path is not None), error)
    return Personalized(content, missing)


async def personalize_many(
    items: Sequence[tuple[Prepared, Mapping[str, Any], Mapping[str, Any]]],
    *,
    limits: Limits = DEFAULT_LIMITS,
    resolver: Resolver = content_api.system_resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Personalized | PartlyRendered | Unprocessable]:
    """`personalize` for many (content, user, event) triples, each with its own budget: on the
    event loop within the small budget of `_rendered`, and those of a content that needs more in
    one worker-thread hop (a delivery window renders hundreds, each firing of an event-triggered
    campaign with its own event). Each item's outcome is its content, or why it cannot be
    rendered (with what could be, `PartlyRendered`).

    Why on the loop: its callers are the delivery engine's, whose loop does nothing but deliver,
    and a batch of short contents renders in a few milliseconds. On a worker thread (every batch,
    before), the engine's thread waited for the interpreter each time it let it go for SQLite or
    a digest while a batch rendered there: 7 % of the engine thread's samples (py-spy `--native`,
    benchmarks/README.md, the twenty-eighth pass)."""
    datas: list[RenderData] = []
    for prepared, user, event in items:
        answers = (
            await content_api.fetch_all(_api_calls(prepared, user, event), resolver, transport)
            if prepared.apis
            else {}
        )
        datas.append(RenderData(user, event, prepared.blocks, prepared.product_sets, answers))
    inline = replace(
        limits, steps=min(limits.steps, INLINE_STEPS), seconds=min(limits.seconds, INLINE_SECONDS)
    )
    outcomes: list[Personalized | PartlyRendered | Unprocessable | None] = []
    # One renderer per content: the items of a delivery batch share theirs.
    renderers: dict[int, Renderer] = {}
    slow: set[int] = set()  # contents one of whose renders went beyond the small budget
    for (prepared, _, _), data in zip(items, datas, strict=True):
        if id(prepared) in slow:
            outcomes.append(None)
            continue
        renderer = renderers.get(id(prepared))
        if renderer is None:
            renderer = renderers[id(prepared)] = Renderer(data, inline)
        rendered = _render_all(prepared, data, inline, renderer)
        if any(problem.code == "RENDER_LIMIT_EXCEEDED" for problem in rendered[2]):
            slow.add(id(prepared))  # it and the rest of its content: on a worker thread
            outcomes.append(None)
            continue
        outcomes.append(_outcome(prepared, rendered))
    left = [index for index, outcome in enumerate(outcomes) if outcome is None]
    if left:

        def render_left() -> list[Personalized | PartlyRendered | Unprocessable]:
            whole: dict[int, Renderer] = {}
            done: list[Personalized | PartlyRendered | Unprocessable] = []
            for index in left:
                prepared, data = items[index][0], datas[index]
                renderer = whole.get(id(prepared))
                if renderer is None:
                    renderer = whole[id(prepared)] = Renderer(data, limits)
                done.append(_outcome(prepared, _render_all(prepared, data, limits, renderer)))
            return done

        for index, outcome in zip(left, await anyio.to_thread.run_sync(render_left), strict=True):
            outcomes[index] = outcome
    return [outcome for outcome in outcomes if outcome is not None]
