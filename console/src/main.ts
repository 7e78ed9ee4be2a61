// memtool's console: sign in, ask (table, chart, notes, clarifications, feedback and corrections,
// follow-ups in one session), and review few-shots. Plain TypeScript over the HTTP API; ECharts
// draws the charts the API proposes (canvas renderer). docs/console.md says what each page does.

import "./style.css";
import { Api, type AskAnswer, type FewshotView, type Identity, describeError, storedIdentity, storeIdentity } from "./api";
import { type ConsoleConfig, cognitoIdentity, cognitoSignOut, finishCognitoSignIn, loadConfig, startCognitoSignIn } from "./auth";
import { renderChart } from "./chart";
import { modelPage } from "./model";

const app = document.getElementById("app") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const who = document.getElementById("who") as HTMLElement;
const signout = document.getElementById("signout") as HTMLButtonElement;

let session = newSessionId();
let config: ConsoleConfig = { sign_in: "local" };

function currentIdentity(): Identity | null {
  return config.sign_in === "cognito" ? cognitoIdentity() : storedIdentity();
}

function newSessionId(): string {
  const random = crypto.getRandomValues(new Uint32Array(2));
  return `console-${Date.now().toString(36)}-${random[0].toString(36)}${random[1].toString(36)}`;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function showError(where: HTMLElement, error: unknown): void {
  where.replaceChildren(el("p", { class: "error", role: "alert", "data-testid": "error" }, describeError(error)));
}

// ---- routing ------------------------------------------------------------------------------------

function route(): void {
  const identity = currentIdentity();
  nav.hidden = identity === null;
  signout.hidden = identity === null;
  who.textContent = identity ? `${identity.user} @ ${identity.tenant}${identity.roles ? ` (${identity.roles})` : ""}` : "";
  if (identity === null) return signInPage();
  const page = window.location.hash.replace(/^#\//, "") || "ask";
  for (const link of nav.querySelectorAll("a")) link.toggleAttribute("aria-current", link.getAttribute("href") === `#/${page}`);
  if (page === "review") return reviewPage(new Api(identity), identity);
  if (page === "memories") return memoriesPage(new Api(identity));
  if (page === "model") {
    const roles = identity.roles.split(",");
    return modelPage(new Api(identity), app, el, roles.includes("curator") || roles.includes("admin"));
  }
  return askPage(new Api(identity));
}

signout.addEventListener("click", () => {
  session = newSessionId();
  if (config.sign_in === "cognito") return cognitoSignOut(config);
  storeIdentity(null);
  window.location.hash = "#/signin";
  route();
});
window.addEventListener("hashchange", route);

async function boot(): Promise<void> {
  try {
    config = await loadConfig();
    if (config.sign_in === "cognito") await finishCognitoSignIn(config);
  } catch (error) {
    route();
    const where = el("div", {});
    app.prepend(where);
    showError(where, { status: 0, error: "sign_in", message: String(error instanceof Error ? error.message : error) });
    return;
  }
  route();
}

// ---- sign in ------------------------------------------------------------------------------------

function signInPage(): void {
  if (config.sign_in === "cognito") {
    const cognito = config;
    const button = el("button", { type: "button", "data-testid": "signin-cognito" }, "Sign in");
    button.addEventListener("click", () => void startCognitoSignIn(cognito));
    app.replaceChildren(
      el(
        "section",
        { class: "card signin", "aria-labelledby": "signin-title" },
        el("h1", { id: "signin-title" }, "Sign in"),
        el("p", { class: "hint" }, "You sign in with your organisation's account; your tenant and roles come with it."),
        button,
      ),
    );
    button.focus();
    return;
  }
  const tenant = el("input", { id: "signin-tenant", name: "tenant", "data-testid": "signin-tenant", required: "", value: "demo", autocomplete: "organization" });
  const user = el("input", { id: "signin-user", name: "user", "data-testid": "signin-user", required: "", autocomplete: "username" });
  const roles = el("input", { id: "signin-roles", name: "roles", "data-testid": "signin-roles", placeholder: "curator, admin (optional)" });
  const form = el(
    "form",
    { class: "card signin", "aria-labelledby": "signin-title" },
    el("h1", { id: "signin-title" }, "Sign in"),
    el("p", { class: "hint" }, "The local runtime takes who you are from these: tenant, user and roles."),
    el("label", { for: "signin-tenant" }, "Tenant"),
    tenant,
    el("label", { for: "signin-user" }, "User"),
    user,
    el("label", { for: "signin-roles" }, "Roles"),
    roles,
    el("button", { type: "submit", "data-testid": "signin-submit" }, "Sign in"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const pattern = /^[A-Za-z0-9_.:@-]{1,128}$/;
    if (!pattern.test(tenant.value.trim()) || !pattern.test(user.value.trim())) {
      showError(status, { status: 400, error: "validation_error", message: "tenant and user are 1-128 letters, digits or _.:@-" });
      return;
    }
    storeIdentity({ tenant: tenant.value.trim(), user: user.value.trim(), roles: roles.value.replace(/\s+/g, "") });
    session = newSessionId();
    window.location.hash = "#/ask";
    route();
  });
  const status = el("div", { "aria-live": "polite" });
  app.replaceChildren(form, status);
  user.focus();
}

// ---- ask ----------------------------------------------------------------------------------------

function askPage(api: Api): void {
  const question = el("textarea", { id: "question", "data-testid": "question", rows: "2", placeholder: "上个月各大区净收入 / net revenue by region last month" });
  const ask = el("button", { type: "submit", "data-testid": "ask" }, "Ask");
  const fresh = el("button", { type: "button", class: "secondary" }, "New session");
  const result = el("section", { class: "result", "aria-live": "polite" });
  const form = el(
    "form",
    { class: "card ask" },
    el("label", { for: "question" }, "Your question"),
    question,
    el("div", { class: "row" }, ask, fresh),
  );
  fresh.addEventListener("click", () => {
    session = newSessionId();
    result.replaceChildren(el("p", { class: "hint" }, "A new session: the next question is not a follow-up."));
  });
  const send = async (text: string) => {
    if (!text.trim()) return;
    ask.disabled = true;
    result.replaceChildren(el("p", { class: "loading", "data-testid": "loading" }, "Asking…"));
    try {
      const answer = await api.call<AskAnswer>("POST", "/ask", { question: text, session_id: session });
      showAnswer(api, result, answer, send);
    } catch (error) {
      showError(result, error);
    } finally {
      ask.disabled = false;
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void send(question.value);
  });
  question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      void send(question.value);
    }
  });
  app.replaceChildren(form, result);
  question.focus();
}

