"""The console in a real browser: Debian's headless Chromium driven by Playwright against the local
runtime's /console/ (docs/console.md). A new user signs in, asks and sees a table and a chart
whose canvas has drawn pixels, answers a clarification by clicking an option, asks a follow-up,
teaches a correction, gives a thumbs-up; then an admin approves the resulting few-shot in Review.
No request is made by the test itself except to read back what the clicks stored.
On AWS the console signs in through Cognito: doubles of the distribution, the hosted sign-in and
the API's authorizer, in the browser's network layer, check the PKCE exchange and the token the page
sends, and hand the ask to the local runtime as the token's user.

Chromium is Debian's (``apt-get install chromium``; .ci/run installs it, as it installs
PostgreSQL), never a browser downloaded at run time. Without it the tests are skipped, as the
PostgreSQL tests are without a server, except where MEMTOOL_REQUIRE_BROWSER is set (.ci/run sets
it): there a missing browser fails them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from memtool.demo import ApiClient
from memtool.runtime.console import CONSOLE_DIR
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


# ---------------------------------------------------------------------------------- on AWS: Cognito

CONSOLE_ORIGIN = "https://console.memtool.test"  # the distribution (both the page and the API)
SIGN_IN = "https://auth.memtool.test"  # the user pool's domain (CognitoDomain)
TOKEN_KEY = b"double-of-the-user-pool-signing-key"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _id_token(claims: dict[str, object]) -> str:
    head = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + _b64url(json.dumps(claims).encode())
    return head + "." + _b64url(hmac.new(TOKEN_KEY, head.encode(), hashlib.sha256).digest())


def _verified_claims(token: str) -> dict[str, object] | None:
    """What the API's Cognito authorizer does with the Authorization header: the signature, then exp."""
    head, _, signature = token.rpartition(".")
    if not head or not hmac.compare_digest(signature, _b64url(hmac.new(TOKEN_KEY, head.encode(), hashlib.sha256).digest())):
        return None
    payload = head.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims if claims["exp"] > time.time() else None


