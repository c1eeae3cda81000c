"""The console's routes: server-rendered pages for the browser and the same data as JSON under `/api`.

Every route but `/healthz` needs the operator (`access.py`): the API takes the bearer token, the pages a
logged-in session, and whatever changes something through a session must carry that session's CSRF token.
Nothing a stranger can fetch shows user data; every page is escaped and forbids scripts and framing.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import jinja2
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from bot.console import views
from bot.console.access import TOKEN_FILE, Access, Session, operator_token
from bot.startup import StartupError
from core.companion import UnknownPersonaError
from knowledge.memory.memory_file import FILE_CATEGORIES
from knowledge.records import Scope

if TYPE_CHECKING:
    from bot.app import App

COOKIE = "companion_console"
# The pages' one stylesheet, inline: the policy allows exactly it by its hash (no file to fetch before logging in).
STYLESHEET = (Path(__file__).parent / "templates" / "console.css").read_text(encoding="utf-8")
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLESHEET.encode()).digest()).decode()
POLICY = (
    f"default-src 'self'; style-src 'sha256-{STYLE_HASH}'; script-src 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
HEADERS = [
    (b"content-security-policy", POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),  # pages show what users said: no copy in caches
]
NOTICES = {
    "edited": "Saved; the old version is in the memory's history.",
    "forgotten": "Forgotten: the memory, what quoted it, and the messages it came from.",
    "user-forgotten": "Everything about that user is forgotten.",
    "retry": "The work runs again as a new job.",
    "discard": "The dead letter is gone.",
}
Handler = Callable[[Request], Awaitable[Response]]


class _SafeHeaders:
    """Adds the security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


@dataclass(frozen=True, slots=True)
class Operator:
    """Who a request comes from: the API's bearer, or a browser session (which must prove its forms)."""

    session: Session | None  # None: the bearer token, which a browser never sends by itself


