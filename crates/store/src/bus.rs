//! The cluster bus: what one server tells the others that share its PostgreSQL database.
//!
//! Any number of `breeze serve` processes may share one database. Each keeps state that the
//! database does not push to it: read models (the device directory, the API-key cache keyed on
//! the credentials generation), the agents holding a socket to it, and calls waiting for a
//! command's result. A change that one of those must see at once is announced as a [`Signal`]
//! with PostgreSQL's `NOTIFY` ([`Store::publish`]); every other store on the database receives
//! it in its listener ([`Store::spawn_bus_listener`]), applies it to its own read models and
//! hands it to its subscribers ([`Store::subscribe`]: the gateway, which claims and pushes a
//! command queued elsewhere for an agent connected here).
//!
//! **The database stays the source of truth.** A signal carries no data, only "look again":
//! a command is a row before it is a signal, and the instance holding the agent claims it with
//! the same forward-only update as for a local command, so exactly-once delivery does not rest
//! on the bus. Signals are at most once: a listener that loses its connection misses what was
//! sent meanwhile, so on reconnecting it raises [`Signal::Resync`] (every read model stale,
//! every connected agent's pending commands claimed again). A lost signal costs the old
//! fallback — the read model's age limit, the waiter's poll — never a wrong answer.
//!
//! **Isolation.** The channel is per database and schema (tests run in schemas of one database
//! side by side); a store ignores what it sent itself, since it applied that locally already.
//!
//! **SQLite** has no second server on a file worth the name (the journal holds the file for one
//! process), so nothing is sent and subscribers only hear nothing.

use std::{hash::Hasher as _, sync::Arc, time::Duration};

use breeze_core::{DeviceId, OrgId};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use crate::{Pool, Store};

/// Most devices a policy signal names (a `NOTIFY` payload holds under 8,000 bytes); beyond,
/// it names the organization and each instance re-resolves its own agents of it.
const MAX_SIGNALLED_DEVICES: usize = 100;

/// Signals a subscriber may fall behind by before it hears [`Signal::Resync`] instead.
const SUBSCRIBER_BACKLOG: usize = 1024;

/// How long the listener waits before connecting again after a failure.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// What changed, for the other servers on the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "snake_case")]
pub enum Signal {
    /// A command was queued for `device`: the instance holding its socket claims it and
    /// pushes it.
    CommandQueued { device: DeviceId },
    /// Command `id` changed (a result arrived, or it was cancelled): its waiters read it again.
    CommandChanged { id: Uuid },
    /// Command `id` of `device` was cancelled: the instance holding the socket tells the agent.
    CommandCancelled { device: DeviceId, id: Uuid },
    /// `device`'s agent opened socket `socket` (a UUIDv7, so later sockets sort higher): an
    /// instance holding an older socket for it closes that one at once, since the agent
    /// moved and what is written there reaches nobody (a half-open connection).
    AgentConnected { device: DeviceId, socket: Uuid },
    /// `org`'s device listing changed structurally (see the directory's freshness rules).
    DevicesChanged { org: OrgId },
    /// What some API key authenticates as changed.
    CredentialsChanged,
    /// `device`'s token changed (re-enrolled, rotated, revoked): the sockets opened with a
    /// token it no longer accepts close.
    DeviceCredentialChanged { device: DeviceId },
    /// A person decided an approval request: calls waiting for one look again.
    ApprovalDecided,
    /// The effective configuration of `devices` of `org` changed (`None`: of too many to
    /// name in one signal, so of any of the organization's).
    PoliciesChanged {
        org: OrgId,
        devices: Option<Vec<DeviceId>>,
    },
    /// Signals may have been missed (the listener reconnected, or a subscriber fell behind):
    /// treat everything as changed.
    Resync,
}

impl Signal {
    /// The effective configuration of `devices` of `org` changed: the signal names them, or
    /// only the organization when they are more than one payload holds.
    pub fn policies_changed(org: OrgId, devices: Vec<DeviceId>) -> Signal {
        Signal::PoliciesChanged {
            org,
            devices: (devices.len() <= MAX_SIGNALLED_DEVICES).then_some(devices),
        }
    }
}

/// A signal on the wire, with the instance that sent it.
#[derive(Serialize, Deserialize)]
struct Envelope {
    from: Uuid,
    #[serde(flatten)]
    signal: Signal,
}

/// The bus's state, shared by a store's clones.
pub(crate) struct Bus {
    /// Who this store is on the channel.
    instance: Uuid,
    /// The `NOTIFY` channel, on PostgreSQL.
    channel: Option<String>,
    subscribers: broadcast::Sender<Signal>,
    /// Whether the listener is on the channel now.
    listening: watch::Sender<bool>,
}

