// The openai npm package, unmodified, against a live turnledger server (issue 37 point 2).
// node client.mjs BASE_URL: prints one JSON line of what the client saw; exits 1 on a mismatch.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.argv[2]}/v1`, apiKey: "unused", maxRetries: 0 });
const conversation = await client.conversations.create({
  items: [{ type: "message", role: "user", content: "hello from node" }],
  metadata: { runtime: "node" },
});
const added = await client.conversations.items.create(conversation.id, {
  items: [
    { type: "function_call", call_id: "c1", name: "lookup", arguments: "{\"q\":1}" },
    { type: "function_call_output", call_id: "c1", output: "found" },
    { type: "message", role: "assistant", content: "done" },
  ],
});
const listed = [];
for await (const item of client.conversations.items.list(conversation.id, { limit: 2, order: "asc" })) {
  listed.push(item);
}
const one = await client.conversations.items.retrieve(added.data[0].id, {
  conversation_id: conversation.id,
});
let notFound = 0;
try {
  await client.conversations.retrieve("conv_" + "0".repeat(32));
} catch (error) {
  notFound = error.status;
}
const retrieved = await client.conversations.retrieve(conversation.id);
const deleted = await client.conversations.delete(conversation.id);
console.log(JSON.stringify({
  id: conversation.id,
  metadata: retrieved.metadata,
  listed: listed.map((item) => [item.id, item.type]),
  added: added.data.map((item) => item.id),
  retrieved: [one.type, one.call_id, one.arguments],
  notFound,
  deleted: deleted.deleted,
}));
