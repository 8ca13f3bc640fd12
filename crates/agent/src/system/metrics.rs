//! Metrics samples and the bounded offline buffer.
//!
//! A [`Sampler`] keeps sysinfo state between samples: CPU usage needs two refreshes at least
//! `sysinfo::MINIMUM_CPU_UPDATE_INTERVAL` apart (the sampler's first refresh happens when it is
//! made), and network counters are deltas since the previous sample.

use std::collections::VecDeque;

use breeze_agent_proto::{DiskUsageSample, MetricSample, NetworkSample};
use breeze_core::Clock;
use sysinfo::{
    CpuRefreshKind, Disks, MemoryRefreshKind, Networks, ProcessRefreshKind, ProcessesToUpdate,
    RefreshKind, System,
};

use super::inventory::is_pseudo_filesystem;

/// Samples kept while offline: 24 h at the default 30 s interval.
pub const DEFAULT_BUFFER_SAMPLES: usize = 2_880;

/// Takes metric samples.
pub struct Sampler {
    system: System,
    disks: Disks,
    networks: Networks,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").finish_non_exhaustive()
    }
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Sampler {
    /// A sampler with its first CPU and network readings taken now.
    pub fn new() -> Sampler {
        let system = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_cpu_usage())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        );
        Sampler {
            system,
            disks: Disks::new_with_refreshed_list(),
            networks: Networks::new_with_refreshed_list(),
        }
    }

    /// One sample (blocking for a few milliseconds). CPU % is the average since the previous
    /// call; call it no more often than `sysinfo::MINIMUM_CPU_UPDATE_INTERVAL`.
    pub fn sample(&mut self, clock: &dyn Clock) -> MetricSample {
        self.system.refresh_cpu_usage();
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing(),
        );
        self.disks.refresh(true);
        self.networks.refresh(true);
        let total = self.system.total_memory();
        let used = self.system.used_memory();
        let mut disks: Vec<DiskUsageSample> = Vec::new();
        for disk in self.disks.list() {
            let fs = disk.file_system().to_string_lossy();
            let size = disk.total_space();
            if is_pseudo_filesystem(&fs) || size == 0 {
                continue;
            }
            let mount = disk.mount_point().to_string_lossy().into_owned();
            if disks.iter().any(|d| d.mount == mount) {
                continue;
            }
            let used = size.saturating_sub(disk.available_space());
            disks.push(DiskUsageSample {
                mount,
                used_percent: round2(used as f64 * 100.0 / size as f64),
            });
        }
        let mut network: Vec<NetworkSample> = self
            .networks
            .list()
            .iter()
            .map(|(name, data)| NetworkSample {
                interface: name.clone(),
                rx_bytes: data.received(),
                tx_bytes: data.transmitted(),
            })
            .collect();
        network.sort_by(|a, b| a.interface.cmp(&b.interface));
        MetricSample {
            at: clock.now(),
            cpu_percent: round2(f64::from(self.system.global_cpu_usage())),
            ram_percent: if total == 0 {
                0.0
            } else {
                round2(used as f64 * 100.0 / total as f64)
            },
            ram_used_bytes: used,
            disks,
            network,
            process_count: u32::try_from(self.system.processes().len()).unwrap_or(u32::MAX),
        }
    }
}

fn round2(v: f64) -> f64 {
    if v.is_finite() {
        (v * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// A bounded ring of samples waiting to be sent; the oldest go first when it is full.
#[derive(Debug)]
pub struct MetricsBuffer {
    samples: VecDeque<MetricSample>,
    capacity: usize,
    dropped: u64,
}

impl MetricsBuffer {
    /// A buffer holding at most `capacity` samples.
    pub fn new(capacity: usize) -> MetricsBuffer {
        MetricsBuffer {
            samples: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Adds a sample, dropping the oldest when full (counted, and logged every 100 drops).
    pub fn push(&mut self, sample: MetricSample) {
        while self.samples.len() >= self.capacity {
            self.samples.pop_front();
            self.dropped += 1;
            if self.dropped == 1 || self.dropped.is_multiple_of(100) {
                tracing::warn!(
                    dropped = self.dropped,
                    "metrics buffer full while offline; dropping the oldest samples"
                );
            }
        }
        self.samples.push_back(sample);
    }

    /// Takes up to `max` of the oldest samples.
    pub fn take(&mut self, max: usize) -> Vec<MetricSample> {
        let n = max.min(self.samples.len());
        self.samples.drain(..n).collect()
    }

    /// Puts samples that could not be sent back at the front (oldest first), within capacity.
    pub fn restore(&mut self, samples: Vec<MetricSample>) {
        for sample in samples.into_iter().rev() {
            if self.samples.len() >= self.capacity {
                self.dropped += 1;
                continue;
            }
            self.samples.push_front(sample);
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Samples dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use breeze_core::SystemClock;

    #[test]
    fn samples_this_machine() {
        let mut sampler = Sampler::new();
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let s = sampler.sample(&SystemClock);
        assert!(s.ram_percent > 0.0 && s.ram_percent <= 100.0);
        assert!(s.process_count > 0);
        assert!((0.0..=100.0 * 1024.0).contains(&s.cpu_percent));
    }

    #[test]
    fn ring_drops_oldest() {
        let clock = SystemClock;
        let mut sampler = Sampler::new();
        let base = sampler.sample(&clock);
        let mut buf = MetricsBuffer::new(3);
        for i in 0..5u32 {
            let mut s = base.clone();
            s.process_count = i;
            buf.push(s);
        }
        assert_eq!(buf.len(), 3);
        assert_eq!(buf.dropped(), 2);
        let taken = buf.take(2);
        assert_eq!(
            taken.iter().map(|s| s.process_count).collect::<Vec<_>>(),
            [2, 3]
        );
        buf.restore(taken);
        assert_eq!(buf.take(10).len(), 3);
        assert!(buf.is_empty());
    }
}