impl Bus {
    pub(crate) fn new(pool: &Pool, pg_schema: Option<&str>) -> Arc<Bus> {
        let channel = matches!(pool, Pool::Postgres { .. }).then(|| channel_name(pg_schema));
        Arc::new(Bus {
            instance: Uuid::now_v7(),
            channel,
            subscribers: broadcast::channel(SUBSCRIBER_BACKLOG).0,
            listening: watch::channel(false).0,
        })
    }
}

/// The channel of a schema. A channel name is an identifier (at most 63 bytes, and
/// `pg_notify` refuses longer ones rather than truncating), while test schemas are 55 bytes
/// long: a schema is named by a stable hash of its name.
fn channel_name(pg_schema: Option<&str>) -> String {
    match pg_schema {
        None => "breeze_bus".to_owned(),
        Some(schema) => {
            // FNV-1a: stable across processes and builds, unlike std's hasher.
            let mut h = Fnv(0xcbf2_9ce4_8422_2325);
            h.write(schema.as_bytes());
            format!("breeze_bus_{:016x}", h.finish())
        }
    }
}

struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Store {
    /// Announces `signal` to the other servers on this database, in the background (the
    /// caller never waits on it, and a failure is logged: the receivers' fallbacks cover it).
    /// What this process must do about the change, the caller does itself.
    pub fn publish(&self, signal: Signal) {
        let Some(notify) = self.notification(signal) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(notify);
        }
    }

    /// [`Store::publish`], returning once the signal is sent: for a process that may exit
    /// right after (the CLI deciding an approval), and for a change whose caller must not act
    /// before the other servers can hear of it (a revocation). The send runs as a task of its
    /// own, so a caller dropped meanwhile (a client that hung up) does not cut it off.
    pub async fn announce(&self, signal: Signal) {
        if let Some(notify) = self.notification(signal) {
            // A send that panicked was only logged as failed anyway (see `notification`).
            let _ = tokio::spawn(notify).await;
        }
    }

    /// The `NOTIFY` that sends `signal` (PostgreSQL only).
    fn notification(
        &self,
        signal: Signal,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let (Some(channel), Pool::Postgres { system: pool, .. }) = (&self.bus.channel, &self.pool)
        else {
            return None;
        };
        let payload = serde_json::to_string(&Envelope {
            from: self.bus.instance,
            signal,
        })
        .map_err(|e| tracing::warn!(error = %e, "unencodable bus signal"))
        .ok()?;
        let (channel, pool) = (channel.clone(), pool.clone());
        Some(async move {
            if let Err(e) = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&channel)
                .bind(&payload)
                .execute(&pool)
                .await
            {
                tracing::warn!(error = %e, "could not publish a bus signal");
            }
        })
    }

    /// Tells every instance, this one included (through [`Store::subscribe`]), that
    /// `device`'s credential changed: each closes the sockets it holds for the device that were
    /// opened with a token no longer valid. Returns once the other instances can hear it.
    pub async fn device_credential_changed(&self, device: DeviceId) {
        let signal = Signal::DeviceCredentialChanged { device };
        // No subscriber is not an error (a store without a gateway, the CLI's).
        let _ = self.bus.subscribers.send(signal.clone());
        self.announce(signal).await;
    }

    /// Signals from the other servers on this database, once [`Store::spawn_bus_listener`]
    /// runs. A receiver that falls behind gets `Lagged`, which its owner treats as
    /// [`Signal::Resync`].
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.bus.subscribers.subscribe()
    }

    /// Hands every signal from the other servers to `handle`, one at a time, until `stop`
    /// completes or the bus closes. A follower that fell behind is handed [`Signal::Resync`]
    /// in place of what it missed: the signals carry no data, so looking again at everything
    /// is always enough.
    pub fn follow_bus<F, Fut>(
        &self,
        stop: impl Future<Output = ()> + Send + 'static,
        mut handle: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: FnMut(Signal) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let mut signals = self.subscribe();
        tokio::spawn(async move {
            tokio::pin!(stop);
            loop {
                let signal = tokio::select! {
                    () = &mut stop => break,
                    received = signals.recv() => match received {
                        Ok(signal) => signal,
                        Err(broadcast::error::RecvError::Lagged(_)) => Signal::Resync,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                };
                handle(signal).await;
            }
        })
    }

    /// Starts listening for the other servers' signals (PostgreSQL; a no-op on SQLite) until
    /// the store's pool closes. Each signal is applied to this store's read models, then
    /// handed to subscribers.
    pub fn spawn_bus_listener(&self) -> Option<tokio::task::JoinHandle<()>> {
        let (Some(channel), Pool::Postgres { system: pool, .. }) = (&self.bus.channel, &self.pool)
        else {
            return None;
        };
        let (channel, pool, store) = (channel.clone(), pool.clone(), self.clone());
        Some(tokio::spawn(async move {
            let mut connected_once = false;
            while !pool.is_closed() {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "bus listener cannot connect; retrying");
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(&channel).await {
                    tracing::warn!(error = %e, "bus listener cannot LISTEN; retrying");
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
                // Anything sent between a lost connection and this LISTEN was missed.
                if connected_once {
                    store.receive(Signal::Resync);
                }
                connected_once = true;
                store.bus.listening.send_replace(true);
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) => match serde_json::from_str::<Envelope>(n.payload()) {
                            Ok(e) if e.from == store.bus.instance => {}
                            Ok(e) => store.receive(e.signal),
                            Err(e) => tracing::warn!(error = %e, "malformed bus signal"),
                        },
                        // The connection was lost; the listener reconnects on the next call
                        // and LISTENs again, but what was sent meanwhile is gone.
                        Ok(None) => store.receive(Signal::Resync),
                        Err(e) => {
                            store.bus.listening.send_replace(false);
                            if !pool.is_closed() {
                                tracing::warn!(error = %e, "bus listener failed; reconnecting");
                                tokio::time::sleep(RECONNECT_PAUSE).await;
                            }
                            break;
                        }
                    }
                }
            }
        }))
    }

    /// Resolves once the listener is on the channel (at once on SQLite, which has none):
    /// signals sent from then on reach this store.
    pub async fn bus_listening(&self) {
        if self.bus.channel.is_none() {
            return;
        }
        let mut listening = self.bus.listening.subscribe();
        // The sender lives as long as the store: `wait_for` fails only if it is gone.
        let _ = listening.wait_for(|on| *on).await;
    }

    /// Applies a signal from another server to this store's read models and passes it on.
    fn receive(&self, signal: Signal) {
        match &signal {
            Signal::DevicesChanged { org } => self.devices_changed_elsewhere(Some(*org)),
            Signal::CredentialsChanged => self.bump_credentials(),
            Signal::Resync => {
                self.devices_changed_elsewhere(None);
                self.bump_credentials();
            }
            Signal::CommandQueued { .. }
            | Signal::DeviceCredentialChanged { .. }
            | Signal::AgentConnected { .. }
            | Signal::ApprovalDecided
            | Signal::CommandChanged { .. }
            | Signal::CommandCancelled { .. }
            | Signal::PoliciesChanged { .. } => {}
        }
        // No subscriber is not an error: the CLI's store has none.
        let _ = self.bus.subscribers.send(signal);
    }
}

