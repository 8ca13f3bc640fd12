//! Delivering an alert's news (raised, resolved) to its rule's notification channels.
//!
//! Each delivery runs in a task of its own with a deadline, so a slow or failing channel never
//! holds up evaluation; its outcome — delivered or the error — is recorded on the alert (and in
//! the audit log) by `breeze_store::OrgAlerts::record_notification`.
//!
//! - Email goes through the configured SMTP relay (`SmtpConfig`), one message to the channel's
//!   recipients.
//! - A webhook is an HTTP POST of JSON, signed: `X-Breeze-Signature: sha256=<hex>` is the
//!   HMAC-SHA256, keyed with the channel's secret, of `<X-Breeze-Timestamp>.<body>`, so a
//!   receiver can check both origin and freshness. Connection failures, 429 and 5xx are retried
//!   with exponential backoff (same `X-Breeze-Delivery` id each time); other answers are final.
//!   Redirects are not followed. Unless `allow_private_targets`, a URL whose host resolves to
//!   a loopback, private, link-local, CGNAT or otherwise non-public address is refused, and the
//!   request goes to the address that was checked (no second lookup).
//! - In-app: recorded on the alert, nothing leaves the server.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use breeze_core::{ChannelKind, Clock};
use breeze_store::{Alert, AlertRule, NotificationChannel, Store};
use hmac::{Hmac, Mac};
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, header::ContentType},
    transport::smtp::authentication::Credentials,
};
use sha2::Sha256;

/// How mail leaves: the relay, its security, who mail is from.
#[derive(Clone)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub security: SmtpSecurity,
    /// The From address, e.g. `Breeze <alerts@example.com>`.
    pub from: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("from", &self.from)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Transport security towards the SMTP relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// Plain text (a relay on the same host or network).
    None,
    /// Upgrade with STARTTLS, required.
    StartTls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// How notifications are delivered.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// Without it, email channels record a failure ("no SMTP relay configured").
    pub smtp: Option<SmtpConfig>,
    /// The deadline of one webhook request or one SMTP conversation.
    pub timeout: Duration,
    /// Webhook attempts in all (the first and its retries).
    pub webhook_attempts: u32,
    /// The wait before the first retry; each later one waits twice as long.
    pub webhook_backoff: Duration,
    /// Lets webhooks reach loopback and private addresses (development, tests).
    pub allow_private_targets: bool,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            smtp: None,
            timeout: Duration::from_secs(10),
            webhook_attempts: 4,
            webhook_backoff: Duration::from_secs(2),
            allow_private_targets: false,
        }
    }
}

/// What happened to an alert that is worth telling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertNews {
    Raised,
    Resolved,
}

impl AlertNews {
    fn event(self) -> &'static str {
        match self {
            AlertNews::Raised => "alert.raised",
            AlertNews::Resolved => "alert.resolved",
        }
    }
}

/// Delivers to channels; cheap to clone.
#[derive(Clone)]
pub(crate) struct Notifier {
    pub(crate) config: NotifyConfig,
}