function showAnswer(api: Api, where: HTMLElement, answer: AskAnswer, send: (text: string) => Promise<void>): void {
  const parts: Node[] = [
    el("p", { class: "status" }, "Status: ", el("strong", { "data-testid": "answer-status", class: `status-${answer.status}` }, answer.status)),
  ];
  if (answer.error) parts.push(el("p", { class: "error", role: "alert" }, `${answer.error.error}: ${answer.error.message}`));
  if (answer.answer) parts.push(el("p", { class: "answer-text" }, answer.answer));
  if (answer.clarification) parts.push(clarification(answer, send));
  if (answer.columns.length) parts.push(table(answer));
  if (answer.chart && answer.chart.option && answer.chart.type !== "table") {
    const holder = el("div", { class: "chart", "data-testid": "chart", role: "img", "aria-label": `${answer.chart.type} chart` });
    parts.push(holder);
    parts.push(candidates(api, answer, holder));
    queueMicrotask(() => renderChart(holder, answer.chart!.option!, answer.chart!.type, true));
  }
  if (answer.citations.length) {
    parts.push(
      el(
        "details",
        { "data-testid": "citations" },
        el("summary", {}, `Sources (${answer.citations.length})`),
        list(answer.citations.map((c) => `${c.source}${c.stale ? " (stale)" : ""}: ${c.text}`)),
      ),
    );
  }
  if (answer.notes.length) parts.push(el("details", {}, el("summary", {}, `Notes (${answer.notes.length})`), list(answer.notes)));
  if (answer.memories_used.length) {
    parts.push(
      el(
        "details",
        {},
        el("summary", {}, `Memories applied (${answer.memories_used.length})`),
        list(answer.memories_used.map((m) => `${m.kind} ${m.id} v${m.version}${m.content ? `: ${m.content}` : ""}`)),
      ),
    );
  }
  if (answer.sql) parts.push(el("details", {}, el("summary", {}, "SQL"), el("pre", { "data-testid": "sql" }, answer.sql)));
  parts.push(feedback(api, answer));
  where.replaceChildren(...parts);
}