impl crate::OrgConfigPolicies<'_> {
    /// Tells the servers on this database that the effective configuration of this
    /// organization's `devices` (`None`: of any of its devices) changed, returning once the
    /// signal is sent: the instances holding those agents' sockets push it to them. For a
    /// process that holds no agent sockets (the CLI); a server's gateway does this itself.
    /// Nothing is sent on SQLite (see the module doc).
    pub async fn announce_policies_changed(&self, devices: Option<Vec<DeviceId>>) {
        let signal = match devices {
            Some(devices) => Signal::policies_changed(self.org, devices),
            None => Signal::PoliciesChanged {
                org: self.org,
                devices: None,
            },
        };
        self.store.announce(signal).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_fit_an_identifier_and_tell_schemas_apart() {
        let a = channel_name(Some(
            "breeze_test_1764800000_0190f0e0aa0b7c3d8e9f000011112222",
        ));
        let b = channel_name(Some(
            "breeze_test_1764800000_0190f0e0aa0b7c3d8e9f000011112223",
        ));
        assert!(a.len() < 64, "{a}");
        assert_ne!(a, b);
        assert_eq!(channel_name(None), "breeze_bus");
    }

    /// A policy signal names its devices while they fit one payload, else the organization.
    #[test]
    fn a_policy_signal_names_at_most_a_payloads_worth_of_devices() {
        let org = OrgId(Uuid::now_v7());
        let devices = |n| (0..n).map(|_| DeviceId(Uuid::now_v7())).collect::<Vec<_>>();
        let few = devices(MAX_SIGNALLED_DEVICES);
        assert_eq!(
            Signal::policies_changed(org, few.clone()),
            Signal::PoliciesChanged {
                org,
                devices: Some(few),
            }
        );
        let many = Signal::policies_changed(org, devices(MAX_SIGNALLED_DEVICES + 1));
        assert_eq!(many, Signal::PoliciesChanged { org, devices: None });
        let text = serde_json::to_string(&Envelope {
            from: Uuid::now_v7(),
            signal: Signal::policies_changed(org, devices(MAX_SIGNALLED_DEVICES)),
        })
        .expect("encode");
        assert!(text.len() < 8000, "{} bytes", text.len());
    }

    #[test]
    fn signals_round_trip_with_their_sender() {
        let e = Envelope {
            from: Uuid::now_v7(),
            signal: Signal::PoliciesChanged {
                org: OrgId(Uuid::now_v7()),
                devices: Some(vec![DeviceId(Uuid::now_v7())]),
            },
        };
        let text = serde_json::to_string(&e).expect("encode");
        let back: Envelope = serde_json::from_str(&text).expect("decode");
        assert_eq!(back.from, e.from);
        assert_eq!(back.signal, e.signal);
    }
}
