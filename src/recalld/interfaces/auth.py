"""The one authentication path of the servers' doors (the HTTP API, its inspector and the
MCP tools over HTTP): ``Authorization: Bearer rk_...`` keys (:mod:`recalld.keys`, read
through ``engine.keys``), a rate limit per key, and a limit on refused keys per address.
While no key exists, requests need none, and only on a loopback address."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from recalld.engine import MemoryEngine
from recalld.interfaces.engines import Engines
from recalld.interfaces.http_errors import ApiError
from recalld.interfaces.http_guards import is_loopback
from recalld.records import ApiKey

FAILED_AUTH_PER_MINUTE = 60
"""Refused keys a client address may send a minute (in bursts of as many) before it gets
429: a client with a real key rarely fails twice, one guessing keys fails thousands of
times."""
ASK_FOR_A_KEY = {"WWW-Authenticate": "Bearer"}
"""The header every 401 carries: the scheme a key is sent with."""


class RateLimiter:
    """A token bucket per key: ``per_minute`` requests a minute, bursts of as many."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        if self.per_minute <= 0:
            return 0.0
        rate = self.per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, then = self._buckets.get(who, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * rate)
            if tokens >= 1.0:
                self._buckets[who] = (tokens - 1.0, now)
                return 0.0
            self._buckets[who] = (tokens, now)
            return (1.0 - tokens) / rate


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key (None when the server runs without keys) and its engine."""

    key: ApiKey | None
    engine: MemoryEngine

    @property
    def admin(self) -> bool:
        return self.key is None or self.key.admin


class Auth:
    """Who a request's ``Authorization`` header makes the caller, against the keys of the
    ``engines``' root store, with ``rate_limit`` requests a minute per key."""

    def __init__(self, engines: Engines, rate_limit: int) -> None:
        self.engines = engines
        self.rate_limit = rate_limit
        self.limiter = RateLimiter(rate_limit)
        self.failures = RateLimiter(FAILED_AUTH_PER_MINUTE)

    def active_keys(self) -> int:
        return self.engines.root.keys.active()

    def authenticate(self, authorization: str | None, client: str, host: str) -> Caller:
        """The caller of a request with this header, from ``client`` (its address: refused
        keys are counted per address), to a server listening on ``host``.

        Raises:
            ApiError: 401 (no key, or an invalid or revoked one), 429 (over the rate, or
                too many refused keys from this address).
        """
        try:
            return self._authenticate(authorization, host)
        except ApiError as exc:
            if exc.status == 401 and authorization and self.failures.take(client) > 0:
                raise ApiError(
                    429,
                    f"too many refused keys from this address (over "
                    f"{FAILED_AUTH_PER_MINUTE} a minute); retry in a minute",
                    {"Retry-After": "60"},
                ) from None
            raise

    def _authenticate(self, authorization: str | None, host: str) -> Caller:
        if not authorization:
            if self.active_keys() == 0 and is_loopback(host):
                self._limit("local")
                return Caller(None, self.engines.root)
            raise ApiError(
                401,
                "missing API key: send 'Authorization: Bearer <key>' (create "
                "one with `recalld keys create --tenant NAME`)",
                ASK_FOR_A_KEY,
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "the Authorization header must read 'Bearer <key>'", ASK_FOR_A_KEY)
        verdict = self.engines.root.keys.verify(token.strip())
        if verdict.key is None:
            raise ApiError(401, verdict.reason, ASK_FOR_A_KEY)
        self._limit(verdict.key.id)
        return Caller(verdict.key, self.engines.get(verdict.key.tenant, verdict.key.shared))

    def _limit(self, who: str) -> None:
        wait = self.limiter.take(who)
        if wait > 0:
            seconds = max(1, int(wait + 0.999))
            raise ApiError(
                429,
                f"rate limit of {self.rate_limit} requests a minute reached; retry in {seconds} s",
                {"Retry-After": str(seconds)},
            )
