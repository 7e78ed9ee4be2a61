"""The console's committed build (layers/core/memtool/runtime/console_files) is the build of the
sources in console/: its build-info.json records their digest, recomputed here as vite.config.ts
computes it, so a source changed without a rebuild fails (rebuild: cd console && npm ci && npm run
build). A control shows the digest moves with any source byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.support import ROOT

CONSOLE = ROOT / "console"
BUILT = ROOT / "layers" / "core" / "memtool" / "runtime" / "console_files"
SOURCES = ["index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"]


def digest(root: Path, changed: dict[str, bytes] | None = None) -> str:
    files = [*SOURCES, *(f"src/{p.name}" for p in sorted((root / "src").iterdir(), key=lambda p: p.name))]
    hash_ = hashlib.sha256()
    for name in files:
        content = (changed or {}).get(name, (root / name).read_bytes())
        hash_.update(name.encode() + b"\n")
        hash_.update(content)
        hash_.update(b"\n")
    return hash_.hexdigest()


def test_the_committed_build_is_the_build_of_the_sources():
    recorded = json.loads((BUILT / "build-info.json").read_text(encoding="utf-8"))["sources_sha256"]
    assert recorded == digest(CONSOLE), "console/ changed since the build: cd console && npm ci && npm run build"


def test_the_digest_moves_with_any_source_byte():
    assert digest(CONSOLE, {"src/main.ts": (CONSOLE / "src" / "main.ts").read_bytes() + b" "}) != digest(CONSOLE)


def test_the_build_is_what_the_runtime_serves():
    from memtool.runtime.console import CONSOLE_DIR, console_response

    assert BUILT.resolve() == CONSOLE_DIR
    page = console_response("GET", "/console/")
    assert page is not None and page.status == 200 and 'data-testid="nav-ask"' in page.body
    script = next(p.name for p in (BUILT / "assets").iterdir() if p.suffix == ".js")
    asset = console_response("GET", f"/console/assets/{script}")
    assert asset is not None and asset.status == 200 and asset.headers["Content-Type"].startswith("text/javascript")
    index = page.body
    for outside in ("/console/assets/../../console.py", "/console/assets/missing.js"):
        refused = console_response("GET", outside)
        assert refused is not None and refused.status == 404, outside
    for outside in ("/console/../console.py", "/console/../../settings.py", "/console/ask"):  # a page route: the page itself
        answered = console_response("GET", outside)
        assert answered is not None and answered.status == 200 and answered.body == index, outside
    assert console_response("POST", "/console/").status == 405
    assert console_response("GET", "/consolex") is None and console_response("GET", "/ask") is None