function clarification(answer: AskAnswer, send: (text: string) => Promise<void>): HTMLElement {
  const box = el("div", { class: "clarification", role: "group", "aria-label": "clarification" }, el("p", {}, answer.clarification!.question));
  for (const option of answer.clarification!.options) {
    const button = el("button", { type: "button", "data-testid": "clarification-option" }, option);
    button.addEventListener("click", () => void send(option));
    box.append(button);
  }
  return box;
}

function table(answer: AskAnswer): HTMLElement {
  const head = el("tr", {}, ...answer.columns.map((c) => el("th", { scope: "col" }, c)));
  const body = answer.rows.map((row) => el("tr", {}, ...row.map((cell) => el("td", { class: typeof cell === "number" ? "num" : "" }, format(cell)))));
  const caption = answer.truncated ? `${answer.rows.length} of ${answer.row_count} rows` : `${answer.row_count} rows`;
  return el("table", { "data-testid": "answer-table" }, el("caption", {}, caption), el("thead", {}, head), el("tbody", {}, ...body));
}

function format(cell: unknown): string {
  if (cell === null || cell === undefined) return "—";
  if (typeof cell === "number") return cell.toLocaleString(undefined, { maximumFractionDigits: Number.isInteger(cell) ? 0 : 2 });
  return String(cell);
}

function candidates(api: Api, answer: AskAnswer, holder: HTMLElement): HTMLElement {
  const chart = answer.chart!;
  const box = el("div", { class: "candidates", role: "group", "aria-label": "chart candidates" });
  const said = el("span", { class: "hint", "aria-live": "polite", "data-testid": "chart-choice-status" });
  const source = chart.source === "llm" ? " (drawn by the model, checked)" : "";
  box.append(el("span", { class: "hint" }, chart.checkpoint_status === "needs_review" ? `Pick the chart that fits${source}: ` : "Other charts: "));
  for (const candidate of chart.candidates) {
    const button = el(
      "button",
      { type: "button", class: "secondary", "data-testid": "chart-candidate", "data-type": candidate.type, title: candidate.reason ?? "" },
      `${candidate.type} (${Math.round(candidate.confidence * 100)}%)`,
    );
    button.toggleAttribute("aria-pressed", candidate.type === chart.type);
    button.addEventListener("click", () => {
      for (const other of box.querySelectorAll("button")) other.toggleAttribute("aria-pressed", other === button);
      holder.hidden = candidate.type === "table"; // the table above is that candidate
      if (!holder.hidden) renderChart(holder, chart.option!, candidate.type, candidate.type === chart.type);
      // Kept for this shape of data: the next answer of the same shape draws it and cites it.
      api
        .call<{ shape: string; chart_type: string }>("POST", "/charts/choice", { episode_id: answer.episode_id, chart_type: candidate.type })
        .then((kept) => (said.textContent = `Kept: ${kept.chart_type} for every ${kept.shape.replace("_", " ")} from now on.`))
        .catch((error) => showError(said, error));
    });
    box.append(button);
  }
  box.append(said);
  return box;
}

function feedback(api: Api, answer: AskAnswer): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite", "data-testid": "feedback-status" });
  const rate = (rating: number) => async () => {
    try {
      await api.call("POST", "/feedback", { episode_id: answer.episode_id, rating });
      said.textContent = rating > 0 ? "Thanks: marked right." : "Thanks: marked wrong; memtool will look into it.";
    } catch (error) {
      showError(said, error);
    }
  };
  const up = el("button", { type: "button", "data-testid": "thumbs-up", "aria-label": "thumbs up: the answer is right" }, "Right");
  const down = el("button", { type: "button", "data-testid": "thumbs-down", "aria-label": "thumbs down: the answer is wrong" }, "Wrong");
  up.addEventListener("click", rate(1));
  down.addEventListener("click", rate(-1));
  const correction = el("input", { id: `correction-${answer.episode_id}`, "data-testid": "correction", placeholder: "单子数就是订单数 / by takings I mean net revenue" });
  const teach = el("button", { type: "submit", "data-testid": "teach" }, "Teach");
  const form = el(
    "form",
    { class: "correction" },
    el("label", { for: `correction-${answer.episode_id}` }, "Correct a word"),
    correction,
    teach,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!correction.value.trim()) return;
    try {
      const taught = await api.call<{ correction: { content?: string } | null }>("POST", "/feedback", {
        episode_id: answer.episode_id,
        rating: -1,
        correction: correction.value.trim(),
      });
      said.textContent = taught.correction ? `Learned: ${taught.correction.content ?? correction.value}` : "Noted.";
      correction.value = "";
    } catch (error) {
      showError(said, error);
    }
  });
  const diagnose = el("button", { type: "button", class: "secondary", "data-testid": "diagnose" }, "Diagnose");
  diagnose.addEventListener("click", async () => {
    said.textContent = "Diagnosing…";
    try {
      const report = await api.call<{ status: string; hypotheses: { id: string; result: string; cause?: string }[] }>("POST", "/diagnose", {
        episode_id: answer.episode_id,
        comment: "the console: this answer looks wrong",
      });
      const ran = report.hypotheses.filter((h) => h.result === "ran").length;
      said.textContent = `Diagnosis ${report.status}: ${report.hypotheses.length} hypotheses, ${ran} repairs ran. See Review.`;
    } catch (error) {
      showError(said, error);
    }
  });
  return el("div", { class: "feedback" }, el("div", { class: "row" }, up, down, diagnose), form, said);
}

