"""Take the screenshots docs/console.md shows: each page of the console, driven as a user would.

    python docs/console_screenshots.py     # writes docs/console/*.png (needs Debian's chromium)

It starts the local runtime on a free port with a throwaway home, signs in, asks, opens each page
and saves a PNG per page. Nothing here is a test; tests/e2e/test_console_browser.py is.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "console"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright

    from memtool.demo import ApiClient
    from memtool.runtime.local import LocalRuntime

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home:
        runtime = LocalRuntime(home=Path(home), port=0, root=ROOT, warehouse_scale=0.05).start()
        try:
            base = runtime.api_url or ""
            curator = ApiClient(base, "demo", "mei")
            curator.headers["X-Memtool-Roles"] = "curator,admin"
            model = json.loads((ROOT / "events" / "model_put.json").read_text(encoding="utf-8"))["body"]
            curator.call("PUT", "/model", {"model": json.loads(model)["model"], "expected_version": None})
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
                page = browser.new_page(viewport={"width": 1200, "height": 900}, locale="zh-CN")
                page.set_default_timeout(60_000)
                page.goto(f"{base}/console/")
                page.screenshot(path=str(OUT / "signin.png"))
                page.get_by_test_id("signin-user").fill("mei")
                page.get_by_test_id("signin-roles").fill("curator,admin")
                page.get_by_test_id("signin-submit").click()
                page.get_by_test_id("question").fill("上个月各大区净收入")
                page.get_by_test_id("ask").click()
                page.get_by_test_id("chart").locator("canvas").wait_for()
                page.wait_for_timeout(300)
                page.screenshot(path=str(OUT / "ask.png"), full_page=True)
                page.get_by_test_id("thumbs-up").click()
                page.get_by_test_id("feedback-status").filter(has_text="marked right").wait_for()
                for name in ("memories", "review", "model"):
                    page.get_by_test_id(f"nav-{name}").click()
                    page.wait_for_timeout(800)
                    page.screenshot(path=str(OUT / f"{name}.png"), full_page=name != "model")
                browser.close()
        finally:
            runtime.stop()
    print("\n".join(str(p.relative_to(ROOT)) for p in sorted(OUT.glob("*.png"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
