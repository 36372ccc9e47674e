"""Who is asking: bearer tokens, the login session, a trusted proxy header, and CSRF.

Rules (docs/serve.md): off loopback the inbox refuses to start without a token
or a trusted header. Once either is configured every request needs it, loopback
included. The trusted header, like X-Forwarded-For and -Proto, is believed only
from the proxies named by `--forwarded-allow-ips` (addresses or networks; none
by default, and a trusted header without them is refused at start-up), and is
read as UTF-8. Wrong tokens (API or login) are counted and limited per client
address: after `FAILURES_ALLOWED` in `FAILURE_WINDOW` seconds, that address gets
429 on every token it presents until the window has passed.

`BERTH_SERVE_TOKEN` is one token, or several `person:token` pairs separated by
commas; the person a token names is who its answers are recorded as (a bare
token names `token-holder`). The page logs in with a token and keeps
a server-side session behind an HttpOnly, SameSite=Strict cookie; logging out
ends the session. Every form carries a CSRF token: the session's own, or before
login (and on loopback without authentication) a double-submit cookie.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "CSRF_COOKIE",
    "FAILURES_ALLOWED",
    "FAILURE_WINDOW",
    "SESSION_COOKIE",
    "Auth",
    "AuthError",
    "Session",
    "is_loopback",
    "new_csrf",
    "parse_proxies",
    "parse_tokens",
    "same_token",
]

SESSION_COOKIE = "berth_session"
CSRF_COOKIE = "berth_csrf"
SESSION_SECONDS = 12 * 3600
BARE_TOKEN_PERSON = "token-holder"
FAILURES_ALLOWED = 10
FAILURE_WINDOW = 60.0
_FAILING_PEERS = 10_000  # addresses remembered at most
_MIN_TOKEN = 32
_MIN_TOKEN_CHARS = 8
_MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class AuthError(ValueError):
    """A configuration the inbox will not start with (one line)."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a bind address or name) only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(raw: str | Sequence[str] | None) -> tuple[Network, ...]:
    """`--forwarded-allow-ips` as networks: addresses or networks, comma-separated (a bare address is a /32 or /128)."""
    parts = raw.split(",") if isinstance(raw, str) else list(raw or ())
    networks: list[Network] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part.strip("[]"), strict=False))
        except ValueError:
            raise AuthError(
                f"--forwarded-allow-ips: {part[:60]!r} is not an IP address or network "
                "(name your proxy's address, e.g. 127.0.0.1 or 10.0.0.0/24; '*' is not accepted)"
            ) from None
    return tuple(networks)


def parse_tokens(raw: str | None) -> dict[str, str]:
    """`BERTH_SERVE_TOKEN` as {token: person}: one bare token, or `person:token` pairs separated by commas."""
    tokens: dict[str, str] = {}
    if raw is None or not raw.strip():
        return tokens
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        person, sep, token = part.rpartition(":")
        if not sep:
            person, token = BARE_TOKEN_PERSON, part
        person = person.strip()
        if not person or not person.isprintable():
            raise AuthError("BERTH_SERVE_TOKEN: every `person:token` pair needs a printable person name")
        weak = _weakness(token)
        if weak:
            raise AuthError(f"BERTH_SERVE_TOKEN: the token for {person!r} {weak}: make a random one with {_MAKE_TOKEN}")
        if token in tokens:
            raise AuthError(f"BERTH_SERVE_TOKEN: one token is given for both {tokens[token]!r} and {person!r}")
        tokens[token] = person
    return tokens


