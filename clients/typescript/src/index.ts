/**
 * ragtrail's TypeScript client: typed calls to the JSON API on `fetch`, with the Python
 * client's deadlines, retries and errors.
 *
 * Calls that are safe to repeat (reads, recall, record with its idempotency key, PUTs,
 * tool-result lookups and stores) are retried with exponential backoff on a dropped
 * connection and on 502/503/504 (honouring Retry-After); votes, feedback and second chances
 * are sent once; a refused connection fails at once. Every call has one overall deadline,
 * retries, waits and a scope lookup included: recall's and a second chance's 1 s (an agent
 * that waits on its memory longer than a search would take is better off searching), the
 * others' 1.5 s. Every error is a `RagtrailError`:
 * the API's own (status >= 400, its JSON body), or no answer (status 0, code "deadline",
 * "unreachable", "tls" or "bad_url"); a redirect is never followed (code "redirect"); an
 * answer that is not ragtrail's JSON, at any status (an HTML page, an empty body, another
 * service's JSON), is code "not_ragtrail". The deadline is the client's own timer: it holds whatever `fetch` does
 * with the abort signal.
 */

/** Deadlines an agent gets unless it says otherwise (milliseconds). */
export const RECALL_DEADLINE_MS = 1000;
export const CALL_DEADLINE_MS = 1500;
const RETRYABLE_STATUSES = new Set([502, 503, 504]);

/** What `record` may be told about an answer: who approved it, or that nobody has yet. */
export const SIGNALS = ["accepted", "user", "verifier", "pending"] as const;
export type Signal = (typeof SIGNALS)[number];

/** The API's error body: `{"error": {"code", "message", "field"?}}`. */
export interface ErrorBody {
  error?: { code?: string; message?: string; field?: string | null; [more: string]: unknown };
  [more: string]: unknown;
}

/** An error answer from ragtrail (status >= 400), or no answer at all (status 0). */
export class RagtrailError extends Error {
  /** The HTTP status; 0 where there was no answer. */
  readonly status: number;
  /** The API's error code ("invalid", "not_found", "conflict", ...), or "deadline", "unreachable", "tls", "bad_url", "redirect". */
  readonly code: string;
  /** The request field at fault, where the API names one. */
  readonly field: string | null;
  /** The whole JSON error body. */
  readonly body: ErrorBody;
  /** What went wrong, without the status. */
  readonly detail: string;

  constructor(status: number, body: ErrorBody | null, detail?: string) {
    const error = body?.error ?? {};
    const code = error.code ?? (status === 0 ? "unreachable" : "error");
    const said = detail ?? error.message ?? `HTTP ${status}`;
    const field = error.field ?? null;
    // No answer reads as what happened ("deadline exceeded after 1.0 s: ..."); an answer leads with its status.
    super((status === 0 ? said : `${status} ${code}: ${said}`) + (field ? ` (field: ${field})` : ""));
    this.name = "RagtrailError";
    this.status = status;
    this.code = code;
    this.field = field;
    this.body = body ?? {};
    this.detail = said;
  }
}

export interface SectionResult {
  id: string;
  /** "valid", "changed" or "deleted". */
  status: "valid" | "changed" | "deleted";
  /** A valid section's current text (on a prefetch, or a hint where it fits the budget); null where the scope keeps hashes only. */
  text: string | null;
  tokens: number | null;
  truncated: boolean | null;
  /** A valid section's SHA-256 of its UTF-8 text. */
  hash: string | null;
}

/** One tool call on the way to an answer. */
export interface Step {
  tool: string;
  args?: Record<string, unknown>;
  sectionIds?: string[];
}

/** What a second chance came to: whether a near miss's path was served, and why in one sentence. */
export interface SecondChance {
  given: boolean;
  reason: string;
}

/** The most section ids a second chance takes (the server refuses more). */
export const SECOND_CHANCE_IDS = 50;

