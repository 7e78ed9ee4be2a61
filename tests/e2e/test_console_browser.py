"""The console in a real browser: Debian's headless Chromium driven by Playwright against the local
runtime's /console/ (docs/console.md). A new user signs in, asks and sees a table and a chart
whose canvas has drawn pixels, answers a clarification by clicking an option, asks a follow-up,
teaches a correction, gives a thumbs-up; then an admin approves the resulting few-shot in Review.
No request is made by the test itself except to read back what the clicks stored.

Chromium is Debian's (``apt-get install chromium``; .ci/run installs it, as it installs
PostgreSQL), never a browser downloaded at run time. Without it the tests are skipped, as the
PostgreSQL tests are without a server, except where MEMTOOL_REQUIRE_BROWSER is set (.ci/run sets
it): there a missing browser fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime
from memtool.settings import use_settings
from tests.support import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As the machine's notes say: no background networking (this machine's network is closed).
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip
TIMEOUT_MS = 60_000  # an ask on a loaded 2-core machine


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    served = LocalRuntime(home=tmp_path_factory.mktemp("console") / "home", port=0, root=ROOT, warehouse_scale=0.02).start()
    try:
        yield served
    finally:
        use_settings(served.settings)
        served.stop()


@pytest.fixture(autouse=True)
def _runtime_settings(runtime: LocalRuntime) -> None:
    use_settings(runtime.settings)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        # As the PostgreSQL tests do without a server; CI sets MEMTOOL_REQUIRE_BROWSER, so there they fail instead.
        message = "Chromium is not installed: apt-get install chromium fonts-noto-cjk (.ci/run does it)"
        if os.environ.get("MEMTOOL_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser, runtime: LocalRuntime) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1200, "height": 900}, locale="zh-CN")
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(f"{runtime.api_url}/console/")
    yield opened
    context.close()
    assert errors == [], f"the page raised: {errors}"


def sign_in(page, user: str, roles: str = "", tenant: str = "demo") -> None:
    page.get_by_test_id("signin-tenant").fill(tenant)
    page.get_by_test_id("signin-user").fill(user)
    page.get_by_test_id("signin-roles").fill(roles)
    page.get_by_test_id("signin-submit").click()
    page.get_by_test_id("question").wait_for()


def ask(page, question: str) -> str:
    page.get_by_test_id("question").fill(question)
    page.get_by_test_id("ask").click()
    return answer_status(page)


def answer_status(page) -> str:
    status = page.get_by_test_id("answer-status")
    status.wait_for()
    return status.inner_text()


def drawn_pixels(page) -> int:
    """Pixels the chart's canvas has drawn on (alpha > 0), read back from the canvas itself."""
    page.get_by_test_id("chart").locator("canvas").first.wait_for()
    return page.evaluate(
        """() => {
            const canvas = document.querySelector('[data-testid="chart"] canvas');
            const context = canvas.getContext('2d');
            const { data } = context.getImageData(0, 0, canvas.width, canvas.height);
            let drawn = 0;
            for (let i = 3; i < data.length; i += 4) if (data[i] > 0) drawn++;
            return drawn;
        }"""
    )


def table_rows(page) -> list[list[str]]:
    rows = page.get_by_test_id("answer-table").locator("tbody tr")
    return [row.locator("td").all_inner_texts() for row in rows.all()]


def test_without_a_stored_sign_in_the_console_opens_on_the_sign_in_form(page) -> None:
    assert page.get_by_test_id("signin-submit").is_visible()
    assert page.get_by_label("Tenant").input_value() == "demo"  # labelled inputs
    assert page.get_by_test_id("nav-ask").is_hidden()


def test_a_new_user_asks_sees_a_table_and_a_chart_answers_a_clarification_and_follows_up(page) -> None:
    sign_in(page, "ana")
    assert ask(page, "上个月各大区净收入") == "answered"
    rows = table_rows(page)
    assert len(rows) == 5 and {r[0] for r in rows} == {"华东", "华南", "华北", "西南", "华中"}
    assert drawn_pixels(page) > 2_000
    page.get_by_test_id("chart-candidate").and_(page.locator('[data-type="bar"]')).click()  # another candidate: redrawn
    assert drawn_pixels(page) > 2_000

    assert ask(page, "上个月收入") == "needs_clarification"
    options = page.get_by_test_id("clarification-option")
    assert options.all_inner_texts() == ["销售额", "净收入"]
    options.filter(has_text="净收入").click()
    page.get_by_test_id("answer-status").filter(has_text="answered").wait_for()
    assert len(table_rows(page)) == 1

    assert ask(page, "按渠道呢") == "answered"  # a follow-up in the same session
    rows = table_rows(page)
    assert {r[0] for r in rows} >= {"医院", "电商"}, rows


