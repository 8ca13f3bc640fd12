//! `breeze chat` end to end: the demo served with the stand-in model provider, and the chat
//! signing in as the demo's admin, streaming the answer, showing the tool call as a card and
//! asking y/n for the Tier 3 call it then approves, on the same REST API as the dashboard.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{
    io::Write,
    process::{Command, Stdio},
};

mod common;
#[path = "../../assistant/tests/stand_in/mod.rs"]
mod stand_in;

use common::{Server, breeze, free_port};
use stand_in::{Scripted, StandIn, anthropic};

#[test]
fn chat_streams_shows_tool_cards_and_approves_with_y() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime.block_on(StandIn::start());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = Server::start_with(
        dir.path(),
        port,
        "demo",
        &[
            ("BREEZE_DEMO_AGENT", "false"),
            ("BREEZE_AI_PROVIDER", "anthropic"),
            ("BREEZE_AI_API_KEY", "sk-stand-in"),
            ("BREEZE_AI_BASE_URL", &provider.url),
        ],
    );
    provider.script([
        Scripted::stream(anthropic::tools(
            "I'll create the group.",
            &[(
                "toolu_1",
                "manage_groups",
                &["{\"action\":\"create\",", "\"name\":\"web servers\"}"],
            )],
            100,
            20,
        )),
        Scripted::stream(anthropic::text(&["Created ", "the group."], 150, 8)),
    ]);
    let mut chat: Command = breeze(dir.path());
    chat.args(["chat", "--org", "acme"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = chat.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"make a group of the web servers\ny\n/quit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for expected in [
        "as admin@breeze.local",
        "I'll create the group.",
        "┌ tool manage_groups",
        "\"name\":\"web servers\"",
        "needs approval",
        "Approve? [y/n]",
        "approved; running",
        "└ result",
        "Created the group.",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing in:\n{stdout}\n{stderr}"
        );
    }
    assert_eq!(provider.received().len(), 2, "the model saw the result");
    let second = &provider.received()[1].body;
    let messages = second["messages"].as_array().unwrap();
    let results = &messages[messages.len() - 1];
    assert_eq!(results["content"][0]["tool_use_id"], "toolu_1");
    assert_ne!(results["content"][0]["is_error"], true, "{results}");
}