def console_app(app: App, access: Access) -> Starlette:
    """The console over a built app."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True
    )
    templates = Jinja2Templates(env=environment)

    def operator(request: Request) -> Operator | None:
        if access.bearer_ok(request.headers.get("authorization")):
            return Operator(None)
        session = access.session(request.cookies.get(COOKIE))
        return None if session is None else Operator(session)

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        found = operator(request)
        csrf = found.session.csrf if found and found.session else ""
        context = {"csrf": csrf, "stylesheet": STYLESHEET, **context}
        return templates.TemplateResponse(request, name, context, status_code=status)

    def scope_of(params: FormData | Any) -> Scope:
        persona_id, user_id = params.get("persona"), params.get("user")
        if not persona_id or not user_id:
            raise LookupError("name the user with persona= and user=")
        app.companion.persona(str(persona_id))  # an unknown persona is not a scope
        return Scope(str(persona_id), str(user_id))

    # --- guards -----------------------------------------------------------------------------------------

    def page(handler: Callable[[Request, FormData | None], Awaitable[Response]]) -> Handler:
        """A page: a session (else the login page); a form posted must carry the session's CSRF token."""

        async def guarded(request: Request) -> Response:
            found = operator(request)
            if found is None:
                return RedirectResponse("/login", status_code=303)
            form = None
            if request.method == "POST":
                form = await request.form()
                if found.session is None or not access.same(str(form.get("csrf", "")), found.session.csrf):
                    return PlainTextResponse("This form expired; reload the page and try again.", status_code=403)
            try:
                return await handler(request, form)
            except (LookupError, UnknownPersonaError) as error:
                return render(request, "error.html", 404, message=str(error))
            except views.BadEdit as error:
                return render(request, "error.html", 400, message=str(error))

        return guarded

    def api(handler: Handler) -> Handler:
        """An API call: the bearer token, or a session whose changes carry its CSRF token in `X-CSRF-Token`."""

        async def guarded(request: Request) -> Response:
            found = operator(request)
            if found is None:
                return JSONResponse({"error": "the operator token is needed"}, status_code=401)
            proof = request.headers.get("x-csrf-token", "")
            if request.method != "GET" and found.session and not access.same(proof, found.session.csrf):
                return JSONResponse({"error": "missing or wrong X-CSRF-Token"}, status_code=403)
            try:
                return await handler(request)
            except (LookupError, UnknownPersonaError) as error:
                return JSONResponse({"error": str(error)}, status_code=404)
            except views.BadEdit as error:
                return JSONResponse({"error": str(error)}, status_code=400)

        return guarded

    # --- logging in ---------------------------------------------------------------------------------------

    async def login(request: Request) -> Response:
        client = request.client.host if request.client else "?"
        if request.method == "GET":
            return render(request, "login.html")
        if (wait := access.held_back(client)) > 0:
            return render(request, "login.html", 429, error=f"Too many failed logins; try again in {wait:.0f} s.")
        form = await request.form()
        key = access.log_in(client, str(form.get("token", "")))
        if key is None:
            return render(request, "login.html", 401, error="That is not the operator token.")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    @page
    async def logout(request: Request, form: FormData | None) -> Response:
        access.log_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    # --- pages -----------------------------------------------------------------------------------------

    @page
    async def users_page(request: Request, form: FormData | None) -> Response:
        matching = request.query_params.get("q", "")
        users = await views.scopes(app, matching)
        return render(request, "users.html", users=users, q=matching, max_users=views.MAX_SCOPES)

    def back_to(scope: Scope, done: str) -> Response:
        query = urlencode({"persona": scope.persona_id, "user": scope.user_id, "done": done})
        return RedirectResponse(f"/memories?{query}", status_code=303)

    @page
    async def memories_page(request: Request, form: FormData | None) -> Response:
        scope = scope_of(request.query_params)
        return render(
            request,
            "memories.html",
            scope=scope,
            identities=await views.identities(app, scope),
            portrait=await views.portrait(app, scope),
            memories=await views.memories(app, scope),
            quota=await views.quota(app, scope),
            categories=FILE_CATEGORIES,
            notice=NOTICES.get(request.query_params.get("done", ""), ""),
        )

    @page
    async def replies_page(request: Request, form: FormData | None) -> Response:
        scope = scope_of(request.query_params)
        return render(request, "replies.html", scope=scope, replies=await views.replies(app, scope))

    @page
    async def usage_page(request: Request, form: FormData | None) -> Response:
        return render(request, "usage.html", rows=await views.usage(app))

    @page
    async def work_page(request: Request, form: FormData | None) -> Response:
        return render(
            request,
            "work.html",
            work=await views.work(app),
            notice=NOTICES.get(request.query_params.get("done", ""), ""),
        )

    @page
    async def privacy_page(request: Request, form: FormData | None) -> Response:
        text = "" if form is None else str(form.get("text", ""))
        found = None if form is None else await views.privacy_check(app, text)
        return render(request, "privacy.html", text=text, found=found)

    @page
    async def letter_page(request: Request, form: FormData | None) -> Response:
        letter_id, action = request.path_params["letter_id"], request.path_params["action"]
        done = await (views.retry(app, letter_id) if action == "retry" else views.discard(app, letter_id))
        if not done:
            raise LookupError("that dead letter is gone, or its work cannot be run again (read it, then discard it)")
        return RedirectResponse(f"/work?{urlencode({'done': action})}", status_code=303)

    @page
    async def edit_page(request: Request, form: FormData | None) -> Response:
        assert form is not None
        scope = scope_of(form)
        fields: dict[str, object] = {name: form.get(name) for name in ("content", "category", "importance")}
        fields["shared"] = "shared" in form  # an unticked box is not sent at all
        if await views.edit(app, scope, request.path_params["memory_id"], views.read_change(fields)) is None:
            raise LookupError(f"{scope} has no such memory")
        return back_to(scope, "edited")

    @page
    async def forget_page(request: Request, form: FormData | None) -> Response:
        assert form is not None
        scope = scope_of(form)
        if await views.forget_memory(app, scope, request.path_params["memory_id"]) is None:
            raise LookupError(f"{scope} has no such memory")
        return back_to(scope, "forgotten")

    @page
    async def forget_user_page(request: Request, form: FormData | None) -> Response:
        assert form is not None
        scope = scope_of(form)
        if form.get("confirm") != "yes":
            raise views.BadEdit("tick the box to confirm that everything about this user is to be forgotten")
        await views.forget_user(app, scope)
        return RedirectResponse(f"/?{urlencode({'done': 'user-forgotten'})}", status_code=303)

    # --- the API -----------------------------------------------------------------------------------------

    @api
    async def scopes_api(request: Request) -> Response:
        if request.method == "DELETE":
            return JSONResponse(views.report(await views.forget_user(app, scope_of(request.query_params))))
        return JSONResponse(await views.scopes(app, request.query_params.get("q", "")))

    def of_one_user(view: Callable[[App, Scope], Awaitable[Any]]) -> Handler:
        """A read of one user's (`?persona=P&user=U`) as JSON."""

        @api
        async def read(request: Request) -> Response:
            return JSONResponse(await view(app, scope_of(request.query_params)))

        return read

    @api
    async def usage_api(request: Request) -> Response:
        try:
            days = int(request.query_params.get("days", "7"))
        except ValueError:
            raise views.BadEdit("days must be a whole number") from None
        return JSONResponse(await views.usage(app, days=max(1, min(days, 366))))

    @api
    async def work_api(request: Request) -> Response:
        return JSONResponse(await views.work(app))

    @api
    async def privacy_api(request: Request) -> Response:
        try:
            asked = await request.json()
        except ValueError:
            raise views.BadEdit("the body must be a JSON object with the text") from None
        text = asked.get("text") if isinstance(asked, dict) else None
        return JSONResponse(await views.privacy_check(app, text if isinstance(text, str) else ""))

    @api
    async def letter_api(request: Request) -> Response:
        letter_id = request.path_params["letter_id"]
        done = await (views.retry(app, letter_id) if request.method == "POST" else views.discard(app, letter_id))
        if not done:
            raise LookupError(
                f"no dead letter {letter_id} that can be {'retried' if request.method == 'POST' else 'discarded'}"
            )
        return JSONResponse({"ok": True})

    @api
    async def memory_api(request: Request) -> Response:
        scope, memory_id = scope_of(request.query_params), request.path_params["memory_id"]
        if request.method == "DELETE":
            forgot = await views.forget_memory(app, scope, memory_id)
            if forgot is None:
                raise LookupError(f"{scope} has no memory {memory_id}")
            return JSONResponse(views.report(forgot))
        try:
            fields = await request.json()
        except ValueError:
            raise views.BadEdit("the body must be a JSON object") from None
        if not isinstance(fields, dict):
            raise views.BadEdit("the body must be a JSON object")
        updated = await views.edit(app, scope, memory_id, views.read_change(fields))
        if updated is None:
            raise LookupError(f"{scope} has no memory {memory_id}")
        return JSONResponse(updated)

    routes = [
        Route("/healthz", healthz),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", users_page),
        Route("/memories", memories_page),
        Route("/replies", replies_page),
        Route("/usage", usage_page),
        Route("/work", work_page),
        Route("/privacy-check", privacy_page, methods=["GET", "POST"]),
        Route("/dead-letters/{letter_id}/{action:str}", letter_page, methods=["POST"]),
        Route("/memories/{memory_id}/edit", edit_page, methods=["POST"]),
        Route("/memories/{memory_id}/forget", forget_page, methods=["POST"]),
        Route("/forget-user", forget_user_page, methods=["POST"]),
        Route("/api/scopes", scopes_api, methods=["GET", "DELETE"]),
        Route("/api/memories", of_one_user(views.memories)),
        Route("/api/profile", of_one_user(views.portrait)),
        Route("/api/replies", of_one_user(views.replies)),
        Route("/api/usage", usage_api),
        Route("/api/quota", of_one_user(views.quota)),
        Route("/api/work", work_api),
        Route("/api/privacy-check", privacy_api, methods=["POST"]),
        Route("/api/dead-letters/{letter_id}", letter_api, methods=["DELETE"]),
        Route("/api/dead-letters/{letter_id}/retry", letter_api, methods=["POST"]),
        Route("/api/memories/{memory_id}", memory_api, methods=["PATCH", "DELETE"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_SafeHeaders)])


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the command that runs it stops it (see `Console.serve`)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Console:
    """The console bound to its address, ready to serve."""

    def __init__(self, app: App, host: str, port: int) -> None:
        self.token, self.new_token = operator_token(app.settings)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, port), family=family)
        except OSError as error:
            raise StartupError(f"the console cannot listen on {host}:{port} ({error.strerror})") from error
        bound = self._socket.getsockname()[1]
        self.url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}/"
        self.access = Access(self.token)
        config = uvicorn.Config(console_app(app, self.access), log_level="warning", access_log=False, lifespan="off")
        self._server = _Server(config)

    def announcement(self, data_dir: Path) -> str:
        """What the operator is told at start: the address, and the token the first time it exists."""
        if self.new_token:
            return f"console: {self.url} (operator token, shown once: {self.token}; kept in {data_dir / TOKEN_FILE})"
        return f"console: {self.url} (log in with COMPANION_WEB_TOKEN, or the token kept in {data_dir / TOKEN_FILE})"

    async def serve(self) -> None:
        """Serve until cancelled; then stop taking requests, finish the ones under way, and close."""
        serving = asyncio.ensure_future(self._server.serve(sockets=[self._socket]))
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            self._server.should_exit = True
            await serving
            raise
        finally:
            self._socket.close()