/** What recall answered: "prefetch" (sections' current text), "hint" or "miss"; `matcher` "second-chance" where `secondChance` served it. */
export interface Recall {
  outcome: "prefetch" | "hint" | "miss";
  hit: boolean;
  recallId: string | null;
  trailId: string | null;
  matcher: string | null;
  similarity: number | null;
  matchedQuery: string | null;
  sections: SectionResult[];
  steps: Required<Step>[];
  hint: string | null;
  tokens: number;
  truncated: boolean;
  /** Why it answered as it did (explain() only): each candidate read, its similarity and verdict. */
  explanation: Record<string, unknown> | null;
  /** On a second chance's answer only (`secondChance()`): whether one was given and why. */
  secondChance: SecondChance | null;
  /** On a miss: whether a second chance may serve a near miss's path (call `secondChance()` only then; false from older servers). */
  secondChancePossible: boolean;
}

export interface Recorded {
  trailId: string;
  /** "active", or "pending" without a positive signal. */
  status: string;
  reason: string | null;
  /** False where the idempotency key was seen before, or the same path was recorded before. */
  created: boolean;
  /** Where the scope held this question with these sections already: what recording it again did. */
  refreshed: string | null;
}

export interface RecallFeedback {
  recallId: string;
  helpful: boolean;
  trailId: string | null;
  trailStatus: string | null;
  falseHitReports: number | null;
  /** Different keys that reported it since its last approval. */
  falseHitReporters: number | null;
}

export interface ToolLookup {
  hit: boolean;
  result: unknown;
  ageS: number | null;
  reason: string | null;
}

export interface ToolStored {
  stored: boolean;
  ttlS: number | null;
  reason: string | null;
}

export interface ScopeInfo {
  slug: string;
  name: string;
}

export interface PutSectionsResult {
  created: number;
  updated: number;
  unchanged: number;
  /** The ids created or whose text changed. */
  changed_ids: string[];
  /** Each section's SHA-256 of its UTF-8 text, by id: what `record` takes as `hashes`. */
  hashes: Record<string, string>;
  [more: string]: unknown;
}

export interface SectionRecord {
  id: string;
  text: string;
  hash: string;
  updated_at: string;
  /** Where a link to the section goes on the built site (`page.html#<anchor>`). */
  anchor: string;
}

export interface SectionsPage {
  sections: { id: string; hash: string; updated_at: string }[];
  /** Pass as `after` for the next page; null on the last. */
  next: string | null;
}

export interface ToolPolicy {
  tool: string;
  cacheable: boolean;
  ttl_s?: number;
  [more: string]: unknown;
}

export interface ClientOptions {
  /** An `rt_...` key granted the scopes used. */
  apiKey: string;
  /** The scope calls use unless they name another; without one, the key's only scope (asked once, inside the first call's deadline). */
  scope?: string;
  /** Each call's overall deadline (ms), retries and waits included: 1500. */
  timeoutMs?: number;
  /** Recall's (and explain's) overall deadline (ms): 1000. Past it the agent searches as it would without ragtrail. */
  recallTimeoutMs?: number;
  /** Further attempts of a safe call after a dropped connection or 502/503/504: 3. */
  retries?: number;
  /** Milliseconds before the first retry, doubled each time (with jitter): 200. */
  backoffMs?: number;
  /** The fetch to send with (a shared agent's, a test's); the global one by default. Called as a plain function. */
  fetch?: typeof fetch;
}

/** Per-call option: the scope, where it is not the client's. */
export interface InScope {
  scope?: string;
}

interface Call<T> {
  method: string;
  parts: string[];
  body?: unknown;
  scope?: string;
  scoped?: boolean;
  safe: boolean;
  recall?: boolean;
  query?: Record<string, string | number>;
  parse: (status: number, body: any) => T;
}

/** A client for one ragtrail server and API key. */
export class RagtrailClient {
  readonly baseUrl: string;
  readonly apiKey: string;
  scope: string | undefined;
  readonly timeoutMs: number;
  readonly recallTimeoutMs: number;
  readonly retries: number;
  readonly backoffMs: number;
  private readonly send: typeof fetch;

