"""The console's built files (console/, built into runtime/console_files/), served by the local runtime at
/console/ (docs/console.md). Only GET and HEAD, only files inside that folder; any other path
under /console/ is the page itself (its routes are in the URL's fragment), but config.json, which
tells the page to sign in with the local runtime's identity headers."""

from __future__ import annotations

import json
from pathlib import Path

from memtool.runtime.local_api import ApiResponse

CONSOLE_DIR = Path(__file__).resolve().parent / "console_files"
PREFIX = "/console"
# On AWS `memtool aws console` uploads a config.json that says "cognito" (memtool.deploy.console).
LOCAL_CONFIG = {"sign_in": "local"}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
# The page calls the same origin's API only; ECharts sets element styles from script. On AWS the
# distribution sends the same policy, with the sign-in domain in connect-src (template.yaml).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def console_response(method: str, path: str) -> ApiResponse | None:
    """The answer for a console path, or None when ``path`` is not the console's."""
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        return None
    if method not in ("GET", "HEAD"):
        return _plain(405, "the console is read with GET", {"Allow": "GET, HEAD"})
    if path == PREFIX:
        return ApiResponse(308, {"Location": PREFIX + "/", "Content-Type": "text/plain; charset=utf-8"}, "")
    index = CONSOLE_DIR / "index.html"
    if not index.is_file():
        return _plain(503, "the console is not built: run `npm ci && npm run build` in console/ (docs/console.md)")
    wanted = path[len(PREFIX) + 1 :]
    if wanted == "config.json":  # how the page signs in: here, the form of local identities
        return ApiResponse(200, {"Content-Type": "application/json", "Cache-Control": "no-cache"}, json.dumps(LOCAL_CONFIG))
    target = (CONSOLE_DIR / wanted).resolve() if wanted else index
    if not target.is_relative_to(CONSOLE_DIR) or not target.is_file():
        if wanted.startswith("assets/"):
            return _plain(404, f"no console file {wanted}")
        target = index  # a page of the console: the page itself
    kind = CONTENT_TYPES.get(target.suffix)
    if kind is None:
        return _plain(404, f"no console file {wanted}")
    headers = {
        "Content-Type": kind,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": cache_control(target.relative_to(CONSOLE_DIR).as_posix()),
    }
    return ApiResponse(200, headers, target.read_text(encoding="utf-8"))


def cache_control(relative_path: str) -> str:
    """A console file's Cache-Control, here and on S3 (memtool.deploy.console): the built assets
    carry their content hash in their name; the page and its config are fetched anew."""
    return "public, max-age=31536000, immutable" if relative_path.startswith("assets/") else "no-cache"


def _plain(status: int, message: str, extra: dict[str, str] | None = None) -> ApiResponse:
    return ApiResponse(status, {"Content-Type": "text/plain; charset=utf-8", **(extra or {})}, message)
