//! `breeze chat`: the AI assistant in a terminal, on the same REST API as the dashboard's chat.
//!
//! It signs in to a running Breeze (`BREEZE_URL`, or the demo's `base_url`, or
//! `http://127.0.0.1:3000`) as a person (`--user` / `BREEZE_USER` with `BREEZE_PASSWORD`, or the
//! demo's admin from `demo.json` in the data directory, or a password typed on stdin): the
//! assistant acts only for a signed-in person, never for an API key. Each line read is a
//! message; its answer streams as it comes (`POST /api/v1/ai/sessions/{id}/messages`, an event
//! stream), each tool call as a card with its input and result, and a call waiting for
//! approval asks `y/n` and decides it with `POST …/approve/{execution}`. `/quit` or end of
//! input ends the chat; the session stays (`--session ID` continues it).

use std::{collections::BTreeMap, io::Write, path::PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest tool input or result shown on a card; the rest is elided.
const CARD_CHARS: usize = 1_500;

/// `breeze chat`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    /// The organization (slug or id); needed when you reach several.
    #[arg(long)]
    org: Option<String>,
    /// Continue this chat session instead of starting a new one.
    #[arg(long)]
    session: Option<String>,
    /// The Breeze server [env: BREEZE_URL; default: the demo's, else http://127.0.0.1:3000].
    #[arg(long)]
    url: Option<String>,
    /// Your email [env: BREEZE_USER; default: the demo's admin]; the password comes from
    /// BREEZE_PASSWORD, the demo's demo.json, or is read from stdin.
    #[arg(long)]
    user: Option<String>,
}

/// Where the chat reaches and as whom.
struct Target {
    url: String,
    email: String,
    password: Option<String>,
}

/// The demo's `demo.json` in the data directory (`BREEZE_DATA_DIR`, default `./breeze-data`).
fn demo_json(env: &BTreeMap<String, String>) -> Option<Value> {
    let dir = env
        .get("BREEZE_DATA_DIR")
        .map_or_else(|| PathBuf::from("breeze-data"), PathBuf::from);
    let bytes = std::fs::read(dir.join("demo.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn target(args: &ChatArgs, env: &BTreeMap<String, String>) -> anyhow::Result<Target> {
    let demo = demo_json(env);
    let demo_str = |path: &[&str]| {
        let mut v = demo.as_ref()?;
        for p in path {
            v = v.get(p)?;
        }
        v.as_str().map(str::to_owned)
    };
    let url = args
        .url
        .clone()
        .or_else(|| env.get("BREEZE_URL").cloned())
        .or_else(|| demo_str(&["base_url"]))
        .unwrap_or_else(|| "http://127.0.0.1:3000".to_owned());
    let url = url.trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("invalid server URL {url:?} (expected http(s)://host[:port])");
    }
    let Some(email) = args
        .user
        .clone()
        .or_else(|| env.get("BREEZE_USER").cloned())
        .or_else(|| demo_str(&["admin", "email"]))
    else {
        bail!("who are you? give --user EMAIL (or BREEZE_USER), with BREEZE_PASSWORD");
    };
    let password = env.get("BREEZE_PASSWORD").cloned().or_else(|| {
        (demo_str(&["admin", "email"]).as_deref() == Some(email.as_str()))
            .then(|| demo_str(&["admin", "password"]))
            .flatten()
    });
    Ok(Target {
        url,
        email,
        password,
    })
}

/// A signed-in conversation with the server.
struct Client {
    http: reqwest::Client,
    url: String,
    cookie: String,
}

impl Client {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .header(reqwest::header::COOKIE, &self.cookie)
    }

    /// `method path` with a JSON body, answered with JSON; a refusal is an error naming the
    /// server's message.
    async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.request(method, path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req
            .send()
            .await
            .with_context(|| format!("cannot reach {}{path}", self.url))?;
        answer(res).await
    }
}