  /**
   * @param baseUrl the server, e.g. "http://127.0.0.1:8000" (a trailing "/api/v1" is the same server, and is dropped).
   */
  constructor(baseUrl: string, options: ClientOptions) {
    this.baseUrl = serverRoot(baseUrl);
    this.apiKey = options.apiKey;
    this.scope = options.scope;
    this.timeoutMs = options.timeoutMs ?? CALL_DEADLINE_MS;
    this.recallTimeoutMs = options.recallTimeoutMs ?? RECALL_DEADLINE_MS;
    this.retries = options.retries ?? 3;
    this.backoffMs = options.backoffMs ?? 200;
    const fetcher = options.fetch ?? globalThis.fetch;
    // Called on its own, never as this client's method: a browser's fetch refuses another `this`.
    this.send = (input, init) => fetcher.call(globalThis, input, init);
  }

  // --- the key ----------------------------------------------------------------------
  /** The scopes this key is granted. */
  scopes(): Promise<ScopeInfo[]> {
    const parse = (_: number, b: any) => required(b, "scopes");
    return this.call({ method: "GET", parts: ["scopes"], scoped: false, safe: true, parse });
  }

  // --- sections -----------------------------------------------------------------------
  /** Creates or updates sections; returns counts, changed ids and each section's hash. */
  putSections(sections: Record<string, string>, options: InScope = {}): Promise<PutSectionsResult> {
    const body = { sections: Object.entries(sections).map(([id, text]) => ({ id, text })) };
    return this.call({
      method: "PUT",
      parts: ["sections"],
      body,
      scope: options.scope,
      safe: true,
      parse: (_, b) => b,
    });
  }

  /** A page of the scope's sections by id. */
  listSections(options: InScope & { after?: string; limit?: number } = {}): Promise<SectionsPage> {
    const query = { after: options.after ?? "", limit: options.limit ?? 200 };
    return this.call({
      method: "GET",
      parts: ["sections"],
      query,
      scope: options.scope,
      safe: true,
      parse: (_, b) => b,
    });
  }

  /** One section's text and hash. */
  getSection(sectionId: string, options: InScope = {}): Promise<SectionRecord> {
    return this.call({
      method: "GET",
      parts: ["sections", sectionId],
      scope: options.scope,
      safe: true,
      parse: (_, b) => b,
    });
  }

  deleteSection(sectionId: string, options: InScope = {}): Promise<void> {
    return this.call({
      method: "DELETE",
      parts: ["sections", sectionId],
      scope: options.scope,
      safe: true,
      parse: () => undefined,
    });
  }

  // --- recall, record, feedback ------------------------------------------------------
  /**
   * The path recorded for the most similar question, checked against the sections now.
   * `session` (the agent run's id, also given to `record`) lets ragtrail learn from a re-search.
   */
  recall(
    query: string,
    options: InScope & { partition?: string; tokenBudget?: number; dryRun?: boolean; session?: string } = {},
  ): Promise<Recall> {
    const body: Record<string, unknown> = {
      query,
      partition: options.partition ?? "",
      dry_run: options.dryRun ?? false,
    };
    if (options.session !== undefined) body.session = options.session;
    return this.call(recallCall(body, options.tokenBudget, options.scope));
  }

  /** What recall would answer, without counting it, and why (`explanation`). */
  explain(query: string, options: InScope & { partition?: string; tokenBudget?: number } = {}): Promise<Recall> {
    const body = { query, partition: options.partition ?? "", dry_run: true, explain: true };
    return this.call(recallCall(body, options.tokenBudget, options.scope));
  }

  /**
   * After a recall missed and the agent searched: the path of a near miss whose cited sections
   * are all among the first few `sectionIds` (the search's results, best first; the first of
   * them cited), validated on read and served as a hit (`matcher` "second-chance"); else a miss.
   * `secondChance` on the answer says whether one was given and why. Worth calling only after a
   * miss whose `secondChancePossible` is true. Once per recall, by the key that made it, within
   * 15 minutes of it (409 after, or on a recall that was not a miss; 404 for another key's
   * recall). Recall's deadline; sent once. At most 50 ids are sent.
   */
  secondChance(
    recallId: string,
    sectionIds: string[],
    options: InScope & { tokenBudget?: number } = {},
  ): Promise<Recall> {
    const body: Record<string, unknown> = { section_ids: [...new Set(sectionIds)].slice(0, SECOND_CHANCE_IDS) };
    if (options.tokenBudget !== undefined) body.token_budget = options.tokenBudget;
    return this.call({
      method: "POST",
      parts: ["recalls", recallId, "second-chance"],
      body,
      scope: options.scope,
      safe: false,
      recall: true,
      parse: (_, b) => recallFrom(b),
    });
  }