def test_a_taught_correction_is_used_and_an_admin_approves_the_thumbs_up_few_shot(page, runtime: LocalRuntime) -> None:
    sign_in(page, "bo")
    assert ask(page, "上个月各渠道单子数") in ("needs_clarification", "answered", "failed")
    page.get_by_test_id("correction").fill("单子数就是订单数")
    page.get_by_test_id("teach").click()
    page.get_by_test_id("feedback-status").filter(has_text="Learned").wait_for()

    assert ask(page, "上个月各渠道单子数") == "answered"
    assert page.get_by_test_id("answer-table").locator("th").all_inner_texts() == ["channel", "order_count"]
    page.get_by_test_id("thumbs-up").click()
    page.get_by_test_id("feedback-status").filter(has_text="marked right").wait_for()

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "root", roles="admin")
    page.get_by_test_id("nav-review").click()
    item = page.get_by_test_id("fewshot-item").filter(has_text="上个月各渠道单子数")
    item.wait_for()
    item.get_by_test_id("approve").click()
    item.wait_for(state="detached")

    admin = ApiClient(runtime.api_url or "", "demo", "root")
    admin.headers["X-Memtool-Roles"] = "admin"
    approved = admin.call("GET", "/fewshots?status=approved")
    assert [i["question"] for i in approved.body["items"]] == ["上个月各渠道单子数"], approved.body
    assert approved.body["items"][0]["author"] == "bo" and approved.body["items"][0]["reviewed_by"] == "root"


def test_an_error_is_shown_with_its_message_and_the_page_stays_usable(page) -> None:
    sign_in(page, "cy")
    page.get_by_test_id("question").fill("x" * 2001)  # over the API's 2,000 characters
    page.get_by_test_id("ask").click()
    error = page.get_by_test_id("error")
    error.wait_for()
    assert "400" in error.inner_text() and "question" in error.inner_text()
    assert ask(page, "上个月净收入") == "answered"


def test_a_chart_picked_in_the_console_is_used_and_cited_by_the_next_answer_of_that_shape(page) -> None:
    sign_in(page, "dee")
    assert ask(page, "上个月各大区净收入") == "answered"
    pressed = page.get_by_test_id("chart-candidate").and_(page.locator("[aria-pressed]"))
    assert pressed.get_attribute("data-type") == "horizontal_bar"
    page.get_by_test_id("chart-candidate").and_(page.locator('[data-type="bar"]')).click()
    page.get_by_test_id("chart-choice-status").filter(has_text="Kept: bar for every ranking").wait_for()

    assert ask(page, "上个月各渠道净收入") == "answered"  # another ranking
    assert pressed.get_attribute("data-type") == "bar"
    assert drawn_pixels(page) > 2_000
    page.get_by_test_id("citations").locator("summary").click()
    assert any("chart for a ranking: bar" in text for text in page.get_by_test_id("citations").locator("li").all_inner_texts())


def test_memories_are_listed_by_kind_edited_with_their_version_and_forgotten(page) -> None:
    sign_in(page, "eli")
    assert ask(page, "上个月各渠道单子数") in ("needs_clarification", "answered", "failed")
    page.get_by_test_id("correction").fill("单子数就是订单数")
    page.get_by_test_id("teach").click()
    page.get_by_test_id("feedback-status").filter(has_text="Learned").wait_for()

    page.get_by_test_id("nav-memories").click()
    page.get_by_label("Kind").select_option("correction")
    item = page.get_by_test_id("memory-item").filter(has_text="term.单子数")
    item.wait_for()
    item.get_by_test_id("memory-content").fill("单子数 = 订单数（按订单去重）")
    item.get_by_test_id("memory-save").click()
    edited = page.get_by_test_id("memory-item").filter(has_text="v2")
    edited.wait_for()
    edited.get_by_test_id("memory-history").click()
    versions = edited.get_by_test_id("memory-versions").locator("li")
    versions.nth(1).wait_for()
    assert [t.split(" ", 1)[0] for t in versions.all_inner_texts()] == ["v1", "v2"]
    assert "单子数 = 订单数（按订单去重）" in versions.nth(1).inner_text()

    page.once("dialog", lambda dialog: dialog.accept())
    edited.get_by_test_id("memory-forget").click()
    page.get_by_test_id("memories-empty").wait_for()


def test_a_diagnosis_asked_for_in_the_console_is_confirmed_in_review(page, runtime: LocalRuntime) -> None:
    sign_in(page, "fay")
    assert ask(page, "上个月上海的销售额") == "answered"
    page.get_by_test_id("diagnose").click()
    page.get_by_test_id("feedback-status").filter(has_text="Diagnosis pending_review").wait_for()
    page.get_by_test_id("nav-review").click()
    item = page.get_by_test_id("diagnosis-item").first
    item.wait_for()
    item.get_by_test_id("confirm").click()
    page.get_by_test_id("diagnoses-empty").wait_for()

    user = ApiClient(runtime.api_url or "", "demo", "fay")
    assert user.call("GET", "/diagnoses?status=pending_review").body["items"] == []
    lessons = user.call("GET", "/memories?kind=causal").body["items"]
    assert [m["status"] for m in lessons] == ["active"] and lessons[0]["status_reason"] == "confirmed by fay"