async fn answer(res: reqwest::Response) -> anyhow::Result<Value> {
    let status = res.status();
    let text = res.text().await.unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        let message = v["error"]["message"]
            .as_str()
            .or(v["error"].as_str())
            .or(v["message"].as_str())
            .unwrap_or(text.as_str());
        bail!("{status}: {message}");
    }
    Ok(v)
}

/// Reads one line of `input`; `None` at its end.
async fn line(input: &mut (impl AsyncBufRead + Unpin)) -> anyhow::Result<Option<String>> {
    let mut s = String::new();
    if input.read_line(&mut s).await? == 0 {
        return Ok(None);
    }
    Ok(Some(s.trim_end_matches(['\r', '\n']).to_owned()))
}

/// `text` held to `max` characters.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}… ({} more bytes)", &text[..cut], text.len() - cut),
        None => text.to_owned(),
    }
}

fn compact(v: &Value) -> String {
    match v {
        // A tool result is the JSON text handed to the model: show the JSON.
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `breeze chat`: reads messages from `input`, writes the conversation to `out`.
pub(crate) async fn run(
    args: ChatArgs,
    env: &BTreeMap<String, String>,
    mut input: impl AsyncBufRead + Unpin,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let t = target(&args, env)?;
    let password = match t.password {
        Some(p) => p,
        None => {
            eprint!("Password for {}: ", t.email);
            line(&mut input).await?.context("no password given")?
        }
    };
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()?;
    let res = http
        .post(format!("{}/api/v1/auth/login", t.url))
        .json(&json!({ "email": t.email, "password": password }))
        .send()
        .await
        .with_context(|| format!("cannot reach Breeze at {} (is it running?)", t.url))?;
    let cookie = res
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| {
            let pair = c.split(';').next()?.trim();
            pair.starts_with("breeze_session=").then(|| pair.to_owned())
        });
    answer(res).await.context("sign-in failed")?;
    let client = Client {
        http,
        url: t.url.clone(),
        cookie: cookie.context("sign-in answered no session cookie")?,
    };
    let mut session = match &args.session {
        Some(id) => {
            let s = client
                .json(
                    reqwest::Method::GET,
                    &format!("/api/v1/ai/sessions/{id}"),
                    None,
                )
                .await
                .context("--session")?;
            writeln!(
                out,
                "Continuing \"{}\" ({}).",
                s["session"]["title"].as_str().unwrap_or_default(),
                s["session"]["status"].as_str().unwrap_or_default()
            )?;
            Some(id.clone())
        }
        None => None,
    };
    writeln!(
        out,
        "Breeze assistant at {} as {}. Type a message; /quit to leave.",
        t.url, t.email
    )?;
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let Some(text) = line(&mut input).await? else {
            break;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if text == "/quit" || text == "/exit" {
            break;
        }
        let id = match &session {
            Some(id) => id.clone(),
            None => {
                let title: String = text.chars().take(60).collect();
                let s = client
                    .json(
                        reqwest::Method::POST,
                        "/api/v1/ai/sessions",
                        Some(json!({ "org": args.org, "title": title })),
                    )
                    .await
                    .context("cannot open a chat session")?;
                let id = s["id"].as_str().context("no session id")?.to_owned();
                writeln!(out, "(session {id})")?;
                session = Some(id.clone());
                id
            }
        };
        turn(&client, &id, text, &mut input, out).await?;
    }
    // Best effort: the session cookie is not left valid behind us.
    let _ = client
        .request(reqwest::Method::POST, "/api/v1/auth/logout")
        .send()
        .await;
    Ok(())
}

/// One message and its streamed answer, asking `y/n` for each call that waits for approval.
async fn turn(
    client: &Client,
    session: &str,
    text: &str,
    input: &mut (impl AsyncBufRead + Unpin),
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut res = client
        .request(
            reqwest::Method::POST,
            &format!("/api/v1/ai/sessions/{session}/messages"),
        )
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(&json!({ "content": text }))
        .send()
        .await?;
    if !res.status().is_success() {
        return answer(res).await.map(drop);
    }
    let mut buffer = String::new();
    let mut mid_line = false;
    while let Some(chunk) = res.chunk().await? {
        buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        while let Some(at) = buffer.find("\n\n") {
            let block: String = buffer.drain(..at + 2).collect();
            let (mut name, mut data) = (String::new(), String::new());
            for l in block.lines() {
                if let Some(n) = l.strip_prefix("event:") {
                    name = n.trim().to_owned();
                } else if let Some(d) = l.strip_prefix("data:") {
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            let e: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            let mut newline = |out: &mut dyn Write| -> std::io::Result<()> {
                if mid_line {
                    writeln!(out)?;
                    mid_line = false;
                }
                Ok(())
            };
            match name.as_str() {
                "content_delta" => {
                    write!(out, "{}", e["delta"].as_str().unwrap_or_default())?;
                    out.flush()?;
                    mid_line = true;
                }
                "message_end" => newline(out)?,
                "tool_use_start" => {
                    newline(out)?;
                    writeln!(
                        out,
                        "┌ tool {}  {}",
                        e["toolName"].as_str().unwrap_or_default(),
                        clip(&compact(&e["input"]), CARD_CHARS)
                    )?;
                }
                "tool_result" => {
                    newline(out)?;
                    let what = if e["isError"] == true {
                        "error"
                    } else {
                        "result"
                    };
                    writeln!(
                        out,
                        "└ {what}  {}",
                        clip(&compact(&e["output"]), CARD_CHARS)
                    )?;
                }
                "approval_required" => {
                    newline(out)?;
                    writeln!(
                        out,
                        "│ needs approval: {}",
                        e["description"].as_str().unwrap_or_default()
                    )?;
                    let approve = loop {
                        write!(out, "│ Approve? [y/n] ")?;
                        out.flush()?;
                        match line(input).await?.as_deref().map(str::trim) {
                            Some("y" | "Y" | "yes") => break true,
                            Some("n" | "N" | "no") | None => break false,
                            Some(_) => {}
                        }
                    };
                    let execution = e["executionId"].as_str().unwrap_or_default();
                    let body = if approve {
                        json!({ "approve": true })
                    } else {
                        json!({ "approve": false, "reason": "rejected in breeze chat" })
                    };
                    match client
                        .json(
                            reqwest::Method::POST,
                            &format!("/api/v1/ai/sessions/{session}/approve/{execution}"),
                            Some(body),
                        )
                        .await
                    {
                        Ok(_) if approve => writeln!(out, "│ approved; running…")?,
                        Ok(_) => writeln!(out, "│ rejected")?,
                        Err(err) => writeln!(out, "│ the decision failed: {err:#}")?,
                    }
                }
                "error" => {
                    newline(out)?;
                    writeln!(
                        out,
                        "error: {}",
                        e["message"].as_str().unwrap_or("the assistant failed")
                    )?;
                }
                "done" => {
                    newline(out)?;
                    return Ok(());
                }
                _ => {}
            }
        }
    }
    if mid_line {
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_falls_back_to_the_demo() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("demo.json"),
            r#"{"base_url":"http://127.0.0.1:3999","admin":{"email":"a@b.c","password":"pw"}}"#,
        )
        .unwrap();
        let env: BTreeMap<String, String> = [(
            "BREEZE_DATA_DIR".to_owned(),
            dir.path().display().to_string(),
        )]
        .into();
        let args = ChatArgs {
            org: None,
            session: None,
            url: None,
            user: None,
        };
        let t = target(&args, &env).unwrap();
        assert_eq!(
            (t.url.as_str(), t.email.as_str(), t.password.as_deref()),
            ("http://127.0.0.1:3999", "a@b.c", Some("pw"))
        );
        // Another person: the demo's password is not theirs.
        let args = ChatArgs {
            user: Some("x@y.z".into()),
            url: Some("ftp://nope".into()),
            ..args
        };
        assert!(target(&args, &env).is_err(), "not an http URL");
        let args = ChatArgs { url: None, ..args };
        assert_eq!(target(&args, &env).unwrap().password, None);
        assert_eq!(clip("abcdef", 3), "abc… (3 more bytes)");
    }
}