  /**
   * Records the path to an answer (never the answer itself). `signal` must be stated:
   * "accepted" (your application accepted the answer), "user" or "verifier" are served to
   * later similar questions at once; "pending" waits for an operator. `hashes` are the SHA-256
   * of each cited section's UTF-8 text as the agent read it. An idempotency key is generated
   * when none is given, so a retried record never makes two trails.
   */
  record(
    query: string,
    cited: string[],
    options: InScope & {
      signal: Signal;
      steps?: Step[];
      hashes?: Record<string, string>;
      partition?: string;
      idempotencyKey?: string;
      session?: string;
    },
  ): Promise<Recorded> {
    if (!SIGNALS.includes(options?.signal)) {
      return Promise.reject(
        new TypeError(`signal must be one of ${SIGNALS.join(", ")}, not ${JSON.stringify(options?.signal)}`),
      );
    }
    const body: Record<string, unknown> = {
      query,
      partition: options.partition ?? "",
      cited,
      steps: (options.steps ?? []).map((s) => ({ tool: s.tool, args: s.args ?? {}, section_ids: s.sectionIds ?? [] })),
      hashes: options.hashes ?? {},
      idempotency_key: options.idempotencyKey ?? globalThis.crypto.randomUUID().replaceAll("-", ""),
    };
    if (options.signal !== "pending") body.signal = options.signal;
    if (options.session !== undefined) body.session = options.session;
    return this.call({
      method: "POST",
      parts: ["trails"],
      body,
      scope: options.scope,
      safe: true,
      parse: (status, b) => ({
        trailId: required(b, "trail_id"),
        status: required(b, "status"),
        reason: b.reason ?? null,
        created: status === 201,
        refreshed: b.refreshed ?? null,
      }),
    });
  }

  /** The agent's verdict on what a recall served; "not helpful" reports a false hit. */
  feedback(recallId: string, helpful: boolean, options: InScope & { reason?: string } = {}): Promise<RecallFeedback> {
    return this.call({
      method: "POST",
      parts: ["recalls", recallId, "feedback"],
      body: { helpful, reason: options.reason ?? "" },
      scope: options.scope,
      safe: false,
      parse: (_, b) => ({
        recallId: required(b, "recall_id"),
        helpful: required(b, "helpful"),
        trailId: b.trail_id ?? null,
        trailStatus: b.trail_status ?? null,
        falseHitReports: b.false_hit_reports ?? null,
        falseHitReporters: b.false_hit_reporters ?? null,
      }),
    });
  }

  /** "up" approves a pending trail, "down" rejects it. */
  vote(trailId: string, vote: "up" | "down", options: InScope = {}): Promise<Record<string, unknown>> {
    return this.call({
      method: "POST",
      parts: ["trails", trailId, "feedback"],
      body: { vote },
      scope: options.scope,
      safe: false,
      parse: (_, b) => b,
    });
  }

  getTrail(trailId: string, options: InScope = {}): Promise<Record<string, unknown>> {
    return this.call({
      method: "GET",
      parts: ["trails", trailId],
      scope: options.scope,
      safe: true,
      parse: (_, b) => b,
    });
  }

  // --- tool results --------------------------------------------------------------------
  getToolPolicies(options: InScope = {}): Promise<ToolPolicy[]> {
    return this.call({
      method: "GET",
      parts: ["tool-policies"],
      scope: options.scope,
      safe: true,
      parse: (_, b) => required(b, "policies"),
    });
  }

  /** Replaces the scope's tool policies (which tools' results may be cached, how long). */
  putToolPolicies(policies: ToolPolicy[], options: InScope = {}): Promise<ToolPolicy[]> {
    return this.call({
      method: "PUT",
      parts: ["tool-policies"],
      body: { policies },
      scope: options.scope,
      safe: true,
      parse: (_, b) => required(b, "policies"),
    });
  }

