// The Model page: the tenant's semantic model in force and its history, a diff between versions,
// and an edit that is pushed (PUT /model) with every refusal shown at its line of the YAML.

import { Document, parseDocument, stringify } from "yaml";
import { Api, type ApiError, describeError } from "./api";

interface ModelRead {
  version: number;
  model_version: string;
  updated_by: string;
  updated_at: string;
  model: Record<string, unknown>;
}

interface Problem {
  path: string;
  message: string;
}

type El = <K extends keyof HTMLElementTagNameMap>(tag: K, attributes?: Record<string, string>, ...children: (Node | string | null | undefined)[]) => HTMLElementTagNameMap[K];

export function modelPage(api: Api, app: HTMLElement, el: El, curator: boolean): void {
  const status = el("div", { "aria-live": "polite" });
  const editor = el("textarea", { id: "model-yaml", "data-testid": "model-yaml", rows: "24", spellcheck: "false", class: "code" });
  const push = el("button", { type: "button", "data-testid": "model-push" }, "Validate and push");
  const problems = el("ol", { class: "problems", "data-testid": "model-problems" });
  const history = el("div", {});
  const diff = el("pre", { class: "diff", "data-testid": "model-diff", hidden: "" });
  let current: ModelRead | null = null;

  const load = async () => {
    status.replaceChildren(el("p", { class: "loading" }, "Loading the model…"));
    try {
      current = await api.call<ModelRead>("GET", "/model");
      editor.value = stringify(current.model, { lineWidth: 0 });
      status.replaceChildren(
        el("p", { "data-testid": "model-version" }, `Version ${current.version} (model_version ${current.model_version}), by ${current.updated_by}`),
      );
      const listed = await api.call<{ items: { version: number; model_version: string; updated_by: string }[] }>("GET", "/model/history");
      history.replaceChildren(
        el("h2", {}, "History"),
        el(
          "ol",
          {},
          ...listed.items.map((item) => {
            const button = el("button", { type: "button", class: "secondary", "data-testid": "model-diff-version" }, `diff v${item.version} → in force`);
            button.addEventListener("click", () => void showDiff(item.version));
            return el("li", {}, `v${item.version} ${item.model_version} by ${item.updated_by} `, button);
          }),
        ),
      );
    } catch (error) {
      const problem = error as ApiError;
      current = null;
      status.replaceChildren(el("p", { class: "hint" }, problem.status === 404 ? "The tenant has no stored model yet: paste one and push it." : describeError(error)));
    }
  };

  const showDiff = async (version: number) => {
    try {
      const old = await api.call<ModelRead>("GET", `/model?version=${version}`);
      diff.hidden = false;
      diff.textContent = lineDiff(stringify(old.model, { lineWidth: 0 }), editor.value) || "(no difference)";
    } catch (error) {
      diff.hidden = false;
      diff.textContent = describeError(error);
    }
  };

  push.addEventListener("click", async () => {
    problems.replaceChildren();
    const document = parseDocument(editor.value, { prettyErrors: true });
    if (document.errors.length) {
      problems.replaceChildren(...document.errors.map((e) => el("li", {}, `line ${e.linePos?.[0].line ?? "?"}: ${e.message.split("\n")[0]}`)));
      return;
    }
    try {
      await api.call("PUT", "/model", { model: document.toJS(), expected_version: current?.version ?? null });
      await load();
      problems.replaceChildren(el("li", { class: "ok" }, "Stored."));
    } catch (error) {
      const body = (error as ApiError).body as { problems?: Problem[] } | undefined;
      const found = body?.problems ?? [];
      if (!found.length) {
        problems.replaceChildren(el("li", {}, describeError(error)));
        return;
      }
      problems.replaceChildren(...found.map((p) => el("li", { "data-testid": "model-problem" }, `line ${lineOf(document, editor.value, p.path) ?? "?"}: ${p.path}: ${p.message}`)));
    }
  });

  const parts: Node[] = [el("h1", {}, "Semantic model"), status, el("label", { for: "model-yaml" }, "The model (YAML)"), editor];
  parts.push(curator ? el("div", { class: "row" }, push) : el("p", { class: "hint" }, "Curators push models."));
  parts.push(problems, history, diff);
  app.replaceChildren(el("section", { class: "card" }, ...parts));
  void load();
}

/** The 1-based line of ``path`` ("metrics[3].expression") in ``text``, the YAML ``document`` was
parsed from: the deepest part of the path the document has (a missing key: its parent's line). */
export function lineOf(document: Document.Parsed, text: string, path: string): number | null {
  const parts: (string | number)[] = [];
  for (const match of path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) parts.push(match[2] !== undefined ? Number(match[2]) : match[1]);
  for (let end = parts.length; end > 0; end--) {
    const node = document.getIn(parts.slice(0, end), true) as { range?: [number, number, number] } | undefined;
    if (node && node.range) return text.slice(0, node.range[0]).split("\n").length;
  }
  return null;
}

/** A unified-style line diff ("- old", "+ new"), for models of a few thousand lines. */
export function lineDiff(before: string, after: string): string {
  const a = before.split("\n");
  const b = after.split("\n");
  const n = a.length;
  const m = b.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(`- ${a[i++]}`);
    else out.push(`+ ${b[j++]}`);
  }
  while (i < n) out.push(`- ${a[i++]}`);
  while (j < m) out.push(`+ ${b[j++]}`);
  return out.join("\n");
}