impl Notifier {
    /// Delivers `news` of `alert` to `channel` and records the outcome on the alert. Never
    /// fails: a failure to record is logged.
    pub(crate) async fn deliver(
        &self,
        store: &Store,
        rule: &AlertRule,
        alert: &Alert,
        channel: &NotificationChannel,
        news: AlertNews,
    ) {
        let outcome = if !channel.enabled {
            Err("the channel is disabled".to_owned())
        } else {
            match channel.kind {
                ChannelKind::InApp => Ok("shown in the app".to_owned()),
                ChannelKind::Email => self.email(rule, alert, channel, news).await,
                ChannelKind::Webhook => {
                    self.webhook(store.clock().as_ref(), rule, alert, channel, news)
                        .await
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::warn!(alert = %alert.id, channel = %channel.id, error = %e, "alert notification failed");
        }
        if let Err(e) = store
            .org(alert.org_id)
            .alerts()
            .record_notification(alert.id, channel, outcome)
            .await
        {
            tracing::warn!(alert = %alert.id, error = %e, "cannot record an alert notification");
        }
    }

    async fn email(
        &self,
        rule: &AlertRule,
        alert: &Alert,
        channel: &NotificationChannel,
        news: AlertNews,
    ) -> Result<String, String> {
        let subject = match news {
            AlertNews::Raised => format!("[Breeze {}] {}", alert.severity, alert.title),
            AlertNews::Resolved => format!("[Breeze resolved] {}", alert.title),
        };
        let body = format!(
            "{}\n\nRule: {}\nSeverity: {}\nStatus: {}\nDevice: {}\nTriggered: {}\nAlert: {}\n",
            alert.message,
            rule.name,
            alert.severity,
            alert.status,
            alert.device_id,
            alert.triggered_at.to_rfc3339(),
            alert.id,
        );
        self.send_email(channel, subject, body).await
    }

    /// Mails `subject` and `body` to the channel's recipients through the SMTP relay.
    async fn send_email(
        &self,
        channel: &NotificationChannel,
        subject: String,
        body: String,
    ) -> Result<String, String> {
        let smtp = self
            .config
            .smtp
            .as_ref()
            .ok_or("no SMTP relay is configured")?;
        let from: Mailbox = smtp
            .from
            .parse()
            .map_err(|e| format!("the From address is invalid: {e}"))?;
        let mut builder = Message::builder()
            .from(from)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN);
        let recipients = channel
            .config
            .get("to")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        for to in &recipients {
            let mailbox: Mailbox = to
                .as_str()
                .unwrap_or_default()
                .parse()
                .map_err(|e| format!("recipient {to}: {e}"))?;
            builder = builder.to(mailbox);
        }
        let message = builder.body(body).map_err(|e| e.to_string())?;
        let transport = match smtp.security {
            SmtpSecurity::None => {
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
            }
            SmtpSecurity::StartTls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
                    .map_err(|e| e.to_string())?
            }
            SmtpSecurity::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)
                .map_err(|e| e.to_string())?,
        }
        .port(smtp.port)
        .timeout(Some(self.config.timeout));
        let transport = match (&smtp.username, &smtp.password) {
            (Some(u), Some(p)) => transport.credentials(Credentials::new(u.clone(), p.clone())),
            _ => transport,
        }
        .build();
        match tokio::time::timeout(self.config.timeout, transport.send(message)).await {
            Ok(Ok(response)) => Ok(format!(
                "mailed {} recipient(s): {}",
                recipients.len(),
                response.code()
            )),
            Ok(Err(e)) => Err(format!("SMTP: {e}")),
            Err(_) => Err("SMTP: timed out".to_owned()),
        }
    }

    async fn webhook(
        &self,
        clock: &dyn Clock,
        rule: &AlertRule,
        alert: &Alert,
        channel: &NotificationChannel,
        news: AlertNews,
    ) -> Result<String, String> {
        let body = serde_json::json!({
            "event": news.event(),
            "alert": alert,
            "rule": { "id": rule.id, "name": rule.name, "condition": rule.condition },
        })
        .to_string();
        self.send_webhook(clock, channel, news.event(), body).await
    }

    /// POSTs `body` (JSON text) to the channel's URL, signed, with retries and backoff.
    async fn send_webhook(
        &self,
        clock: &dyn Clock,
        channel: &NotificationChannel,
        event: &str,
        body: String,
    ) -> Result<String, String> {
        let url = channel
            .config
            .get("url")
            .and_then(serde_json::Value::as_str)
            .ok_or("the channel has no url")?;
        let secret = channel
            .secret
            .as_deref()
            .ok_or("the channel has no secret")?;
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad url: {e}"))?;
        let host = parsed.host_str().ok_or("the url has no host")?.to_owned();
        let port = parsed
            .port_or_known_default()
            .ok_or("the url has no port")?;
        let addr = resolve_allowed(&host, port, self.config.allow_private_targets).await?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.config.timeout)
            .resolve(&host, addr)
            .build()
            .map_err(|e| e.to_string())?;
        let delivery = uuid::Uuid::now_v7().to_string();
        let mut last = String::new();
        let attempts = self.config.webhook_attempts.max(1);
        for attempt in 0..attempts {
            if attempt > 0 {
                let wait = self.config.webhook_backoff * 2u32.saturating_pow(attempt - 1);
                tokio::time::sleep(wait).await;
            }
            let timestamp = clock.now().timestamp().to_string();
            let signature = sign(secret, &timestamp, &body);
            let sent = client
                .post(parsed.clone())
                .header("content-type", "application/json")
                .header("x-breeze-event", event)
                .header("x-breeze-delivery", &delivery)
                .header("x-breeze-timestamp", &timestamp)
                .header("x-breeze-signature", format!("sha256={signature}"))
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(res) if res.status().is_success() => {
                    return Ok(format!(
                        "HTTP {} after {} attempt(s)",
                        res.status().as_u16(),
                        attempt + 1
                    ));
                }
                Ok(res) => {
                    let status = res.status();
                    last = format!("HTTP {}", status.as_u16());
                    let retryable = status.is_server_error()
                        || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                    if !retryable {
                        return Err(format!("webhook answered {last}; not retried"));
                    }
                }
                Err(e) => last = format!("unreachable: {e}"),
            }
        }
        Err(format!(
            "webhook failed after {attempts} attempt(s): {last}"
        ))
    }
}