  lookupToolResult(
    tool: string,
    args: Record<string, unknown>,
    options: InScope & { context?: Record<string, unknown>; caller?: string } = {},
  ): Promise<ToolLookup> {
    return this.call({
      method: "POST",
      parts: ["tool-results", "lookup"],
      body: toolBody(tool, args, options.context, options.caller),
      scope: options.scope,
      safe: true,
      parse: (_, b) => ({ hit: required(b, "hit"), result: b.result ?? null, ageS: b.age_s ?? null, reason: b.reason ?? null }),
    });
  }

  /** Stores a tool's result; `sections` maps the ids of sections it read to their hashes. */
  storeToolResult(
    tool: string,
    args: Record<string, unknown>,
    result: unknown,
    options: InScope & { context?: Record<string, unknown>; caller?: string; sections?: Record<string, string> } = {},
  ): Promise<ToolStored> {
    const sections = options.sections ?? {};
    const body = {
      ...toolBody(tool, args, options.context, options.caller),
      result,
      section_ids: Object.keys(sections),
      hashes: sections,
    };
    return this.call({
      method: "PUT",
      parts: ["tool-results"],
      body,
      scope: options.scope,
      safe: true,
      parse: (_, b) => ({ stored: required(b, "stored"), ttlS: b.ttl_s ?? null, reason: b.reason ?? null }),
    });
  }

  /** Lookups per tool in the last hour: {tool: {hit, miss, stale, refused}}. */
  toolResultStats(options: InScope = {}): Promise<Record<string, Record<string, number>>> {
    return this.call({
      method: "GET",
      parts: ["tool-results", "stats"],
      scope: options.scope,
      safe: true,
      parse: (_, b) => b,
    });
  }