def _weakness(token: str) -> str | None:
    """Why `token` is too weak to guard the inbox, or None: too short, too few distinct characters, a repeat."""
    if len(token) < _MIN_TOKEN:
        return f"is shorter than {_MIN_TOKEN} characters"
    if len(set(token)) < _MIN_TOKEN_CHARS:
        return f"has fewer than {_MIN_TOKEN_CHARS} different characters"
    if token in (token + token)[1:-1]:  # a shorter piece repeated
        return "repeats a shorter piece"
    return None


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in browser: who, until when, and its CSRF token."""

    person: str
    expires: float
    csrf: str


class Auth:
    """The inbox's authentication settings and its live sessions."""

    def __init__(
        self,
        *,
        tokens: Mapping[str, str] | None = None,
        trusted_header: str | None = None,
        forwarded_allow_ips: str | Sequence[str] | None = None,
        local_person: str = "local",
    ):
        self.tokens = dict(tokens or {})
        self.trusted_header = trusted_header.strip().lower() if trusted_header else None
        self.proxies = parse_proxies(forwarded_allow_ips)
        if self.trusted_header is not None and not self.proxies:
            raise AuthError(
                f"--trusted-header {trusted_header} needs --forwarded-allow-ips naming the proxy that sets it "
                "(e.g. 127.0.0.1 when it runs on this machine): from any other peer the header is not believed"
            )
        self.local_person = local_person
        self.failed_logins = 0
        self.failed_tokens = 0
        self.rate_limited = 0
        self._failures: dict[str, deque[float]] = {}
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether any request needs credentials (a token or a trusted header is configured)."""
        return bool(self.tokens) or self.trusted_header is not None

    @property
    def login_form(self) -> bool:
        """Whether the page offers a login form (tokens are configured)."""
        return bool(self.tokens)

    def check_bind(self, host: str) -> None:
        """Refuse to serve off loopback without authentication."""
        if not is_loopback(host) and not self.required:
            raise AuthError(
                f"refusing to serve on {host} without authentication: "
                "set BERTH_SERVE_TOKEN or pass --trusted-header NAME (or bind to 127.0.0.1)"
            )

    # --- credentials -----------------------------------------------------------------------

    def person_for_token(self, token: str) -> str | None:
        """The person `token` names, compared in constant time against every configured token."""
        found: str | None = None
        given = token.encode()
        for known, person in self.tokens.items():
            if hmac.compare_digest(given, known.encode()):
                found = person
        return found

    def bearer(self, authorization: str | None) -> str | None:
        """The person an `Authorization: Bearer` header names, or None."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        return self.person_for_token(value.strip())

    def trusts(self, peer: str | None) -> bool:
        """Whether `peer` (the address a connection came from) is a proxy named by `--forwarded-allow-ips`."""
        try:
            address = ipaddress.ip_address(peer or "")
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    def from_header(self, headers: Mapping[str, str], peer: str | None) -> str | None:
        """The person the trusted proxy header names, when the connection came from a trusted proxy; or None.

        The header's bytes are read as UTF-8 (HTTP servers hand them over as Latin-1).
        """
        if self.trusted_header is None or not self.trusts(peer):
            return None
        try:
            value = headers.get(self.trusted_header, "").encode("latin-1").decode("utf-8").strip()
        except UnicodeError:
            return None
        return value if value and value.isprintable() and len(value) <= 256 else None

    def presents_token(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header offers a bearer token to check (tokens are configured)."""
        scheme, _, value = (authorization or "").partition(" ")
        return bool(self.tokens) and scheme.lower() == "bearer" and bool(value.strip())

    # --- wrong tokens, per client address ---------------------------------------------------

    def refused_for(self, peer: str) -> float:
        """Seconds until `peer` may present a token again (0: it may now); a refusal is counted."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.get(peer)
            if times is None or len(times) < FAILURES_ALLOWED or now - times[0] >= FAILURE_WINDOW:
                return 0.0
            self.rate_limited += 1
            return FAILURE_WINDOW - (now - times[0])

    def failed(self, peer: str, *, login: bool) -> bool:
        """Count a wrong token from `peer`; whether that reached the limit (it is refused from now on)."""
        now = time.monotonic()
        with self._lock:
            if login:
                self.failed_logins += 1
            else:
                self.failed_tokens += 1
            times = self._failures.pop(peer, None) or deque(maxlen=FAILURES_ALLOWED)
            times.append(now)
            self._failures[peer] = times  # re-inserted: the dict runs from the least recently failing
            if len(self._failures) > _FAILING_PEERS:
                for old in [p for p, t in self._failures.items() if now - t[-1] >= FAILURE_WINDOW]:
                    del self._failures[old]
                while len(self._failures) > _FAILING_PEERS:
                    del self._failures[next(iter(self._failures))]
            return len(times) == FAILURES_ALLOWED and now - times[0] < FAILURE_WINDOW

    # --- sessions --------------------------------------------------------------------------

    def login(self, token: str, peer: str = "?") -> tuple[str, Session] | None:
        """A new session for the person `token` names, or None (and a failed login counted against `peer`)."""
        person = self.person_for_token(token)
        if person is None:
            self.failed(peer, login=True)
            return None
        sid = secrets.token_urlsafe(32)
        session = Session(person, time.time() + SESSION_SECONDS, secrets.token_urlsafe(32))
        with self._lock:
            now = time.time()
            for old in [k for k, s in self._sessions.items() if s.expires < now]:
                del self._sessions[old]
            self._sessions[sid] = session
        return sid, session

    def session(self, sid: str | None) -> Session | None:
        """The live session behind cookie value `sid`, or None."""
        if not sid:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is not None and session.expires < time.time():
                del self._sessions[sid]
                return None
        return session

    def logout(self, sid: str | None) -> None:
        """End the session behind `sid` (nothing if there is none)."""
        if sid:
            with self._lock:
                self._sessions.pop(sid, None)


def new_csrf() -> str:
    """A fresh double-submit CSRF token."""
    return secrets.token_urlsafe(32)


def same_token(a: str | None, b: str | None) -> bool:
    """Constant-time equality of two present tokens."""
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())