/// A message to a channel that is not an alert's news (an automation's notify action).
#[derive(Debug, Clone)]
pub struct ChannelMessage {
    /// The webhook's `X-Breeze-Event`, e.g. `automation.notify`.
    pub event: &'static str,
    /// The mail's subject.
    pub subject: String,
    /// The mail's text.
    pub text: String,
    /// The webhook's JSON body.
    pub payload: serde_json::Value,
}

/// Delivers `message` to `channel` as alert news is delivered (mail through the relay, a
/// signed webhook with retries, in-app), bounded by the configured timeouts. The outcome, for
/// the caller to record; a disabled channel is a failure.
pub async fn send(
    config: &NotifyConfig,
    clock: &dyn Clock,
    channel: &NotificationChannel,
    message: &ChannelMessage,
) -> Result<String, String> {
    if !channel.enabled {
        return Err("the channel is disabled".to_owned());
    }
    let notifier = Notifier {
        config: config.clone(),
    };
    match channel.kind {
        ChannelKind::InApp => Ok("shown in the app".to_owned()),
        ChannelKind::Email => {
            notifier
                .send_email(channel, message.subject.clone(), message.text.clone())
                .await
        }
        ChannelKind::Webhook => {
            notifier
                .send_webhook(clock, channel, message.event, message.payload.to_string())
                .await
        }
    }
}

/// `hex(HMAC-SHA256(secret, "<timestamp>.<body>"))`: what `X-Breeze-Signature` carries after
/// `sha256=`.
pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The first address `host` resolves to, refused when it (or any other it resolves to) is not
/// public and `allow_private` is off.
async fn resolve_allowed(host: &str, port: u16, allow_private: bool) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let first = *addrs
        .first()
        .ok_or_else(|| format!("{host} resolves to no address"))?;
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "refused: {host} resolves to {}, a non-public address",
            bad.ip()
        ));
    }
    Ok(first)
}

/// Whether `ip` is a public unicast address (not loopback, private, link-local, CGNAT,
/// unspecified, broadcast, documentation, multicast, unique-local; IPv4-mapped IPv6 judged as
/// its IPv4 address).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_and_body() {
        // RFC 4231 test case 2 (key "Jefe"), with the message split around our separator.
        assert_eq!(sign("Jefe", "what do ya want for nothing?", "").len(), 64);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_ne!(sign("k", "1", "a"), sign("k", "2", "a"));
        assert_ne!(sign("k", "1", "a"), sign("j", "1", "a"));
    }
}