function list(items: string[]): HTMLElement {
  return el("ul", {}, ...items.map((item) => el("li", {}, item)));
}

// ---- memories -----------------------------------------------------------------------------------

interface MemoryRecord {
  id: string;
  kind: string;
  key: string | null;
  content: string;
  scope: string;
  status: string;
  version: number;
  updated_at: string;
}

const KINDS = ["", "profile", "correction", "knowledge", "episodic", "causal", "working"];
const STATUSES = ["", "active", "pending_review", "approved", "rejected", "superseded", "archived"];

function select(id: string, label: string, options: string[]): [HTMLLabelElement, HTMLSelectElement] {
  const box = el("select", { id, "data-testid": id }, ...options.map((o) => el("option", { value: o }, o || "any")));
  return [el("label", { for: id }, label), box];
}

function memoriesPage(api: Api): void {
  const [kindLabel, kind] = select("memories-kind", "Kind", KINDS);
  const [statusLabel, status] = select("memories-status", "Status", STATUSES);
  const [scopeLabel, scope] = select("memories-scope", "Scope", ["user", "tenant"]);
  const listing = el("div", { "aria-live": "polite" });
  const filters = el("form", { class: "card filters" }, el("h1", {}, "Memories"), el("div", { class: "row" }, kindLabel, kind, statusLabel, status, scopeLabel, scope));
  const load = async () => {
    listing.replaceChildren(el("p", { class: "loading" }, "Loading…"));
    const query = new URLSearchParams({ scope: scope.value, limit: "50" });
    if (kind.value) query.set("kind", kind.value);
    if (status.value) query.set("status", status.value);
    try {
      const page = await api.call<{ items: MemoryRecord[] }>("GET", `/memories?${query}`);
      listing.replaceChildren(
        page.items.length ? el("div", {}, ...page.items.map((m) => memoryItem(api, m, load))) : el("p", { class: "hint", "data-testid": "memories-empty" }, "No memories here."),
      );
    } catch (error) {
      showError(listing, error);
    }
  };
  for (const box of [kind, status, scope]) box.addEventListener("change", () => void load());
  app.replaceChildren(filters, listing);
  void load();
}

function memoryItem(api: Api, memory: MemoryRecord, reload: () => Promise<void>): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite" });
  const content = el("textarea", { rows: "2", "data-testid": "memory-content", "aria-label": `content of ${memory.id}` });
  content.value = memory.content;
  const save = el("button", { type: "button", "data-testid": "memory-save" }, "Save");
  const forget = el("button", { type: "button", class: "secondary", "data-testid": "memory-forget" }, "Forget");
  const history = el("details", {}, el("summary", { "data-testid": "memory-history" }, "History"));
  save.addEventListener("click", async () => {
    try {
      await api.call("PATCH", `/memories/${encodeURIComponent(memory.id)}`, { expected_version: memory.version, content: content.value });
      await reload();
    } catch (error) {
      showError(said, error);
    }
  });
  forget.addEventListener("click", async () => {
    if (!window.confirm(`Forget ${memory.key ?? memory.id} and every version of it?`)) return;
    try {
      await api.call("DELETE", `/memories/${encodeURIComponent(memory.id)}`);
      await reload();
    } catch (error) {
      showError(said, error);
    }
  });
  history.addEventListener("toggle", async () => {
    if (!history.open || history.querySelector("ol")) return;
    try {
      const read = await api.call<{ history: MemoryRecord[] }>("GET", `/memories/${encodeURIComponent(memory.id)}?history=true`);
      history.append(el("ol", { "data-testid": "memory-versions" }, ...read.history.map((v) => el("li", {}, `v${v.version} (${v.status}): ${v.content}`))));
    } catch (error) {
      showError(said, error);
    }
  });
  return el(
    "article",
    { class: "memory", "data-testid": "memory-item", "data-id": memory.id },
    el("p", {}, el("strong", {}, `${memory.kind}`), ` ${memory.key ?? ""} · v${memory.version} · ${memory.status} · ${memory.scope}`),
    content,
    el("div", { class: "row" }, save, forget),
    history,
    said,
  );
}

