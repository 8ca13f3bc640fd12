//! `ListProcesses` and `KillProcess` (sysinfo; signals through nix on Unix).

use breeze_agent_proto::ProcessSort;
use serde_json::{Value, json};
use sysinfo::{
    CpuRefreshKind, MemoryRefreshKind, Pid, ProcessRefreshKind, ProcessesToUpdate, RefreshKind,
    System, UpdateKind, Users,
};

use super::{Typed, unix_time};

/// The top `limit` processes by CPU or memory. Blocks for sysinfo's minimum CPU interval (CPU
/// usage is measured between two refreshes). `cpuPercent` is a share of the whole machine.
pub fn list(sort_by: ProcessSort, limit: u32) -> Typed {
    let kind = ProcessRefreshKind::nothing()
        .with_cpu()
        .with_memory()
        .with_user(UpdateKind::OnlyIfNotSet)
        .with_cmd(UpdateKind::OnlyIfNotSet);
    let mut system = System::new_with_specifics(
        RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram()),
    );
    system.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
    system.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    let cores = system.cpus().len().max(1) as f64;
    let total = system.total_memory().max(1) as f64;
    let users = Users::new_with_refreshed_list();
    let mut rows: Vec<(f64, u64, Value)> = system
        .processes()
        .values()
        .filter(|p| p.thread_kind().is_none())
        .map(|p| {
            let cpu = f64::from(p.cpu_usage()) / cores;
            let mem = p.memory();
            let user = p
                .user_id()
                .and_then(|uid| users.get_user_by_id(uid))
                .map(|u| u.name().to_owned());
            let command = p
                .cmd()
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            (
                cpu,
                mem,
                json!({
                    "pid": p.pid().as_u32(),
                    "name": p.name().to_string_lossy(),
                    "user": user,
                    "cpuPercent": (cpu * 100.0).round() / 100.0,
                    "memoryBytes": mem,
                    "memoryPercent": ((mem as f64 * 100.0 / total) * 100.0).round() / 100.0,
                    "command": command,
                    "startedAt": unix_time(p.start_time()),
                }),
            )
        })
        .collect();
    match sort_by {
        ProcessSort::Cpu => rows.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1))),
        ProcessSort::Memory => rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.total_cmp(&a.0))),
    }
    let limit = if limit == 0 { 50 } else { limit as usize };
    let processes: Vec<Value> = rows.into_iter().take(limit).map(|r| r.2).collect();
    Ok(json!({ "processes": processes }))
}

/// Sends SIGTERM (or SIGKILL when `force`) to `pid`.
pub fn kill(pid: u32, force: bool) -> Typed {
    if pid <= 1 {
        return Err(format!("refusing to signal pid {pid}"));
    }
    if pid == std::process::id() {
        return Err("refusing to kill the agent itself".to_owned());
    }
    let mut system = System::new();
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[Pid::from_u32(pid)]),
        true,
        ProcessRefreshKind::nothing(),
    );
    if system.process(Pid::from_u32(pid)).is_none() {
        return Err(format!("no process with pid {pid}"));
    }
    signal(pid, force)?;
    Ok(json!({ "pid": pid, "killed": true }))
}

#[cfg(unix)]
fn signal(pid: u32, force: bool) -> Result<(), String> {
    use nix::errno::Errno;
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid as NixPid;
    let raw = i32::try_from(pid).map_err(|_| format!("invalid pid {pid}"))?;
    let sig = if force {
        Signal::SIGKILL
    } else {
        Signal::SIGTERM
    };
    match kill(NixPid::from_raw(raw), sig) {
        Ok(()) => Ok(()),
        Err(Errno::ESRCH) => Err(format!("no process with pid {pid}")),
        Err(Errno::EPERM) => Err(format!("permission denied to signal pid {pid}")),
        Err(e) => Err(format!("could not signal pid {pid}: {e}")),
    }
}

#[cfg(not(unix))]
fn signal(pid: u32, _force: bool) -> Result<(), String> {
    let mut system = System::new();
    system.refresh_processes(ProcessesToUpdate::Some(&[Pid::from_u32(pid)]), true);
    match system.process(Pid::from_u32(pid)) {
        Some(p) if p.kill() => Ok(()),
        Some(_) => Err(format!("could not kill pid {pid}")),
        None => Err(format!("no process with pid {pid}")),
    }
}