def test_a_curator_accepts_a_users_proposal_in_review(page, runtime: LocalRuntime) -> None:
    curator = ApiClient(runtime.api_url or "", "demo", "gus")
    curator.headers["X-Memtool-Roles"] = "curator"
    shared = curator.call(
        "POST", "/memories", {"kind": "knowledge", "scope": "tenant", "key": "glossary.gmv", "content": "GMV = 含税销售额"}
    ).body["memory"]
    user = ApiClient(runtime.api_url or "", "demo", "hal")
    proposal = user.call("POST", "/proposals", {"target_id": shared["id"], "change": {"content": "GMV = 净收入"}, "reason": "finance"}).body

    sign_in(page, "gus", roles="curator")
    page.get_by_test_id("nav-review").click()
    item = page.get_by_test_id("proposal-item").filter(has_text="glossary.gmv")
    item.wait_for()
    assert "GMV = 净收入" in item.inner_text() and "hal" in item.inner_text()
    item.get_by_test_id("accept").click()
    page.get_by_test_id("proposals-empty").wait_for()
    after = curator.call("GET", f"/memories/{shared['id']}").body["memory"]
    assert (after["version"], after["content"]) == (2, "GMV = 净收入")
    assert after["provenance"]["proposal"] == {"proposal_id": proposal["id"], "proposer": "hal", "reviewer": "gus"}


def test_a_model_refused_by_the_api_shows_each_problem_at_its_line(page, runtime: LocalRuntime) -> None:
    import json

    from tests.support import load_event

    curator = ApiClient(runtime.api_url or "", "demo", "ida")
    curator.headers["X-Memtool-Roles"] = "curator"
    existing = curator.call("GET", "/model")
    expected = existing.body["version"] if existing.status == 200 else None
    model = json.loads(load_event("model_put.json")["body"])["model"]
    stored = curator.call("PUT", "/model", {"model": model, "expected_version": expected})
    assert stored.status in (200, 201), stored.body

    sign_in(page, "ida", roles="curator")
    page.get_by_test_id("nav-model").click()
    page.get_by_test_id("model-version").wait_for()
    editor = page.get_by_test_id("model-yaml")
    text = editor.input_value()
    broken = text.replace("expression: SUM(ol.qty)", "expression: SUM(ol.no_such_column)", 1)
    assert broken != text
    editor.fill(broken)
    page.get_by_test_id("model-push").click()
    problem = page.get_by_test_id("model-problem").first
    problem.wait_for()
    line = next(i for i, row in enumerate(broken.splitlines(), start=1) if "no_such_column" in row)
    assert problem.inner_text().startswith(f"line {line}: metrics[4].expression"), problem.inner_text()
    assert curator.call("GET", "/model").body["version"] == stored.body["version"]  # nothing stored

    page.get_by_test_id("model-diff-version").first.click()
    page.get_by_test_id("model-diff").filter(has_text="no_such_column").wait_for()
    rows = page.get_by_test_id("model-diff").inner_text().splitlines()
    changed = [row.split(" ", 1)[0] + " " + row.split(":", 1)[1].strip() for row in rows]
    assert changed == ["- SUM(ol.qty)", "+ SUM(ol.no_such_column)"]  # the edit, against the version in force


def test_the_console_is_used_with_the_keyboard_alone(page) -> None:
    """Sign in and ask with keys only: the sign-in form focuses the user field, Tab moves through
    labelled fields, Enter submits, Ctrl+Enter asks, and the links of the pages are reachable."""
    page.keyboard.type("kim")  # the user field has the focus
    page.keyboard.press("Tab")
    page.keyboard.type("curator")
    page.keyboard.press("Enter")
    page.get_by_test_id("question").wait_for()
    assert page.evaluate("document.activeElement.dataset.testid") == "question"
    page.keyboard.type("上个月净收入")
    page.keyboard.press("Control+Enter")
    assert answer_status(page) == "answered"
    page.get_by_test_id("nav-memories").focus()
    page.keyboard.press("Enter")
    page.get_by_label("Kind").wait_for()
    assert page.url.endswith("#/memories")


def test_two_corrections_of_one_term_are_resolved_in_review(page, runtime: LocalRuntime) -> None:
    user = ApiClient(runtime.api_url or "", "demo", "joy")
    def teach(term: str, metric: str):
        value = {"term": term, "maps_to": {"metric": metric}}
        return user.call("POST", "/memories", {"kind": "correction", "content": f"{term} means {metric}", "value": value})

    older, newer = teach("GMV", "net_revenue"), teach("ＧＭＶ", "gross_revenue")
    assert older.status == newer.status == 201
    admin = ApiClient(runtime.api_url or "", "demo", "root")
    admin.headers["X-Memtool-Roles"] = "admin"
    assert admin.call("POST", "/maintenance/run", {"steps": ["conflicts"]}).status == 200

    sign_in(page, "joy")
    page.get_by_test_id("nav-review").click()
    item = page.get_by_test_id("conflict-item").first
    item.wait_for()
    item.locator(f'[data-testid="keep"][data-id="{older.body["memory"]["id"]}"]').click()
    page.get_by_test_id("conflicts-empty").wait_for()
    assert user.call("GET", f"/memories/{newer.body['memory']['id']}").body["memory"]["status"] == "archived"
    assert user.call("GET", f"/memories/{older.body['memory']['id']}").body["memory"]["status"] == "active"