  // --- sending -----------------------------------------------------------------------------
  private async call<T>(call: Call<T>): Promise<T> {
    const budget = call.recall ? this.recallTimeoutMs : this.timeoutMs;
    const deadline = performance.now() + budget;
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    // The client's own timer ends the call, whether or not the fetch heeds the abort signal.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        abort.abort();
        reject(this.deadlineError(budget));
      }, budget);
    });
    const work = this.attemptAll(call, deadline, budget, abort.signal);
    work.catch(() => undefined); // settled after the deadline: already answered by `late`
    try {
      return await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The scope lookup where one is needed, then the call's attempts. */
  private async attemptAll<T>(call: Call<T>, deadline: number, budget: number, signal: AbortSignal): Promise<T> {
    let scope = call.scope ?? this.scope;
    if ((call.scoped ?? true) && scope === undefined) {
      scope = await this.attempts(
        {
          method: "GET",
          parts: ["scopes"],
          scoped: false,
          safe: true,
          recall: call.recall,
          parse: (_, b) => this.onlyScope(b),
        },
        deadline,
        budget,
        signal,
      );
    }
    return await this.attempts(call, deadline, budget, signal, scope);
  }

  private onlyScope(body: { scopes: ScopeInfo[] }): string {
    const granted = required(body, "scopes").map((s: ScopeInfo) => s.slug);
    if (granted.length !== 1) {
      throw new TypeError(
        `no scope: pass scope to the call or to the client (this key is granted ${granted.length} scopes: ${granted.join(", ") || "none"})`,
      );
    }
    this.scope = granted[0]; // the key's only scope is unambiguous; asked once
    return granted[0];
  }

  private async attempts<T>(
    call: Call<T>,
    deadline: number,
    budget: number,
    signal: AbortSignal,
    scope?: string,
  ): Promise<T> {
    const attempts = 1 + (call.safe ? this.retries : 0);
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}`, Accept: "application/json" };
    const data = call.body === undefined ? undefined : JSON.stringify(call.body);
    if (data !== undefined) headers["Content-Type"] = "application/json";
    let url: URL;
    try {
      url = new URL(this.baseUrl + path(call, scope));
      if (url.protocol !== "http:" && url.protocol !== "https:")
        throw new TypeError(`unsupported protocol ${url.protocol}`);
    } catch (problem) {
      throw new RagtrailError(0, {
        error: { code: "bad_url", message: `${this.baseUrl}: ${(problem as Error).message}` },
      });
    }
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      let raw: string;
      try {
        response = await this.send(url, { method: call.method, headers, body: data, redirect: "manual", signal });
        raw = await response.text();
      } catch (problem) {
        if (signal.aborted || performance.now() >= deadline) throw this.deadlineError(budget);
        const failure = this.failure(problem);
        const wait =
          failure.code === "unreachable" && !failure.refused && attempt < attempts - 1
            ? this.delay(attempt, null, deadline)
            : null;
        if (wait === null) throw failure.error;
        await sleep(wait, signal).catch(() => {
          throw this.deadlineError(budget);
        });
        continue;
      }
      if (response.status >= 300 && response.status < 400) {
        const where = response.headers.get("location") ?? "elsewhere";
        throw new RagtrailError(response.status, {
          error: {
            code: "redirect",
            message:
              `${this.baseUrl} redirects to ${where} (not followed: it would send the key and lose a POST's body); ` +
              "set baseUrl to the address that answers, with https:// where the server is behind TLS",
          },
        });
      }
      if (response.status >= 400) {
        const error = new RagtrailError(response.status, this.errorBody(response, raw));
        const wait =
          RETRYABLE_STATUSES.has(response.status) && attempt < attempts - 1
            ? this.delay(attempt, response.headers.get("retry-after"), deadline)
            : null;
        if (wait === null) throw error;
        await sleep(wait, signal).catch(() => {
          throw this.deadlineError(budget);
        });
        continue;
      }
      let body: unknown = null;
      try {
        body = raw ? JSON.parse(raw) : null;
      } catch {
        throw new RagtrailError(response.status, this.errorBody(response, raw));
      }
      if (call.method === "DELETE") return call.parse(response.status, body);
      if (body === null || typeof body !== "object" || Array.isArray(body)) {
        throw this.notRagtrails(response, raw ? "JSON that is not an object" : "an empty body");
      }
      try {
        return call.parse(response.status, body);
      } catch (problem) {
        if (!(problem instanceof MissingField)) throw problem;
        throw this.notRagtrails(response, `JSON without ragtrail's fields (${problem.message})`);
      }
    }
  }

  /** A success whose body is not the answer ragtrail gives: raised, never read as one. */
  private notRagtrails(response: Response, said: string): RagtrailError {
    const message =
      `${this.baseUrl} answered ${response.status} with ${said}, not ragtrail's answer: is baseUrl the address ` +
      "ragtrail serves at (its root, e.g. http://127.0.0.1:8000, without /api/v1)?";
    return new RagtrailError(response.status, { error: { code: "not_ragtrail", message } });
  }

  /** The API's JSON error; an answer that is not ragtrail's (an HTML page) is code "not_ragtrail", naming baseUrl. */
  private errorBody(response: Response, raw: string): ErrorBody {
    try {
      const body = JSON.parse(raw);
      if (body && typeof body.error === "object" && body.error !== null) return body;
    } catch {
      // not JSON: said below
    }
    const kind = (response.headers.get("content-type") ?? "no content type").split(";")[0];
    return {
      error: {
        code: "not_ragtrail",
        message:
          `${this.baseUrl} answered ${response.status} with ${kind}, not ragtrail's JSON: is baseUrl the address ` +
          "ragtrail serves at (its root, e.g. http://127.0.0.1:8000, without /api/v1)?",
      },
    };
  }

  private failure(problem: unknown): { error: RagtrailError; code: string; refused: boolean } {
    const causes: any[] = [];
    for (let seen: any = problem; seen && causes.length < 5; seen = seen.cause) causes.push(seen);
    const codes = causes.map((c) => String(c.code ?? ""));
    const text = causes.map((c) => String(c.message ?? "")).join(" ");
    if (
      codes.some((c) => c.startsWith("ERR_SSL") || c.startsWith("ERR_TLS") || c.includes("CERT") || c === "EPROTO") ||
      /SSL|TLS|certificate/.test(text)
    ) {
      const tls = causes[causes.length - 1]?.message ?? text;
      const message =
        `the TLS handshake with ${this.baseUrl} failed (${tls}): is the server speaking plain HTTP to an https:// ` +
        "address, or is its certificate not trusted here?";
      return { error: new RagtrailError(0, { error: { code: "tls", message } }), code: "tls", refused: false };
    }
    if (codes.includes("ECONNREFUSED")) {
      // Nothing listens there: a retry within the deadline finds nothing either, so say it at once.
      const said = `could not reach ${this.baseUrl}: connection refused (is ragtrail running there?)`;
      return { error: new RagtrailError(0, null, said), code: "unreachable", refused: true };
    }
    const reason = causes[causes.length - 1]?.message || String(problem);
    return {
      error: new RagtrailError(0, null, `could not reach ${this.baseUrl}: ${reason}`),
      code: "unreachable",
      refused: false,
    };
  }

  /** The wait before the next attempt (ms); null where that would pass the deadline. */
  private delay(attempt: number, retryAfter: string | null, deadline: number): number | null {
    let wait = this.backoffMs * 2 ** attempt * (0.5 + Math.random() / 2);
    if (retryAfter && /^\d+$/.test(retryAfter)) wait = Math.max(wait, Math.min(Number(retryAfter), 30) * 1000);
    return performance.now() + wait >= deadline ? null : wait;
  }

  private deadlineError(budgetMs: number): RagtrailError {
    const seconds = budgetMs / 1000;
    const said = Math.round(seconds * 10) === seconds * 10 ? seconds.toFixed(1) : String(seconds);
    const message = `deadline exceeded after ${said} s: ${this.baseUrl} did not answer`;
    return new RagtrailError(0, { error: { code: "deadline", message } });
  }
}

