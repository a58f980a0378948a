"""Driving a served process with wrk: one Lua script per scenario, and the figures wrk prints.

Every request a script sends is fresh where the contract needs it: `@UUID@` in a path, header or
body becomes a new UUID v4 for each request, `@N@` a number unique in the run (thread id, counter
and a tag of the script and of each wrk run), so creates never collide on a name, a request_id or an
Idempotency-Key. `@POOL@` in the path becomes one id of a pool, the next one for each request of a
thread (the two threads start half a pool apart): a client writing to its own objects, not 32
connections queuing on one row. A consuming script (an archive, a STOP: an id answers once) takes
each id of its pool once, the threads in turns.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

THREADS = 2  # wrk's threads (`-t`); a consuming script interleaves them along its pool

_LUA = r"""
local method, path, body, headers = [==[%(method)s]==], [==[%(path)s]==], %(body)s, {%(headers)s}
local pool = {%(pool)s}
local run, counter, threads, sent = [==[%(run)s]==], 0, 0, 0
local consume, nthreads = %(consume)s, %(threads)d
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function init(args)
  math.randomseed(os.time() * 1000 + (tid or 0) * 7919 + os.clock() * 1e6)
  -- Each wrk run of a script (the warm-up, then the measured run) counts from 1 again: a tag of
  -- the run's own keeps its names apart from the earlier run's (O2 would answer 400 duplicates).
  run = run .. string.format("%%06x", math.random(0, 16777215))
end
local function uuid()
  return (string.gsub("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", "[xy]", function(c)
    return string.format("%%x", c == "x" and math.random(0, 15) or math.random(8, 11))
  end))
end
local function fill(text)
  counter = counter + 1
  local n = run .. "t" .. tostring(tid or 0) .. "n" .. tostring(counter)
  return (string.gsub(string.gsub(text, "@N@", n), "@UUID@", uuid))
end
function request()
  local h = {}
  for name, value in pairs(headers) do h[name] = fill(value) end
  local target = path
  if #pool > 0 then
    sent = sent + 1
    local at = (sent + (tid or 0) * math.floor(#pool / 2)) %% #pool + 1
    if consume then  -- each id once: the threads take turns along the pool
      at = ((sent - 1) * nthreads + (tid or 1) - 1) %% #pool + 1
    end
    target = string.gsub(path, "@POOL@", pool[at])
  end
  return wrk.format(method, fill(target), h, body and fill(body) or nil)
end
"""


def _lua_string(value: str) -> str:
    return f"[==[{value}]==]"


def script(
    method: str,
    path: str,
    headers: dict[str, str],
    body: str | None,
    pool: list[str] | None = None,
    *,
    consume: bool = False,
) -> Path:
    """A wrk script sending `method path` with `headers` and `body` (placeholders filled per request;
    `@POOL@` in the path: the ids of `pool` in turn, each once with `consume`)."""
    lua = _LUA % {
        "consume": "true" if consume else "false",
        "threads": THREADS,
        "pool": ", ".join(_lua_string(item) for item in pool or ()),
        "method": method,
        "path": path,
        "body": _lua_string(body) if body is not None else "nil",
        "headers": ", ".join(f"[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in headers.items()),
        "run": secrets.token_hex(3),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(lua)
    return Path(handle.name)


@dataclass(frozen=True)
class Result:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    errors: int  # socket errors and timeouts


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    assert match is not None, text
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse(output: str) -> Result:
    def find(pattern: str, default: str = "0") -> str:
        match = re.search(pattern, output)
        return match.group(1) if match else default

    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return Result(
        requests_per_second=float(find(r"Requests/sec:\s+([0-9.]+)")),
        p50_ms=_ms(find(r"\s50%\s+([0-9.]+\w+)", "0ms")),
        p99_ms=_ms(find(r"\s99%\s+([0-9.]+\w+)", "0ms")),
        requests=int(find(r"(\d+) requests in")),
        non_2xx=int(find(r"Non-2xx or 3xx responses: (\d+)")),
        errors=sum(int(n) for n in socket_errors.groups()) if socket_errors else 0,
    )


def run(
    url: str,
    lua: Path,
    *,
    seconds: float,
    connections: int,
    threads: int = THREADS,
) -> Result:
    """wrk `-t threads -c connections -d seconds --latency` against `url` with the script."""
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(lua),
        url,
    ]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return parse(output)
