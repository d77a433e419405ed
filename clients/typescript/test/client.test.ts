// The TypeScript client against a live ragtrail (RAGTRAIL_URL, RAGTRAIL_API_KEY for a scope
// "hospital": tests/client/test_typescript_client.py starts one), and against stand-in servers
// that hang, refuse, fail, redirect or answer HTML, for the deadlines and errors.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createTcpServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";

import { RagtrailClient, RagtrailError } from "../src/index.js";

const URL_ = process.env.RAGTRAIL_URL;
const KEY = process.env.RAGTRAIL_API_KEY;
const live = {
  skip:
    !URL_ || !KEY
      ? "no live server: set RAGTRAIL_URL and RAGTRAIL_API_KEY (as tests/client/test_typescript_client.py does)"
      : false,
};

const VISITING = {
  "visiting/icu": "Intensive care visiting hours are 14:00 to 16:00, two visitors at a time.",
  "visiting/ward": "General ward visiting hours are 10:00 to 20:00.",
  parking: "Visitors park in car park B; the first hour is free.",
};
const QUESTION = "What are the ICU visiting hours?";

async function rejection(promise: Promise<unknown>): Promise<RagtrailError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof RagtrailError, `not a RagtrailError: ${error}`);
    return error;
  }
  assert.fail("the call did not fail");
}

describe("against a live ragtrail", live, () => {
  const client = () =>
    new RagtrailClient(URL_!, { apiKey: KEY!, scope: "hospital", timeoutMs: 10_000, recallTimeoutMs: 10_000 });

  test("an agent recalls a miss, records the path and is served the sections after", async () => {
    const ragtrail = client();
    const put = await ragtrail.putSections(VISITING);
    const hashes = put.hashes;
    assert.deepEqual([...put.changed_ids].sort(), Object.keys(VISITING).sort());
    const stored = await ragtrail.getSection("visiting/icu");
    assert.deepEqual([stored.text, stored.hash, stored.anchor], [VISITING["visiting/icu"], hashes["visiting/icu"], ""]);
    assert.equal((await ragtrail.recall(QUESTION)).outcome, "miss");
    const recorded = await ragtrail.record(QUESTION, ["visiting/icu"], {
      signal: "accepted",
      hashes: { "visiting/icu": hashes["visiting/icu"] },
      steps: [{ tool: "search", args: { query: "ICU visiting" }, sectionIds: ["visiting/icu"] }],
    });
    assert.equal(recorded.status, "active");
    assert.equal(recorded.created, true);
    const again = await ragtrail.recall("what are the ICU visiting hours");
    assert.equal(again.outcome, "prefetch");
    assert.equal(again.trailId, recorded.trailId);
    assert.deepEqual(
      again.sections.map((s) => [s.id, s.text, s.hash]),
      [["visiting/icu", VISITING["visiting/icu"], hashes["visiting/icu"]]],
    );
    assert.deepEqual(again.steps, [{ tool: "search", args: { query: "ICU visiting" }, sectionIds: ["visiting/icu"] }]);
    const verdict = await ragtrail.feedback(again.recallId!, false, { reason: "it answered the ward" });
    assert.deepEqual([verdict.trailStatus, verdict.falseHitReporters], ["active", 1]);
  });

  test("a key's only scope is looked up, and a base URL ending in /api/v1/ is the same server", async () => {
    const bare = new RagtrailClient(URL_! + "/api/v1/", { apiKey: KEY!, recallTimeoutMs: 10_000 });
    assert.equal(bare.baseUrl, URL_!.replace(/\/$/, ""));
    assert.deepEqual(await bare.scopes(), [{ slug: "hospital", name: "" }]);
    assert.equal((await bare.recall("Where do visitors park?")).outcome, "miss");
    assert.equal(bare.scope, "hospital");
  });

  test("explain says why a look-alike missed and counts nothing", async () => {
    const answer = await client().explain("What are the general ward visiting hours?");
    assert.equal(answer.outcome, "miss");
    assert.equal(answer.recallId, null);
    assert.match(String(answer.explanation?.summary), /similar enough/);
  });

  test("the API's errors carry its body: status, code and field", async () => {
    const ragtrail = client();
    const conflict = await rejection(
      ragtrail.record("Where do visitors park?", ["parking"], {
        signal: "accepted",
        hashes: { parking: "0".repeat(64) },
      }),
    );
    assert.deepEqual([conflict.status, conflict.field], [409, "hashes"]);
    const invalid = await rejection(ragtrail.recall(""));
    assert.deepEqual([invalid.status, invalid.code, invalid.field], [422, "invalid", "query"]);
    assert.match(invalid.message, /^422 invalid: .*\(field: query\)$/);
    const elsewhere = await rejection(ragtrail.recall("anything", { scope: "another-tenant" }));
    assert.deepEqual([elsewhere.status, elsewhere.body.error?.code], [404, "not_found"]);
    await assert.rejects(
      ragtrail.record(QUESTION, ["visiting/icu"], { signal: "yes" as never }),
      /signal must be one of accepted, user, verifier, pending/,
    );
  });

  test("a base URL that is not ragtrail's gets an error naming it", async () => {
    const wrong = new RagtrailClient(URL_! + "/ops", { apiKey: KEY!, scope: "hospital", recallTimeoutMs: 10_000 });
    const refused = await rejection(wrong.recall(QUESTION));
    assert.equal(refused.status, 404);
    assert.ok(
      refused.message.startsWith(`404 not_ragtrail: ${wrong.baseUrl} answered 404 with text/html, not ragtrail's JSON`),
      refused.message,
    );
  });

  test("a tool's result is stored where the policy allows and served until its section changes", async () => {
    const ragtrail = client();
    const { hashes } = await ragtrail.putSections({ parking: VISITING.parking });
    await ragtrail.putToolPolicies([{ tool: "read", cacheable: true, ttl_s: 600 }]);
    assert.equal((await ragtrail.lookupToolResult("read", { id: "parking" })).hit, false);
    const stored = await ragtrail.storeToolResult(
      "read",
      { id: "parking" },
      { text: VISITING.parking },
      { sections: { parking: hashes.parking } },
    );
    assert.equal(stored.stored, true);
    assert.deepEqual((await ragtrail.lookupToolResult("read", { id: "parking" })).result, { text: VISITING.parking });
    await ragtrail.putSections({ parking: "Car park B is closed." });
    assert.equal((await ragtrail.lookupToolResult("read", { id: "parking" })).hit, false);
  });
});