function recallCall(
  body: Record<string, unknown>,
  tokenBudget: number | undefined,
  scope: string | undefined,
): Call<Recall> {
  if (tokenBudget !== undefined) body.token_budget = tokenBudget;
  return { method: "POST", parts: ["recall"], body, scope, safe: true, recall: true, parse: (_, b) => recallFrom(b) };
}

/** A field a ragtrail answer always has, else `MissingField`. */
class MissingField extends Error {}

function required(b: any, name: string): any {
  if (b?.[name] === undefined || b[name] === null) throw new MissingField(`no "${name}"`);
  return b[name];
}

function recallFrom(b: any): Recall {
  if (!["prefetch", "hint", "miss"].includes(b.outcome)) throw new MissingField('no "outcome"');
  return {
    outcome: b.outcome,
    hit: b.outcome !== "miss",
    recallId: b.recall_id ?? null,
    trailId: b.trail_id ?? null,
    matcher: b.matcher ?? null,
    similarity: b.similarity ?? null,
    matchedQuery: b.matched_query ?? null,
    sections: (b.sections ?? []).map((s: any) => ({
      id: s.id,
      status: s.status,
      text: s.text ?? null,
      tokens: s.tokens ?? null,
      truncated: s.truncated ?? null,
      hash: s.hash ?? null,
    })),
    steps: (b.steps ?? []).map((s: any) => ({ tool: s.tool, args: s.args ?? {}, sectionIds: s.section_ids ?? [] })),
    hint: b.hint ?? null,
    tokens: b.tokens ?? 0,
    truncated: b.truncated ?? false,
    explanation: b.explanation ?? null,
    secondChance:
      b.second_chance && typeof b.second_chance === "object"
        ? { given: Boolean(b.second_chance.given), reason: String(b.second_chance.reason ?? "") }
        : null,
    secondChancePossible: b.second_chance_possible === true,
  };
}

function toolBody(tool: string, args: Record<string, unknown>, context?: Record<string, unknown>, caller?: string) {
  const body: Record<string, unknown> = { tool, args, context: context ?? {} };
  if (caller !== undefined) body.caller = caller;
  return body;
}

function path(call: Call<unknown>, scope: string | undefined): string {
  const parts = (call.scoped ?? true) ? [scope ?? "", ...call.parts] : call.parts;
  const quoted = parts.map((p) => encodeURIComponent(p)).join("/");
  const query = call.query
    ? "?" + new URLSearchParams(Object.entries(call.query).map(([k, v]): [string, string] => [k, String(v)])).toString()
    : "";
  return ((call.scoped ?? true) ? "/api/v1/scopes/" : "/api/v1/") + quoted + query;
}

/** The server's root: the API's own path ("/api/v1"), the commonest first mistake, is dropped. */
function serverRoot(baseUrl: string): string {
  const root = baseUrl.replace(/\/+$/, "");
  return root.endsWith("/api/v1") ? root.slice(0, -"/api/v1".length).replace(/\/+$/, "") : root;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}
