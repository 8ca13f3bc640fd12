//! Staged deployments: the words (where a deployment and each of its devices stand) and the
//! two decisions that make a rollout staged, kept pure so they are tested on their own:
//! how a target's devices fall into rings ([`assign_rings`]) and what a ring's tally means for
//! the deployment ([`gate`]): go on, pause because too many failed, move to the next ring, or
//! finish.

use std::collections::HashSet;

use crate::{DeviceId, string_enum};

string_enum! {
    /// Where a deployment is.
    pub enum DeploymentStatus: "deployment status" {
        /// Created, not started: nothing runs.
        Draft = "draft",
        /// The worker advances it ring by ring.
        Running = "running",
        /// Stopped by a person or by a ring's failures (the reason is recorded); `resume`
        /// goes on.
        Paused = "paused",
        /// Every ring is done.
        Completed = "completed",
        /// Stopped for good; devices not reached are skipped.
        Cancelled = "cancelled",
    }
}

impl DeploymentStatus {
    /// Whether nothing more will happen.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled)
    }
}

string_enum! {
    /// Where one device of a deployment is.
    pub enum DeviceRunStatus: "deployment device status" {
        /// Not reached yet.
        Pending = "pending",
        /// Its run was sent, or waits for a person's approval.
        Running = "running",
        /// The payload ran and succeeded (script exit code 0).
        Succeeded = "succeeded",
        /// It ran and failed, or was refused.
        Failed = "failed",
        /// Not run: offline or gone when its ring came, or the deployment was cancelled.
        /// Skipped devices count neither way in a ring's rates.
        Skipped = "skipped",
    }
}

impl DeviceRunStatus {
    /// Whether the device's part is over.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped)
    }
}

/// Who is in a ring, as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingMembers {
    /// These devices (those of the target; the caller checks the rest).
    Devices(Vec<DeviceId>),
    /// Up to this share of the whole target, counting every earlier ring (1–100, rounded up):
    /// rings of 10, 50 and 100 take a tenth, then up to half, then the rest.
    Percent(u8),
}

/// Puts each of `target` (in its order) into a ring: listed devices into their ring (first
/// listing wins), percentages filled from the devices no ring took yet, and devices left after
/// the last ring into one more ring. Returns each device's ring index, and how many rings
/// there are (the extra one included).
pub fn assign_rings(target: &[DeviceId], rings: &[RingMembers]) -> (Vec<(DeviceId, usize)>, usize) {
    let mut taken: HashSet<DeviceId> = HashSet::new();
    let mut listed: Vec<(DeviceId, usize)> = Vec::new();
    for (i, r) in rings.iter().enumerate() {
        if let RingMembers::Devices(ds) = r {
            for d in ds {
                if target.contains(d) && taken.insert(*d) {
                    listed.push((*d, i));
                }
            }
        }
    }
    let mut out: Vec<(DeviceId, usize)> = Vec::new();
    let mut free = target.iter().filter(|d| !taken.contains(d));
    let total = target.len();
    for (i, r) in rings.iter().enumerate() {
        match r {
            RingMembers::Devices(_) => {
                out.extend(listed.iter().filter(|(_, ring)| *ring == i).copied());
            }
            RingMembers::Percent(p) => {
                let want = (total * usize::from(*p)).div_ceil(100);
                while out.len() < want {
                    match free.next() {
                        Some(d) => out.push((*d, i)),
                        None => break,
                    }
                }
            }
        }
    }
    let rest: Vec<DeviceId> = free.copied().collect();
    let count = if rest.is_empty() {
        rings.len()
    } else {
        out.extend(rest.into_iter().map(|d| (d, rings.len())));
        rings.len() + 1
    };
    (out, count.max(1))
}

/// How one ring's devices stand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingTally {
    pub pending: usize,
    pub running: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl RingTally {
    /// Counts one device.
    pub fn add(&mut self, status: DeviceRunStatus) {
        match status {
            DeviceRunStatus::Pending => self.pending += 1,
            DeviceRunStatus::Running => self.running += 1,
            DeviceRunStatus::Succeeded => self.succeeded += 1,
            DeviceRunStatus::Failed => self.failed += 1,
            DeviceRunStatus::Skipped => self.skipped += 1,
        }
    }

    /// Devices that count in the rates: all but the skipped.
    pub fn counted(&self) -> usize {
        self.pending + self.running + self.succeeded + self.failed
    }

    /// Whether every device's part is over.
    pub fn done(&self) -> bool {
        self.pending == 0 && self.running == 0
    }

    /// Failed devices as a percentage of the counted ones (0 when none counts).
    pub fn failure_percent(&self) -> f64 {
        percent(self.failed, self.counted())
    }

    /// Succeeded devices as a percentage of the counted ones (100 when none counts).
    pub fn success_percent(&self) -> f64 {
        if self.counted() == 0 {
            100.0
        } else {
            percent(self.succeeded, self.counted())
        }
    }
}

