import { RagtrailClient, RagtrailError } from "ragtrail-client";

const client = new RagtrailClient(process.env.RAGTRAIL_URL!, { apiKey: process.env.RAGTRAIL_API_KEY! }); // the key's one scope
const { hashes } = await client.putSections({
  "visiting/icu": "ICU visiting hours are 14:00 to 16:00 and 18:00 to 19:00, two visitors at a time.",
  "visiting/ward": "General ward visiting hours are 10:00 to 20:00.",
});

const question = "What are the ICU visiting hours?";
console.log((await client.recall(question)).outcome); // → miss

// Your agent searched, read the ICU section and answered; the user accepted the answer.
const recorded = await client.record(question, ["visiting/icu"], {
  signal: "accepted",
  hashes: { "visiting/icu": hashes["visiting/icu"] },
  steps: [{ tool: "search_docs", args: { query: "ICU visiting hours" }, sectionIds: ["visiting/icu"] }],
});
console.log(recorded.status); // → active

const answer = await client.recall(question);
console.log(answer.outcome, answer.sections.map((s) => s.id).join(",")); // → prefetch visiting/icu

// A hung or stopped ragtrail costs a recall one second; then the agent searches as usual.
const stopped = new RagtrailClient("http://127.0.0.1:9", { apiKey: process.env.RAGTRAIL_API_KEY! });
try {
  await stopped.recall(question);
} catch (error) {
  if (!(error instanceof RagtrailError) || error.status !== 0) throw error;
  console.log(error.code); // → unreachable
}