def _cloudfront_csp() -> str:
    """The template's console Content-Security-Policy, with CognitoDomain substituted."""
    from memtool.runtime.template import load_template

    policy = load_template(ROOT / "template.yaml")["Resources"]["ConsoleHeadersPolicy"]["Properties"]
    text = policy["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]["ContentSecurityPolicy"]["ContentSecurityPolicy"]["Fn::Sub"]
    return " ".join(text.replace("${CognitoDomain}", SIGN_IN).split())


class AwsDoubles:
    """The deployed console's outside, scripted as AWS answers it, in the browser's network layer:

    - the distribution: /console/* from the uploaded files (the page function's rule: a path naming
      no file is index.html), with the template's response headers; config.json as
      `memtool aws console` writes it; every other path to the API;
    - Cognito's hosted sign-in: /oauth2/authorize signs the user in at once and redirects back with
      a code bound to the PKCE challenge; /oauth2/token gives an ID token only for the code, the
      client, the redirect URI and a verifier whose SHA-256 is that challenge; /logout redirects;
    - API Gateway's Cognito authorizer: the Authorization header must be a token the pool signed
      and not expired (else 401, as API Gateway answers), and its claims become the identity the
      function sees, here the local runtime's identity headers.
    """

    def __init__(self, runtime: LocalRuntime) -> None:
        from memtool.deploy.console import ConsoleStack, console_config

        self.api_url = runtime.api_url or ""
        stack = ConsoleStack(CONSOLE_ORIGIN + "/console/", "bucket", "E1EXAMPLE", "console-client", SIGN_IN)
        self.config = console_config(stack)
        self.csp = _cloudfront_csp()
        self.challenges: dict[str, str] = {}
        self.token_requests: list[dict[str, str]] = []
        self.api_headers: list[dict[str, str]] = []
        self.logouts: list[str] = []

    def install(self, context) -> None:
        context.route(f"{CONSOLE_ORIGIN}/**", self.distribution)
        context.route(f"{SIGN_IN}/**", self.sign_in)

    def distribution(self, route) -> None:
        path = urlsplit(route.request.url).path
        if path == "/console/config.json":
            return route.fulfill(status=200, headers={"Content-Type": "application/json"}, body=json.dumps(self.config))
        if path.startswith("/console/"):
            name = path[len("/console/") :]
            target = CONSOLE_DIR / name if name and "." in name.rsplit("/", 1)[-1] else CONSOLE_DIR / "index.html"
            if not target.is_file():
                return route.fulfill(status=403, body="AccessDenied")
            kind = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}.get(target.suffix, "application/json")
            return route.fulfill(status=200, headers={"Content-Type": kind, "Content-Security-Policy": self.csp}, body=target.read_bytes())
        headers = {k.lower(): v for k, v in route.request.headers.items()}
        self.api_headers.append(headers)
        claims = _verified_claims(headers.get("authorization", ""))
        if claims is None:
            return route.fulfill(status=401, headers={"Content-Type": "application/json"}, body='{"message":"Unauthorized"}')
        forwarded = {k: v for k, v in headers.items() if k not in ("authorization", "host") and not k.startswith("x-memtool-")}
        forwarded |= {"X-Memtool-Tenant": str(claims["custom:tenant_id"]), "X-Memtool-User": str(claims["sub"])}
        forwarded["X-Memtool-Roles"] = ",".join(claims.get("cognito:groups") or [])  # type: ignore[arg-type]
        query = urlsplit(route.request.url).query
        response = route.fetch(url=f"{self.api_url}{urlsplit(route.request.url).path}" + (f"?{query}" if query else ""), headers=forwarded)
        route.fulfill(response=response)

    def sign_in(self, route) -> None:
        parts = urlsplit(route.request.url)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        cors = {"Access-Control-Allow-Origin": CONSOLE_ORIGIN, "Content-Type": "application/json"}
        if parts.path == "/oauth2/authorize":
            assert query["response_type"] == "code" and query["client_id"] == "console-client"
            assert query["redirect_uri"] == CONSOLE_ORIGIN + "/console/" and query["code_challenge_method"] == "S256"
            assert query["scope"] == "openid email profile"
            code = f"code-{len(self.challenges)}"
            self.challenges[code] = query["code_challenge"]
            return route.fulfill(status=302, headers={"Location": f"{query['redirect_uri']}?code={code}&state={query['state']}"})
        if parts.path == "/oauth2/token":
            form = {k: v[0] for k, v in parse_qs(route.request.post_data or "").items()}
            self.token_requests.append(form)
            challenge = self.challenges.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "")
            if (
                challenge is None
                or form.get("grant_type") != "authorization_code"
                or form.get("client_id") != "console-client"
                or form.get("redirect_uri") != CONSOLE_ORIGIN + "/console/"
                or _b64url(hashlib.sha256(verifier.encode()).digest()) != challenge
            ):
                return route.fulfill(status=400, headers=cors, body='{"error":"invalid_grant"}')
            claims = {"sub": "u-ana", "email": "ana@example.com", "custom:tenant_id": "demo", "cognito:groups": ["admin"],
                      "aud": "console-client", "token_use": "id", "exp": int(time.time()) + 3600}  # fmt: skip
            token = _id_token(claims)
            body = {"id_token": token, "access_token": "access", "token_type": "Bearer", "expires_in": 3600}
            return route.fulfill(status=200, headers=cors, body=json.dumps(body))
        if parts.path == "/logout":
            self.logouts.append(parts.query)
            return route.fulfill(status=302, headers={"Location": query["logout_uri"]})
        route.fulfill(status=404, body="no such page")


def test_on_aws_the_console_signs_in_with_cognito_and_the_api_gets_only_the_id_token(browser, runtime: LocalRuntime) -> None:
    doubles = AwsDoubles(runtime)
    context = browser.new_context(viewport={"width": 1200, "height": 900}, locale="zh-CN")
    doubles.install(context)
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    violations: list[str] = []
    opened.on("console", lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None)
    try:
        opened.goto(f"{CONSOLE_ORIGIN}/console/")
        assert opened.get_by_test_id("signin-tenant").count() == 0  # no local form on AWS
        opened.get_by_test_id("signin-cognito").click()
        opened.get_by_test_id("question").wait_for()
        assert opened.locator("#who").inner_text() == "ana@example.com @ demo (admin)"
        assert urlsplit(opened.url).query == ""  # the code is gone from the address bar
        assert [r["grant_type"] for r in doubles.token_requests] == ["authorization_code"]  # one exchange, PKCE checked

        assert ask(opened, "上个月净收入") == "answered"
        api_calls = [h for h in doubles.api_headers if h.get("authorization")]
        assert api_calls and all(_verified_claims(h["authorization"]) for h in api_calls)
        assert not any(k.startswith("x-memtool-") for h in doubles.api_headers for k in h)  # the page sends no identity of its own
        # The ask was the token's user's: the API stored it under sub u-ana of tenant demo.
        mine = ApiClient(runtime.api_url or "", "demo", "u-ana").call("GET", "/memories?kind=working")
        assert any("上个月净收入" in json.dumps(item, ensure_ascii=False) for item in mine.body["items"]), mine.body

        opened.get_by_role("button", name="Sign out").click()
        opened.get_by_test_id("signin-cognito").wait_for()
        assert doubles.logouts and "client_id=console-client" in doubles.logouts[0]
        assert opened.evaluate("() => window.sessionStorage.getItem('memtool.console.token')") is None
    finally:
        context.close()
    assert errors == [] and violations == [], (errors, violations)
