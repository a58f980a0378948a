"""Calling a workspace's content APIs without letting a template reach what it must not.

- Only APIs configured for the workspace are called, by name; the URL may personalize its path and
  query (each expression's output is percent-encoded, so it cannot change the host).
- The host is resolved first and every address checked: private, loopback, link-local, reserved,
  multicast and other non-global targets are refused unless the API has `allow_private`. The request
  then goes to the checked address (Host header and TLS server name kept), so a second DNS answer
  cannot swap the target.
- Redirects are not followed; proxies from the environment are not used.
- A total timeout (at most 5 s), a size cap on the answer, and the answer must be JSON.
Any failure leaves the API's value missing (reported), never an error of the request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

log = logging.getLogger("herald.personalization")

MAX_TIMEOUT_SECONDS = 5.0
MAX_RESPONSE_BYTES = 256 * 1024
MAX_CALLS_PER_RENDER = 10

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)")


@dataclass(frozen=True, slots=True)
class ApiConfig:
    name: str
    url: str  # may hold expressions in its path and query
    headers: Mapping[str, str]
    timeout: float
    allow_private: bool = False


class FetchFailed(Exception):
    """The API could not give a usable answer; its value stays missing."""


def url_problems(url: str) -> list[str]:
    """What is wrong with a content API URL as configured (empty when it is acceptable)."""
    match = _AUTHORITY.match(url)
    if match is None or match["scheme"].lower() not in ("http", "https"):
        return ["The URL must start with http:// or https://."]
    if not match["authority"] or any(mark in match["authority"] for mark in "{}%"):
        return ["The URL's host must be written out; expressions may appear in its path and query only."]
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return [f"The URL is not valid: {exc}."]
    return [] if parsed.host else ["The URL has no host."]


def is_public(address: IPAddress) -> bool:
    """True for a globally routable unicast address (IPv4 embedded in IPv6 is checked as IPv4)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None and not is_public(embedded):
            return False
    return address.is_global and not address.is_multicast


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def _target(
    url: httpx.URL, allow_private: bool, resolver: Resolver
) -> tuple[httpx.URL, dict[str, Any]]:
    """The URL to request (pinned to a checked address) and the request extensions it needs."""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(text.split("%", 1)[0]) for text in await resolver(url.host, port)]
    except (OSError, ValueError) as exc:
        raise FetchFailed(f"{url.host} could not be resolved: {exc}") from None
    if not addresses:
        raise FetchFailed(f"{url.host} could not be resolved.")
    if allow_private:
        return url, {}
    refused = [address for address in addresses if not is_public(address)]
    if refused:
        raise FetchFailed(f"{url.host} resolves to {refused[0]}, which is not a public address.")
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=str(addresses[0])), extensions


async def fetch(
    api: ApiConfig,
    url_text: str,
    resolver: Resolver = system_resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Any:
    """The JSON the API answers at `url_text` (the rendered URL); raises FetchFailed."""
    problems = url_problems(url_text)
    if problems:
        raise FetchFailed(problems[0])
    url = httpx.URL(url_text)
    timeout = min(api.timeout, MAX_TIMEOUT_SECONDS)
    try:
        async with asyncio.timeout(timeout):
            target, extensions = await _target(url, api.allow_private, resolver)
            headers = {**api.headers, "Host": url.netloc.decode("ascii"), "Accept": "application/json"}
            async with (
                httpx.AsyncClient(
                    follow_redirects=False, trust_env=False, timeout=timeout, transport=transport
                ) as client,
                client.stream("GET", target, headers=headers, extensions=extensions) as response,
            ):
                if not 200 <= response.status_code < 300:
                    raise FetchFailed(f"The API answered HTTP {response.status_code}.")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise FetchFailed(f"The answer is larger than {MAX_RESPONSE_BYTES} bytes.")
    except TimeoutError:
        raise FetchFailed(f"The API did not answer within {timeout:g} s.") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"The request failed: {exc}") from None
    try:
        return orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        raise FetchFailed("The answer is not JSON.") from None


async def fetch_all(
    calls: Mapping[str, tuple[ApiConfig, str]],
    resolver: Resolver = system_resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Answers by API name, fetched concurrently; failed APIs are left out (and logged)."""
    results: dict[str, Any] = {}

    async def one(name: str, api: ApiConfig, url: str) -> None:
        try:
            results[name] = await fetch(api, url, resolver, transport)
        except FetchFailed as exc:
            log.info("content API %r not used: %s", name, exc)
        except Exception:  # a misbehaving API must not fail the request
            log.exception("content API %r failed unexpectedly", name)

    async with asyncio.TaskGroup() as group:
        for name, (api, url) in list(calls.items())[:MAX_CALLS_PER_RENDER]:
            group.create_task(one(name, api, url))
    return results