#[allow(clippy::cast_precision_loss)] // device counts are far below 2^52
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// What a ring's tally means for its deployment.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Send the ring's pending devices, or wait for its running ones.
    Continue,
    /// Stop: too many failed, or too few succeeded; the reason in words.
    Pause(String),
    /// The ring met its threshold: start the next one.
    Advance,
    /// The last ring met its threshold.
    Complete,
}

/// The gate of ring `ring` (`name`) of `rings`: paused as soon as its failures exceed
/// `max_failure_percent`, and once done, advanced only when at least `success_percent` of its
/// counted devices succeeded. `accepted`: a person resumed the deployment with this ring's
/// failures as they were, so they no longer pause it.
pub fn gate(
    tally: &RingTally,
    ring: usize,
    name: &str,
    rings: usize,
    max_failure_percent: u8,
    success_percent: u8,
    accepted: bool,
) -> Gate {
    let label = format!("ring {} ({name})", ring + 1);
    if !accepted && tally.failed > 0 && tally.failure_percent() > f64::from(max_failure_percent) {
        return Gate::Pause(format!(
            "{label}: {} of {} device(s) failed ({:.0}%), above the {max_failure_percent}% \
             allowed",
            tally.failed,
            tally.counted(),
            tally.failure_percent()
        ));
    }
    if !tally.done() {
        return Gate::Continue;
    }
    if !accepted && tally.success_percent() < f64::from(success_percent) {
        return Gate::Pause(format!(
            "{label}: {} of {} device(s) succeeded ({:.0}%), below its {success_percent}% \
             success threshold",
            tally.succeeded,
            tally.counted(),
            tally.success_percent()
        ));
    }
    if ring + 1 >= rings {
        Gate::Complete
    } else {
        Gate::Advance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u128) -> Vec<DeviceId> {
        (1..=n)
            .map(|i| DeviceId(uuid::Uuid::from_u128(i)))
            .collect()
    }

    #[test]
    fn percentages_are_cumulative_and_the_rest_gets_a_ring() {
        let t = ids(10);
        let (a, n) = assign_rings(&t, &[RingMembers::Percent(10), RingMembers::Percent(50)]);
        assert_eq!(n, 3);
        let ring = |i| a.iter().filter(|(_, r)| *r == i).count();
        assert_eq!((ring(0), ring(1), ring(2)), (1, 4, 5));
        let (a, n) = assign_rings(&t, &[RingMembers::Percent(34), RingMembers::Percent(100)]);
        assert_eq!(n, 2);
        assert_eq!(a.iter().filter(|(_, r)| *r == 0).count(), 4);
        assert_eq!(a.len(), 10);
    }

    #[test]
    fn listed_devices_keep_their_ring_and_outsiders_are_ignored() {
        let t = ids(6);
        let outsider = DeviceId(uuid::Uuid::from_u128(99));
        let rings = [
            RingMembers::Devices(vec![t[5], outsider]),
            RingMembers::Percent(50),
            RingMembers::Devices(vec![t[0], t[5]]),
        ];
        let (a, n) = assign_rings(&t, &rings);
        assert_eq!(n, 4, "{a:?}");
        assert!(a.contains(&(t[5], 0)));
        assert!(a.contains(&(t[0], 2)));
        assert!(!a.iter().any(|(d, _)| *d == outsider));
        // Half of six is three, counting ring 0's listed device: ring 1 takes two.
        assert_eq!(a.iter().filter(|(_, r)| *r == 1).count(), 2);
        assert_eq!(a.iter().filter(|(_, r)| *r == 3).count(), 2);
        assert_eq!(a.len(), 6);
        let (none, n) = assign_rings(&t, &[]);
        assert_eq!((none.len(), n), (6, 1));
    }

    #[test]
    fn the_gate_pauses_on_failures_and_advances_on_success() {
        let mut t = RingTally {
            pending: 2,
            succeeded: 1,
            failed: 1,
            ..Default::default()
        };
        assert!(
            matches!(gate(&t, 0, "canary", 2, 20, 100, false), Gate::Pause(r) if r.contains("1 of 4"))
        );
        assert_eq!(gate(&t, 0, "canary", 2, 25, 100, false), Gate::Continue);
        assert_eq!(gate(&t, 0, "canary", 2, 20, 100, true), Gate::Continue);
        t.pending = 0;
        t.failed = 0;
        t.skipped = 3;
        assert_eq!(gate(&t, 0, "canary", 2, 0, 100, false), Gate::Advance);
        assert_eq!(gate(&t, 1, "all", 2, 0, 100, false), Gate::Complete);
        t.failed = 1;
        t.succeeded = 3;
        assert!(
            matches!(gate(&t, 1, "all", 2, 50, 90, false), Gate::Pause(r) if r.contains("below"))
        );
        assert_eq!(gate(&t, 1, "all", 2, 50, 75, false), Gate::Complete);
    }
}
