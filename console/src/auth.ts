// How the console signs in. config.json (next to the page) says which way:
// - "local": the local runtime's form; the identity goes as X-Memtool-* headers (api.ts).
// - "cognito": on AWS (`memtool aws console` writes it). The user pool's hosted sign-in, with the
//   authorization code flow and PKCE (a public client: no secret in a page). The ID token it gets
//   is sent as the Authorization header, which the API's Cognito authorizer reads; who the user is
//   (tenant, roles) is read from the token's claims only to show it, the API trusts the authorizer.

import type { Identity } from "./api";

export interface LocalConfig {
  sign_in: "local";
}

export interface CognitoConfig {
  sign_in: "cognito";
  domain: string; // https://<prefix>.auth.<region>.amazoncognito.com
  client_id: string;
  redirect_uri: string; // the console's URL, the app client's callback
  scopes: string[];
  tenant_claim: string;
  roles_claim: string;
}

export type ConsoleConfig = LocalConfig | CognitoConfig;

const PENDING_KEY = "memtool.console.pkce";
const TOKEN_KEY = "memtool.console.token";

export async function loadConfig(): Promise<ConsoleConfig> {
  const response = await fetch("config.json", { cache: "no-store" });
  if (!response.ok) throw new Error(`the console's config.json cannot be read (${response.status})`);
  const config = (await response.json()) as Partial<CognitoConfig> & { sign_in?: string };
  if (config.sign_in === "cognito") {
    for (const key of ["domain", "client_id", "redirect_uri", "tenant_claim", "roles_claim"] as const) {
      if (typeof config[key] !== "string" || !config[key]) throw new Error(`config.json has no ${key} (run memtool aws console again)`);
    }
    return { ...(config as CognitoConfig), scopes: Array.isArray(config.scopes) ? config.scopes : ["openid"] };
  }
  return { sign_in: "local" };
}

function base64url(bytes: Uint8Array): string {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(size: number): string {
  return base64url(crypto.getRandomValues(new Uint8Array(size)));
}

/** Off to the hosted sign-in; it comes back to redirect_uri with ?code=...&state=... */
export async function startCognitoSignIn(config: CognitoConfig): Promise<void> {
  const verifier = randomText(48);
  const state = randomText(16);
  const challenge = base64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
  window.sessionStorage.setItem(PENDING_KEY, JSON.stringify({ verifier, state }));
  const query = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: config.redirect_uri,
    scope: config.scopes.join(" "),
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  });
  window.location.assign(`${config.domain}/oauth2/authorize?${query}`);
}

/** On the way back from the hosted sign-in: trade the code for tokens. Null when not coming back. */
export async function finishCognitoSignIn(config: CognitoConfig): Promise<Identity | null> {
  const params = new URLSearchParams(window.location.search);
  const code = params.get("code");
  const failure = params.get("error");
  if (!code && !failure) return null;
  const pending = JSON.parse(window.sessionStorage.getItem(PENDING_KEY) ?? "null") as { verifier: string; state: string } | null;
  window.sessionStorage.removeItem(PENDING_KEY);
  window.history.replaceState(null, "", `${window.location.pathname}#/ask`);
  if (failure) throw new Error(`sign-in failed: ${failure} ${params.get("error_description") ?? ""}`.trim());
  if (pending === null || params.get("state") !== pending.state) throw new Error("sign-in failed: the answer is not for this page's request (state)");
  const response = await fetch(`${config.domain}/oauth2/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      client_id: config.client_id,
      code: code as string,
      redirect_uri: config.redirect_uri,
      code_verifier: pending.verifier,
    }),
  });
  const tokens = (await response.json().catch(() => ({}))) as { id_token?: string; error?: string };
  if (!response.ok || !tokens.id_token) throw new Error(`sign-in failed: the token endpoint answered ${response.status} ${tokens.error ?? ""}`.trim());
  const identity = identityOf(config, tokens.id_token);
  window.sessionStorage.setItem(TOKEN_KEY, JSON.stringify(identity));
  return identity;
}

function identityOf(config: CognitoConfig, token: string): Identity {
  const payload = token.split(".")[1] ?? "";
  const json = decodeURIComponent(
    Array.from(atob(payload.replace(/-/g, "+").replace(/_/g, "/")), (c) => `%${c.charCodeAt(0).toString(16).padStart(2, "0")}`).join(""),
  );
  const claims = JSON.parse(json) as Record<string, unknown>;
  const roles = claims[config.roles_claim];
  return {
    tenant: String(claims[config.tenant_claim] ?? ""),
    user: String(claims.email ?? claims["cognito:username"] ?? claims.sub ?? ""),
    roles: Array.isArray(roles) ? roles.join(",") : typeof roles === "string" ? roles : "",
    token,
    expires: typeof claims.exp === "number" ? claims.exp * 1000 : 0,
  };
}

/** The signed-in identity of this tab, while its token lasts. */
export function cognitoIdentity(): Identity | null {
  const stored = JSON.parse(window.sessionStorage.getItem(TOKEN_KEY) ?? "null") as Identity | null;
  if (stored === null || !stored.token || (stored.expires ?? 0) <= Date.now()) return null;
  return stored;
}

export function cognitoSignOut(config: CognitoConfig): void {
  window.sessionStorage.removeItem(TOKEN_KEY);
  const query = new URLSearchParams({ client_id: config.client_id, logout_uri: config.redirect_uri });
  window.location.assign(`${config.domain}/logout?${query}`);
}