// ---- review -------------------------------------------------------------------------------------

function reviewPage(api: Api, identity: Identity): void {
  const roles = identity.roles.split(",");
  const curator = roles.includes("curator") || roles.includes("admin");
  const fewshots = el("div", { "aria-live": "polite" });
  const proposals = el("div", { "aria-live": "polite" });
  const diagnoses = el("div", { "aria-live": "polite" });
  const conflicts = el("div", { "aria-live": "polite" });
  app.replaceChildren(
    el(
      "section",
      { class: "card" },
      el("h1", {}, "Review"),
      el("h2", {}, "Diagnoses waiting for a person"),
      diagnoses,
      el("h2", {}, "Proposals"),
      proposals,
      el("h2", {}, "Few-shots waiting for review"),
      fewshots,
      el("h2", {}, "Memories that contradict each other"),
      conflicts,
    ),
  );
  const loadDiagnoses = async () => {
    try {
      const listing = await api.call<{ items: DiagnosisRecord[] }>("GET", "/diagnoses?status=pending_review");
      diagnoses.replaceChildren(
        ...(listing.items.length
          ? listing.items.map((item) => diagnosisItem(api, item, loadDiagnoses))
          : [el("p", { class: "hint", "data-testid": "diagnoses-empty" }, "Nothing waits for a person.")]),
      );
    } catch (error) {
      showError(diagnoses, error);
    }
  };
  const loadProposals = async () => {
    try {
      const listing = await api.call<{ items: ProposalView[] }>("GET", "/proposals?status=open");
      proposals.replaceChildren(
        ...(listing.items.length
          ? listing.items.map((item) => proposalItem(api, item, curator, loadProposals))
          : [el("p", { class: "hint", "data-testid": "proposals-empty" }, curator ? "No open proposals." : "You have no open proposals.")]),
      );
    } catch (error) {
      showError(proposals, error);
    }
  };
  const loadFewshots = async () => {
    if (!roles.includes("admin")) {
      fewshots.replaceChildren(el("p", { class: "hint" }, "The few-shot library is reviewed by admins: sign in with the admin role."));
      return;
    }
    try {
      const listing = await api.call<{ items: FewshotView[] }>("GET", "/fewshots");
      fewshots.replaceChildren(
        ...(listing.items.length
          ? listing.items.map((item) => fewshotItem(api, item, loadFewshots))
          : [el("p", { class: "hint", "data-testid": "fewshots-empty" }, "Nothing waits for review.")]),
      );
    } catch (error) {
      showError(fewshots, error);
    }
  };
  const loadConflicts = async () => {
    try {
      const listing = await api.call<{ conflicts: ConflictView[] }>("GET", "/conflicts");
      conflicts.replaceChildren(
        ...(listing.conflicts.length
          ? listing.conflicts.map((item) => conflictItem(api, item, loadConflicts))
          : [el("p", { class: "hint", "data-testid": "conflicts-empty" }, "No memories contradict each other.")]),
      );
    } catch (error) {
      showError(conflicts, error);
    }
  };
  void loadDiagnoses();
  void loadProposals();
  void loadFewshots();
  void loadConflicts();
}

interface ConflictView {
  id: string;
  term: string;
  owner: string;
  winner: string;
  memories: { id: string; version: number; content: string; means: unknown }[];
}

function conflictItem(api: Api, item: ConflictView, reload: () => Promise<void>): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite" });
  const choices = item.memories.map((memory) => {
    const keep = el("button", { type: "button", class: memory.id === item.winner ? "" : "secondary", "data-testid": "keep", "data-id": memory.id }, "Keep this one");
    keep.addEventListener("click", async () => {
      try {
        await api.call("POST", `/conflicts/${encodeURIComponent(item.id)}/resolve`, { keep: memory.id });
        await reload();
      } catch (error) {
        showError(said, error);
      }
    });
    const winning = memory.id === item.winner ? " (recall uses it now)" : "";
    return el("li", {}, `${memory.content} → ${JSON.stringify(memory.means)}${winning} `, keep);
  });
  return el(
    "article",
    { class: "fewshot", "data-testid": "conflict-item", "data-id": item.id },
    el("p", {}, el("strong", {}, item.term), ` — ${item.owner}`),
    el("ul", {}, ...choices),
    said,
  );
}

