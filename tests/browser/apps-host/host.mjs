// The host page of apps.test.mjs, bundled by esbuild at test time: the ext-apps package's own
// host-side bridge (AppBridge over PostMessageTransport) in front of one sandboxed iframe. The
// bridge holds no MCP client: the test's Node side is the MCP client (window.hostCallTool,
// window.hostOpenLink are functions it exposed), so every call a view makes goes to Breeze as
// the host's connection.
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

let bridge;

window.showView = async ({ src, args, result, theme, width }) => {
  if (bridge) await bridge.close().catch(() => {});
  document.body.replaceChildren();
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.setAttribute("title", "MCP App view");
  frame.style.cssText = `border:0;width:${width}px;height:900px;display:block`;
  document.body.append(frame);
  bridge = new AppBridge(
    null,
    { name: "breeze-apps-test-host", version: "1.0.0" },
    { openLinks: {}, serverTools: {}, logging: {} },
    { hostContext: { theme, displayMode: "inline", platform: "web" } },
  );
  bridge.oncalltool = async (params) => window.hostCallTool(params);
  bridge.onopenlink = async ({ url }) => {
    await window.hostOpenLink(url);
    return {};
  };
  bridge.onsizechange = ({ height }) => {
    if (height) frame.style.height = `${Math.ceil(height)}px`;
  };
  const initialized = new Promise((resolve) => {
    bridge.oninitialized = resolve;
  });
  frame.src = src;
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  await initialized;
  await bridge.sendToolInput({ arguments: args });
  await bridge.sendToolResult(result);
};

