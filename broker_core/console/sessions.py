"""Who is using the console: sessions, logins and their CSRF tokens.

Contract:

* **The cookie holds a session id only**, signed (Starlette's ``SessionMiddleware``,
  itsdangerous) with a key made at start-up: a restart ends every session.
* **A secret key stays in this process's memory**, inside the user's
  :class:`RocketMQClient` (which signs requests with it and never shows it); it is never
  written to the cookie, a page, an API answer or a log line.
* **Every call is made as the logged-in user**: the broker decides what each may do.
  With authentication off on the brokers, every visitor shares one anonymous client.
* **Writes need the session's CSRF token** (header ``X-CSRF-Token``): a cross-site page
  can make the browser send the cookie but cannot read the token.
* Sessions idle for ``idle_timeout_s`` are dropped (and their client closed).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.client import RocketMQClient
from broker_core.console.targets import Targets
from broker_core.errors import RocketMQError, UnauthorizedError

MakeClient = Callable[[str | None, str | None], RocketMQClient]


@dataclass
class Session:
    sid: str
    csrf: str
    access_key: str | None = None
    targets: Targets | None = None  # the user's own client, once logged in
    last_seen: float = field(default_factory=time.monotonic)

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf)


class Sessions:
    """The console's sessions and the anonymous client (authentication off)."""

    def __init__(self, make_client: MakeClient, *, idle_timeout_s: float = 3600.0) -> None:
        self._make_client = make_client
        self.idle_timeout_s = idle_timeout_s
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._anonymous = Targets(make_client(None, None))
        self._auth_required: bool | None = None

    def auth_required(self) -> bool:
        """True when the brokers refuse an unsigned call (asked until they answer)."""
        if self._auth_required is None:
            try:
                self._anonymous.client.health()
                self._auth_required = False
            except UnauthorizedError:
                self._auth_required = True
            except RocketMQError:
                return False  # unreachable now: its calls will say so; ask again later
        return self._auth_required

    @property
    def login_needed(self) -> bool:
        """What :meth:`auth_required` found last (False until the brokers answered)."""
        return bool(self._auth_required)

    def get_or_new(self, sid: str | None) -> Session:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            session = self._sessions.get(sid or "")
            if session is None:
                session = Session(secrets.token_urlsafe(24), secrets.token_urlsafe(24))
                self._sessions[session.sid] = session
            session.last_seen = now
            return session

    def _expire(self, now: float) -> None:
        for sid, s in list(self._sessions.items()):
            if now - s.last_seen > self.idle_timeout_s:
                del self._sessions[sid]
                if s.targets is not None:
                    s.targets.client.close()

    def targets(self, session: Session) -> Targets | None:
        """The clients ``session`` may use: its own, or the anonymous ones when the brokers
        need no authentication; None when it must log in first."""
        if session.targets is not None:
            return session.targets
        return None if self.auth_required() else self._anonymous

    def login(self, session: Session, access_key: str, secret_key: str) -> Session:
        """Check the keys with one signed call (Health; UnauthorizedError if refused) and
        return a new session for the user: a new id and CSRF token, so an id planted
        before the login is worth nothing after it. ``session`` ends."""
        client = self._make_client(access_key, secret_key)
        try:
            client.health()
        except RocketMQError:
            client.close()
            raise
        fresh = Session(
            secrets.token_urlsafe(24), secrets.token_urlsafe(24), access_key, Targets(client)
        )
        with self._lock:
            self._sessions[fresh.sid] = fresh
        self.logout(session)
        return fresh

    def logout(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.sid, None)
        if session.targets is not None:
            session.targets.client.close()

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            if s.targets is not None:
                s.targets.client.close()
        self._anonymous.client.close()
