// A stand-in for Anthropic's Messages API, for the browser tests: a local HTTP server that
// answers POST /v1/messages with a stream in the documented format ("Streaming Messages":
// message_start, content_block_start/delta/stop with text_delta and input_json_delta, ping,
// message_delta with usage, message_stop). Stateless, it answers from the conversation:
// - the last user turn is a tool result: a short text answer ("The tool answered: …");
// - the person asks to "group" something: some text, then a Tier 3 manage_groups create call
//   (a new name each time: a demo's data may be reused);
// - anything else: some text, then a Tier 1 query_devices call.
// Usage: node stand-in-anthropic.mjs PORT (prints "listening PORT" when ready).
import { createServer } from "node:http";

const port = Number(process.argv[2] || 0);
let calls = 0;

function event(data) {
  return `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;
}
function textBlock(index, pieces) {
  const out = [event({ type: "content_block_start", index, content_block: { type: "text", text: "" } })];
  for (const p of pieces) out.push(event({ type: "content_block_delta", index, delta: { type: "text_delta", text: p } }));
  out.push(event({ type: "content_block_stop", index }));
  return out;
}
function toolBlock(index, id, name, input) {
  const json = JSON.stringify(input);
  const half = Math.floor(json.length / 2);
  return [
    event({ type: "content_block_start", index, content_block: { type: "tool_use", id, name, input: {} } }),
    event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: "" } }),
    event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(0, half) } }),
    event({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(half) } }),
    event({ type: "content_block_stop", index }),
  ];
}
function start(input) {
  return event({ type: "message_start", message: {
    id: `msg_standin_${++calls}`, type: "message", role: "assistant", content: [],
    model: "claude-sonnet-4-5-20250929", stop_reason: null, stop_sequence: null,
    usage: { input_tokens: input, output_tokens: 1 } } });
}
function end(reason, output) {
  return [
    event({ type: "message_delta", delta: { stop_reason: reason, stop_sequence: null }, usage: { output_tokens: output } }),
    event({ type: "message_stop" }),
  ];
}

function answer(body) {
  const messages = body.messages || [];
  const last = messages[messages.length - 1] || {};
  const content = Array.isArray(last.content) ? last.content : [{ type: "text", text: String(last.content || "") }];
  const result = content.find((c) => c.type === "tool_result");
  if (result) {
    const text = typeof result.content === "string" ? result.content : JSON.stringify(result.content);
    return [start(1200), ...textBlock(0, ["The tool answered", result.is_error ? " with an error: " : ": ", text.slice(0, 120)]), event({ type: "ping" }), ...end("end_turn", 40)];
  }
  const asked = content.map((c) => c.text || "").join(" ");
  const id = `toolu_standin_${calls + 1}`;
  if (/group/i.test(asked)) {
    return [start(1000), ...textBlock(0, ["I'll create ", "that group for you."]),
      ...toolBlock(1, id, "manage_groups", { action: "create", name: `web servers ${Date.now().toString(36)}` }), ...end("tool_use", 30)];
  }
  return [start(1000), ...textBlock(0, ["Let me look ", "at your devices."]),
    ...toolBlock(1, id, "query_devices", { limit: 5 }), ...end("tool_use", 30)];
}

const server = createServer((req, res) => {
  let raw = "";
  req.on("data", (c) => { raw += c; });
  req.on("end", async () => {
    if (req.method !== "POST" || !req.url.endsWith("/v1/messages")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: req.url } }));
      return;
    }
    let body = {};
    try { body = JSON.parse(raw); } catch (_) { /* answered as an empty conversation */ }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const chunk of answer(body)) {
      res.write(chunk);
      await new Promise((r) => setTimeout(r, 15)); // streamed, not one write
    }
    res.end();
  });
});
server.listen(port, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