// A scope that gives second chances (embedding matching, a 0.1 margin) holding a path for
// "How do I cancel my subscription?" that cites billing/cancel; its key in RAGTRAIL_SECOND_CHANCE_API_KEY.
const SECOND_CHANCE_KEY = process.env.RAGTRAIL_SECOND_CHANCE_API_KEY;
const secondChanceLive = {
  skip:
    !URL_ || !SECOND_CHANCE_KEY
      ? "no live scope with second chances: set RAGTRAIL_URL and RAGTRAIL_SECOND_CHANCE_API_KEY (as tests/client/test_typescript_client.py does)"
      : false,
};

describe("a second chance against a live ragtrail", secondChanceLive, () => {
  const client = () =>
    new RagtrailClient(URL_!, {
      apiKey: SECOND_CHANCE_KEY!,
      scope: "helpdesk",
      timeoutMs: 10_000,
      recallTimeoutMs: 10_000,
    });
  const asked = "How do I stop my subscription?";

  test("a miss says whether a second chance is possible", async () => {
    const ragtrail = client();
    const near = await ragtrail.recall(asked);
    assert.deepEqual([near.outcome, near.secondChancePossible], ["miss", true]);
    const unrelated = await ragtrail.recall("Where is the car park?");
    assert.deepEqual([unrelated.outcome, unrelated.secondChancePossible], ["miss", false]);
  });

  test("a near miss whose search found the cited section is served once, as a second chance", async () => {
    const ragtrail = client();
    const missed = await ragtrail.recall(asked);
    assert.deepEqual([missed.outcome, missed.secondChance], ["miss", null]);
    const given = await ragtrail.secondChance(missed.recallId!, ["billing/cancel", "billing/refunds", "billing/cancel"]);
    assert.deepEqual([given.outcome, given.matcher, given.hit], ["prefetch", "second-chance", true]);
    assert.equal(given.matchedQuery, "How do I cancel my subscription?");
    assert.equal(given.secondChance?.given, true);
    assert.deepEqual(given.sections.map((s) => s.id), ["billing/cancel"]);
    const again = await rejection(ragtrail.secondChance(missed.recallId!, ["billing/cancel"]));
    assert.deepEqual([again.status, again.code, again.field], [409, "conflict", "recall_id"]);
  });

  test("a search that did not find the cited section gets a miss and the reason", async () => {
    const ragtrail = client();
    const missed = await ragtrail.recall(asked);
    const answer = await ragtrail.secondChance(missed.recallId!, ["billing/refunds"], { tokenBudget: 500 });
    assert.deepEqual([answer.outcome, answer.sections, answer.secondChance?.given], ["miss", [], false]);
    assert.match(answer.secondChance!.reason, /not among the search's first 3/);
    const elsewhere = await rejection(ragtrail.secondChance("00000000-0000-0000-0000-000000000000", ["x"]));
    assert.equal(elsewhere.status, 404);
  });
});

type Answer = (request: IncomingMessage, response: ServerResponse) => void;

/** A stand-in HTTP server; every request kept as "METHOD path". */
async function standIn(answer: Answer): Promise<{ url: string; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((request, response) => {
    seen.push(`${request.method} ${request.url}`);
    request.resume();
    request.on("end", () => answer(request, response));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

function json(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  response.writeHead(status, { "Content-Type": "application/json", ...headers });
  response.end(JSON.stringify(body));
}

const MISS = { outcome: "miss", recall_id: null, trail_id: null, sections: [], steps: [], tokens: 0, truncated: false };

/** A server that accepts connections and never answers (a frozen process behind a proxy). */
async function hung(): Promise<string> {
  const sockets: Socket[] = [];
  const server = createTcpServer((socket) => void sockets.push(socket));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => {
    sockets.forEach((s) => s.destroy());
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An address nothing listens at. */
async function refusing(): Promise<string> {
  const server = createTcpServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

describe("deadlines and errors", () => {
  test("a hung server costs a recall one second, and the error says so", async () => {
    const url = await hung();
    const started = performance.now();
    const late = await rejection(new RagtrailClient(url, { apiKey: "rt_x", scope: "s" }).recall(QUESTION));
    const elapsed = performance.now() - started;
    assert.deepEqual([late.status, late.code], [0, "deadline"]);
    assert.equal(late.message, `deadline exceeded after 1.0 s: ${url} did not answer`);
    assert.ok(elapsed > 900 && elapsed < 1500, `${elapsed} ms`);
  });

  test("every call ends by its deadline, the scope lookup, retries and waits included", async () => {
    const url = await hung();
    const client = new RagtrailClient(url, { apiKey: "rt_x", retries: 5, backoffMs: 300 }); // no scope: the lookup hangs too
    for (const call of [
      () => client.getSection("s1"),
      () => client.record(QUESTION, ["s1"], { signal: "accepted" }),
      () => client.lookupToolResult("search", { q: "x" }),
    ]) {
      const started = performance.now();
      const late = await rejection(call());
      assert.equal(late.code, "deadline");
      assert.ok(performance.now() - started < 1600, `${performance.now() - started} ms`);
    }
  });

  test("a refused connection fails at once, without a retry", async () => {
    const url = await refusing();
    let attempts = 0;
    const counting: typeof fetch = (input, init) => {
      attempts++;
      return fetch(input, init);
    };
    const client = new RagtrailClient(url, { apiKey: "rt_x", scope: "s", retries: 3, backoffMs: 200, fetch: counting });
    const refused = await rejection(client.getSection("s1"));
    assert.deepEqual([refused.status, refused.code, attempts], [0, "unreachable", 1]);
    assert.equal(refused.message, `could not reach ${url}: connection refused (is ragtrail running there?)`);
  });

  test("safe calls are retried on 503 and unsafe ones are not", async () => {
    let failures = 2;
    const { url, seen } = await standIn((_, response) =>
      failures-- > 0
        ? json(
            response,
            503,
            { error: { code: "unavailable", message: "database unavailable" } },
            { "Retry-After": "0" },
          )
        : json(response, 200, MISS),
    );
    const client = new RagtrailClient(url, { apiKey: "rt_x", scope: "s", backoffMs: 1 });
    assert.equal((await client.recall("anything")).outcome, "miss");
    assert.equal(seen.length, 3);
    failures = 1;
    const refused = await rejection(client.feedback("00000000-0000-0000-0000-000000000000", false));
    assert.deepEqual([refused.status, refused.code, seen.length], [503, "unavailable", 4]);
  });

  test("the key's only scope is asked once and kept", async () => {
    const { url, seen } = await standIn((request, response) =>
      json(response, 200, request.url === "/api/v1/scopes" ? { scopes: [{ slug: "only", name: "Only" }] } : MISS),
    );
    const client = new RagtrailClient(url, { apiKey: "rt_x" });
    for (let i = 0; i < 3; i++) assert.equal((await client.recall("anything")).outcome, "miss");
    assert.deepEqual(seen, ["GET /api/v1/scopes", ...Array(3).fill("POST /api/v1/scopes/only/recall")]);
  });

  test("a redirect is said as one and not followed", async () => {
    const { url, seen } = await standIn((_, response) => {
      response.writeHead(308, { Location: "https://ragtrail.example.org/api/v1/scopes/s/recall" });
      response.end();
    });
    const redirected = await rejection(new RagtrailClient(url, { apiKey: "rt_x", scope: "s" }).recall("anything"));
    assert.deepEqual([redirected.status, redirected.code], [308, "redirect"]);
    assert.match(redirected.message, /https:\/\/ragtrail\.example\.org/);
    assert.deepEqual(seen, ["POST /api/v1/scopes/s/recall"]);
  });

  test("a page that is not ragtrail's JSON is code not_ragtrail at any status, naming the base URL", async () => {
    for (const status of [200, 404, 500]) {
      const { url } = await standIn((_, response) => {
        response.writeHead(status, { "Content-Type": "text/html; charset=utf-8" });
        response.end("<!DOCTYPE html><html>Welcome</html>");
      });
      const wrong = await rejection(new RagtrailClient(url, { apiKey: "rt_x", scope: "s" }).recall("anything"));
      assert.deepEqual([wrong.status, wrong.code], [status, "not_ragtrail"]);
      assert.ok(wrong.message.includes(`${url} answered ${status} with text/html, not ragtrail's JSON`), wrong.message);
    }
    const scheme = await rejection(
      new RagtrailClient("127.0.0.1:8000", { apiKey: "rt_x", scope: "s" }).recall("anything"),
    );
    assert.deepEqual([scheme.status, scheme.code], [0, "bad_url"]);
  });

  test("an https address of a plain HTTP server is said as a TLS failure", async () => {
    const { url } = await standIn((_, response) => json(response, 200, MISS));
    const failed = await rejection(
      new RagtrailClient(url.replace("http://", "https://"), { apiKey: "rt_x", scope: "s" }).getSection("s1"),
    );
    assert.deepEqual([failed.status, failed.code], [0, "tls"]);
    assert.doesNotMatch(failed.message, /could not reach/);
  });

  test("a success without ragtrail's fields is an error, not an answer", async () => {
    const { url } = await standIn((request, response) => {
      if (request.url?.includes("/empty/")) {
        response.writeHead(200, { "Content-Type": "application/json" });
        return response.end();
      }
      json(response, 200, { status: "ok", service: "search", results: [] });
    });
    const client = new RagtrailClient(url, { apiKey: "rt_x", scope: "s" });
    for (const call of [
      () => client.recall("anything"),
      () => client.record(QUESTION, ["s1"], { signal: "accepted" }),
      () => client.scopes(),
      () => client.recall("anything", { scope: "empty" }),
    ]) {
      const wrong = await rejection(call());
      assert.deepEqual([wrong.status, wrong.code], [200, "not_ragtrail"]);
      assert.match(wrong.message, /answered 200 with (JSON without ragtrail's fields|an empty body)/);
    }
    const empty = await rejection(client.recall("anything", { scope: "empty" }));
    assert.match(empty.message, /an empty body/);
  });

  test("a miss from a server that does not say a second chance is possible reads as not possible", async () => {
    const { url } = await standIn((request, response) =>
      json(response, 200, request.url?.includes("/newer/") ? { ...MISS, second_chance_possible: true } : MISS),
    );
    const client = new RagtrailClient(url, { apiKey: "rt_x", scope: "older" });
    assert.equal((await client.recall("anything")).secondChancePossible, false);
    assert.equal((await client.recall("anything", { scope: "newer" })).secondChancePossible, true);
  });

  test("the global fetch is called as a plain function, as browsers require", async () => {
    const { url } = await standIn((_, response) => json(response, 200, MISS));
    const real = globalThis.fetch;
    const strict = function (this: unknown, input: string | URL | Request, init?: RequestInit) {
      if (this !== undefined && this !== globalThis) throw new TypeError("Illegal invocation");
      return real(input, init);
    } as typeof fetch;
    globalThis.fetch = strict;
    try {
      assert.equal((await new RagtrailClient(url, { apiKey: "rt_x", scope: "s" }).recall("anything")).outcome, "miss");
    } finally {
      globalThis.fetch = real;
    }
    const given = new RagtrailClient(url, { apiKey: "rt_x", scope: "s", fetch: strict });
    assert.equal((await given.recall("anything")).outcome, "miss");
  });

  test("the deadline holds when a fetch ignores the abort signal", async () => {
    const deaf: typeof fetch = () => new Promise<Response>(() => undefined); // never settles, whatever the signal says
    const client = new RagtrailClient("http://127.0.0.1:9", { apiKey: "rt_x", scope: "s", fetch: deaf });
    const never = new Promise<string>((resolve) => setTimeout(() => resolve("never returned"), 5000).unref());
    const ended = await Promise.race([client.recall("anything").catch((error: unknown) => error), never]);
    assert.ok(ended instanceof RagtrailError, String(ended));
    assert.equal(ended.code, "deadline");
  });
});