interface DiagnosisRecord {
  id: string;
  owner: string;
  content: string;
  value: { hypotheses?: { id: string; cause?: string; result?: string; repaired_sql?: string | null }[] } | null;
}

interface ProposalView {
  id: string;
  status: string;
  target_key: string | null;
  target_id: string;
  change: { content?: string; value?: unknown };
  reason: string;
  proposer: string;
}

function diagnosisItem(api: Api, item: DiagnosisRecord, reload: () => Promise<void>): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite" });
  const hypotheses = (item.value?.hypotheses ?? []).map((h) => `${h.id} ${h.cause ?? ""}: ${h.result ?? ""}`);
  const decide = (verdict: "confirm" | "reject") => async () => {
    try {
      await api.call("POST", `/diagnoses/${encodeURIComponent(item.id)}/${verdict}`, { owner: item.owner });
      await reload();
    } catch (error) {
      showError(said, error);
    }
  };
  const confirm = el("button", { type: "button", "data-testid": "confirm" }, "Confirm");
  const reject = el("button", { type: "button", class: "secondary", "data-testid": "reject" }, "Reject");
  confirm.addEventListener("click", decide("confirm"));
  reject.addEventListener("click", decide("reject"));
  return el(
    "article",
    { class: "fewshot", "data-testid": "diagnosis-item", "data-id": item.id },
    el("p", {}, el("strong", {}, item.content), ` — ${item.owner}`),
    list(hypotheses),
    el("div", { class: "row" }, confirm, reject),
    said,
  );
}

function proposalItem(api: Api, item: ProposalView, curator: boolean, reload: () => Promise<void>): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite" });
  const change = item.change.content ?? JSON.stringify(item.change.value);
  const parts: Node[] = [
    el("p", {}, el("strong", {}, item.target_key ?? item.target_id), ` — proposed by ${item.proposer}: ${item.reason}`),
    el("pre", {}, change),
  ];
  if (curator) {
    const why = el("input", { "data-testid": "reject-reason", "aria-label": "why it is rejected", placeholder: "why (to reject)" });
    const accept = el("button", { type: "button", "data-testid": "accept" }, "Accept");
    const reject = el("button", { type: "button", class: "secondary", "data-testid": "reject" }, "Reject");
    accept.addEventListener("click", async () => {
      try {
        await api.call("POST", `/proposals/${encodeURIComponent(item.id)}/accept`, {});
        await reload();
      } catch (error) {
        showError(said, error);
      }
    });
    reject.addEventListener("click", async () => {
      try {
        await api.call("POST", `/proposals/${encodeURIComponent(item.id)}/reject`, { reason: why.value.trim() || "not taken" });
        await reload();
      } catch (error) {
        showError(said, error);
      }
    });
    parts.push(el("div", { class: "row" }, accept, why, reject));
  }
  return el("article", { class: "fewshot", "data-testid": "proposal-item", "data-id": item.id }, ...parts, said);
}

function fewshotItem(api: Api, item: FewshotView, reload: () => Promise<void>): HTMLElement {
  const said = el("p", { class: "hint", "aria-live": "polite" });
  const decide = (verdict: "approve" | "reject") => async () => {
    try {
      await api.call("POST", `/fewshots/${encodeURIComponent(item.id)}/${verdict}`, {});
      await reload();
    } catch (error) {
      showError(said, error);
    }
  };
  const approve = el("button", { type: "button", "data-testid": "approve" }, "Approve");
  const reject = el("button", { type: "button", class: "secondary", "data-testid": "reject" }, "Reject");
  approve.addEventListener("click", decide("approve"));
  reject.addEventListener("click", decide("reject"));
  return el(
    "article",
    { class: "fewshot", "data-testid": "fewshot-item", "data-id": item.id },
    el("p", {}, el("strong", {}, item.question), ` — by ${item.author ?? "?"}`),
    el("pre", {}, item.sql),
    el("div", { class: "row" }, approve, reject),
    said,
  );
}

void boot();
