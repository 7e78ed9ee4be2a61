// The HTTP API, as the console calls it. Locally the identity is the sign-in form's, sent as the
// local runtime's headers (X-Memtool-Tenant/User/Roles); on AWS it is the Cognito ID token, sent
// as the Authorization header (auth.ts). The API answers errors as {error, message, field}, which
// the pages show as they are.

export interface Identity {
  tenant: string;
  user: string;
  roles: string;
  token?: string; // the Cognito ID token (AWS); absent locally
  expires?: number; // when the token stops being accepted (ms since the epoch)
}

export interface ApiError {
  status: number;
  error: string;
  message: string;
  field?: string | null;
  body?: unknown; // the whole answer (PUT /model's problems)
}

const STORE_KEY = "memtool.console.identity";

export function storedIdentity(): Identity | null {
  try {
    const raw = window.localStorage.getItem(STORE_KEY);
    if (!raw) return null;
    const parsed = JSON.parse(raw) as Partial<Identity>;
    if (typeof parsed.tenant !== "string" || typeof parsed.user !== "string") return null;
    return { tenant: parsed.tenant, user: parsed.user, roles: typeof parsed.roles === "string" ? parsed.roles : "" };
  } catch {
    return null;
  }
}

export function storeIdentity(identity: Identity | null): void {
  if (identity === null) window.localStorage.removeItem(STORE_KEY);
  else window.localStorage.setItem(STORE_KEY, JSON.stringify(identity));
}

export class Api {
  constructor(private readonly identity: Identity) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.identity.token) {
      headers.Authorization = this.identity.token; // what the API's Cognito authorizer reads
    } else {
      headers["X-Memtool-Tenant"] = this.identity.tenant;
      headers["X-Memtool-User"] = this.identity.user;
      if (this.identity.roles) headers["X-Memtool-Roles"] = this.identity.roles;
    }
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response: Response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (cause) {
      throw { status: 0, error: "unreachable", message: `the memtool API cannot be reached (${String(cause)})` } satisfies ApiError;
    }
    const text = await response.text();
    const parsed: unknown = text ? safeJson(text) : null;
    if (!response.ok) {
      const problem = (parsed ?? {}) as Partial<ApiError>;
      throw {
        status: response.status,
        error: problem.error ?? "error",
        message: problem.message ?? (text.slice(0, 300) || response.statusText),
        field: problem.field ?? null,
        body: parsed,
      } satisfies ApiError;
    }
    return parsed as T;
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.slice(0, 300) };
  }
}

export function describeError(error: unknown): string {
  const problem = error as Partial<ApiError>;
  if (problem && typeof problem.message === "string") {
    const field = problem.field ? ` (${problem.field})` : "";
    return `${problem.status ?? ""} ${problem.error ?? "error"}${field}: ${problem.message}`.trim();
  }
  return String(error);
}

export interface Clarification {
  question: string;
  options: string[];
  term?: string | null;
}

export interface ChartCandidate {
  type: string;
  confidence: number;
  reason?: string;
}

export interface Chart {
  shape?: string;
  source?: string; // "llm": the model's option, checked against the whitelist
  type: string;
  confidence: number;
  checkpoint_status: string;
  candidates: ChartCandidate[];
  option: Record<string, unknown> | null;
}

export interface AskAnswer {
  episode_id: string;
  route: string | null;
  status: string;
  question: string;
  sql: string | null;
  columns: string[];
  rows: unknown[][];
  row_count: number;
  truncated: boolean;
  chart: Chart | null;
  answer: string | null;
  citations: { source: string; text: string; stale?: boolean }[];
  memories_used: { id: string; version: number; kind: string; content?: string }[];
  clarification: Clarification | null;
  notes: string[];
  error: { error: string; message: string; step: string | null } | null;
}

export interface FewshotView {
  id: string;
  version: number;
  status: string;
  question: string;
  sql: string;
  author: string | null;
  created_at: string;
}
