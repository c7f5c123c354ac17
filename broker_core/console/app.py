"""The console's web application (Starlette): HTML pages and the ``/api/...`` JSON API.

Every page has a JSON twin serving the same dict (``views``/``messages``); the pages'
live parts (charts) and every write action call the API from the browser
(``static/console.js``). The API:

=================================  ==========================================================
GET  /api/session                  ``{"user", "auth_required", "csrf"}``
POST /api/login                    ``{"access_key", "secret_key"}`` → the user
POST /api/logout                   ends the session
GET  /api/overview                 broker groups: role, address, version, disk, TPS, health
GET  /api/topics                   topics: type, queues, brokers, message count
POST /api/topics                   create/update: name, queues?, read_queues?,
                                   write_queues?, perm?, message_type?, update?, force?,
                                   broker? (as ``rmq topic create``)
GET  /api/topics/{topic}           config, per-queue offsets and last store time, route
DELETE /api/topics/{topic}         delete it on every broker group holding it
POST /api/topics/{topic}/messages  a test message: body, tag?, keys? (comma-separated)
GET  /api/groups                   groups: settings, total lag
GET  /api/groups/{group}           settings, lag per topic and queue
POST /api/groups/{group}/reset     topic, to (earliest | latest | epoch ms | ISO-8601)
GET  /api/messages                 topic & key | msg_id (& topic) | topic & begin & end
GET  /api/messages/{msg_id}        ?topic= — the message (body as JSON/text/hex), trace
POST /api/messages/{msg_id}/resend topic, group: ResendMessage, a new message for the group
GET  /api/dlq                      dead-letter topics per group with counts
GET  /api/dlq/{group}              its dead letters
POST /api/dlq/{group}/resend       message_id? — one, or all, back to the group
GET  /api/acl                      users (no secrets) and rules
=================================  ==========================================================

Errors answer ``{"error": message, "type": class}`` with 400/401/403/404/409 or 502.
With authentication on, a page without a login redirects to ``/login`` and an API call
answers 401. Every POST and DELETE needs the session's token in ``X-CSRF-Token``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from broker_core.console import reads, writes
from broker_core.console.sessions import Session, Sessions
from broker_core.console.targets import Targets
from broker_core.console.views import ConsumeRates
from broker_core.errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RocketMQError,
    UnauthorizedError,
)

HERE: Final = Path(__file__).parent
STATUS: Final = (
    (UnauthorizedError, 401),
    (PermissionDeniedError, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (InvalidArgumentError, 400),
)
Read = Callable[[Request, Targets, ConsumeRates], dict[str, Any]]
Write = Callable[[Request, Targets, dict[str, Any]], dict[str, Any]]


def http_status(exc: RocketMQError) -> int:
    return next((code for cls, code in STATUS if isinstance(exc, cls)), 502)


def error_json(exc: RocketMQError) -> dict[str, str]:
    return {"error": " ".join(str(exc).split()), "type": type(exc).__name__}


class Console:
    """The application's state: sessions, rates and templates."""

    def __init__(self, sessions: Sessions, vendor_dir: Path | None) -> None:
        self.sessions = sessions
        self.rates = ConsumeRates()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters.update(iso=_iso, backoff=_describe_backoff)
        self.vendor_dir = vendor_dir if vendor_dir and vendor_dir.is_dir() else None

    def session(self, request: Request) -> Session:
        session = self.sessions.get_or_new(request.session.get("sid"))
        request.session["sid"] = session.sid
        return session

    def page(self, template: str, read: Read) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            targets = await run_in_threadpool(self.sessions.targets, session)
            if targets is None:
                return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
            context = self._context(request, session)
            try:
                context["data"] = await run_in_threadpool(read, request, targets, self.rates)
            except RocketMQError as exc:
                context["error"] = error_json(exc)
                return self.templates.TemplateResponse(
                    request, template, context, status_code=http_status(exc)
                )
            return self.templates.TemplateResponse(request, template, context)

        return endpoint

    def _context(self, request: Request, session: Session) -> dict[str, Any]:
        return {
            "user": session.access_key,
            "auth_required": self.sessions.login_needed,
            "csrf": session.csrf,
            "chart_js": self.vendor_dir is not None,
            "data": None,
            "error": None,
            "query": dict(request.query_params),
        }

    def api_read(self, read: Read) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            targets = await run_in_threadpool(self.sessions.targets, session)
            if targets is None:
                return JSONResponse({"error": "log in first", "type": "login"}, 401)
            try:
                return JSONResponse(await run_in_threadpool(read, request, targets, self.rates))
            except RocketMQError as exc:
                return JSONResponse(error_json(exc), http_status(exc))

        return endpoint

    def api_write(self, write: Write) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            if not session.csrf_ok(request.headers.get("x-csrf-token")):
                return JSONResponse({"error": "missing or stale CSRF token", "type": "csrf"}, 403)
            targets = await run_in_threadpool(self.sessions.targets, session)
            if targets is None:
                return JSONResponse({"error": "log in first", "type": "login"}, 401)
            try:
                body = await _json_body(request)
                return JSONResponse(await run_in_threadpool(write, request, targets, body))
            except RocketMQError as exc:
                return JSONResponse(error_json(exc), http_status(exc))

        return endpoint

    async def login_page(self, request: Request) -> Response:
        session = self.session(request)
        if not await run_in_threadpool(self.sessions.auth_required):
            return RedirectResponse("/", status_code=303)
        context = self._context(request, session)
        target = request.query_params.get("next", "/")
        context["query"] = {"next": target if _local_path(target) else "/"}
        return self.templates.TemplateResponse(request, "login.html", context)

    async def login(self, request: Request) -> Response:
        session = self.session(request)
        if not session.csrf_ok(request.headers.get("x-csrf-token")):
            return JSONResponse({"error": "missing or stale CSRF token", "type": "csrf"}, 403)
        try:
            body = await _json_body(request)
            access_key, secret_key = str(body["access_key"]), str(body["secret_key"])
            fresh = await run_in_threadpool(self.sessions.login, session, access_key, secret_key)
        except KeyError:
            return JSONResponse({"error": "give access_key and secret_key", "type": "bad"}, 400)
        except RocketMQError as exc:
            return JSONResponse(error_json(exc), http_status(exc))
        request.session["sid"] = fresh.sid
        return JSONResponse({"user": access_key})

    async def logout(self, request: Request) -> Response:
        session = self.session(request)
        if not session.csrf_ok(request.headers.get("x-csrf-token")):
            return JSONResponse({"error": "missing or stale CSRF token", "type": "csrf"}, 403)
        self.sessions.logout(session)
        request.session.clear()
        return JSONResponse({"user": None})

    async def whoami(self, request: Request) -> Response:
        session = self.session(request)
        return JSONResponse(
            {
                "user": session.access_key,
                "auth_required": self.sessions.login_needed,
                "csrf": session.csrf,
            }
        )


