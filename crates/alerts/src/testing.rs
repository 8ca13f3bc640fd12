//! Receivers for notification tests (feature `testing`): a minimal SMTP server and a webhook
//! endpoint on loopback, each keeping what it was sent, so a test can assert that an alert
//! really went out over the wire. Used by this crate's engine tests and by the end-to-end
//! scenario with the real agent.

use std::sync::{Arc, Mutex, PoisonError};

use axum::{Router, http::HeaderMap, http::StatusCode, routing::post};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

/// What a receiver kept, shared with the test.
pub type Kept<T> = Arc<Mutex<Vec<T>>>;

/// A copy of what `kept` holds now.
pub fn snapshot<T: Clone>(kept: &Kept<T>) -> Vec<T> {
    kept.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// A minimal SMTP server: enough of RFC 5321 for a client to hand over one message per
/// connection. Each message is kept as its envelope lines (`MAIL`, `RCPT`) then its DATA.
/// Returns the port on 127.0.0.1.
pub async fn smtp_server() -> std::io::Result<(u16, Kept<String>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let mail: Kept<String> = Arc::default();
    let kept = mail.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(smtp_session(socket, kept.clone()));
        }
    });
    Ok((port, mail))
}

async fn smtp_session(socket: TcpStream, kept: Kept<String>) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 test ESMTP\r\n").await?;
    let mut envelope = String::new();
    while let Some(line) = lines.next_line().await? {
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" | "HELO" => b"250-test\r\n250 8BITMIME\r\n",
            "MAIL" | "RCPT" => {
                envelope.push_str(&line);
                envelope.push('\n');
                b"250 OK\r\n"
            }
            "DATA" => {
                write.write_all(b"354 go ahead\r\n").await?;
                let mut data = std::mem::take(&mut envelope);
                while let Some(l) = lines.next_line().await? {
                    if l == "." {
                        break;
                    }
                    data.push_str(&l);
                    data.push('\n');
                }
                kept.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(data);
                b"250 queued\r\n"
            }
            "QUIT" => {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            "RSET" | "NOOP" => b"250 OK\r\n",
            _ => b"502 unknown\r\n",
        };
        write.write_all(reply).await?;
    }
    Ok(())
}

/// One request a webhook receiver got.
#[derive(Debug, Clone)]
pub struct Hook {
    pub headers: HeaderMap,
    pub body: String,
}

/// An HTTP receiver at `http://127.0.0.1:{port}/hook` that answers 500 to the first
/// `fail_first` requests, then 200, keeping every request.
pub async fn webhook_server(fail_first: usize) -> std::io::Result<(u16, Kept<Hook>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let seen: Kept<Hook> = Arc::default();
    let kept = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let mut seen = kept.lock().unwrap_or_else(PoisonError::into_inner);
                seen.push(Hook { headers, body });
                if seen.len() <= fail_first {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((port, seen))
}