def _local_path(target: str) -> bool:
    """Only a path of this site may follow a login (no open redirect)."""
    return target.startswith("/") and not target.startswith("//") and "\\" not in target


def _iso(ms: int | None) -> str:
    if not ms:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _describe_backoff(b: dict[str, Any]) -> str:
    if b.get("type") == "custom":
        return ",".join(f"{ms}ms" for ms in b["delays_ms"])
    if b.get("type") == "exponential":
        return f"{b['initial_ms']}ms x{b['multiplier']} up to {b['max_ms']}ms"
    return "delay levels"


async def _json_body(request: Request) -> dict[str, Any]:
    if request.method == "DELETE":
        return {}
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise InvalidArgumentError("send the request body as application/json")
    try:
        body = await request.json()
    except ValueError:
        raise InvalidArgumentError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidArgumentError("the request body must be a JSON object")
    return body


def routes(console: Console) -> list[Route | Mount]:
    pages = [Route(path, console.page(template, read)) for path, template, read in reads.PAGES]
    api = [Route("/api" + path, console.api_read(read)) for path, read in reads.API]
    changes = [
        Route("/api" + path, console.api_write(write), methods=[method])
        for method, path, write in writes.WRITES
    ]
    # an editable install (./dev: strict mode) links the package's files: follow the links
    static: list[Route | Mount] = [
        Mount("/static", StaticFiles(directory=HERE / "static", follow_symlink=True))
    ]
    if console.vendor_dir is not None:
        vendor = StaticFiles(directory=console.vendor_dir, follow_symlink=True)
        static.append(Mount("/vendor", vendor))
    return [
        Route("/login", console.login_page),
        Route("/api/login", console.login, methods=["POST"]),
        Route("/api/logout", console.logout, methods=["POST"]),
        Route("/api/session", console.whoami),
        *changes,
        *api,
        *pages,
        *static,
    ]


def create_app(sessions: Sessions, *, vendor_dir: Path | None = None) -> Starlette:
    """The console over ``sessions`` (which make the users' clients)."""
    import secrets

    console = Console(sessions, vendor_dir)
    middleware = [
        Middleware(
            SessionMiddleware,
            secret_key=secrets.token_urlsafe(32),
            session_cookie="rmq_console",
            same_site="strict",
            max_age=None,
        )
    ]
    return Starlette(routes=routes(console), middleware=middleware, lifespan=_closing(sessions))


def _closing(sessions: Sessions) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """A lifespan that closes every session's client when the server stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            sessions.close()

    return lifespan
