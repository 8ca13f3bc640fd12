//! Patch jobs' vocabulary: where a job and each device's part of it stand, and what an agent
//! reports for one package. Stored and sent as their text.

use crate::string_enum;

string_enum! {
    /// Install or roll back.
    pub enum PatchJobKind: "patch job kind" {
        Install = "install",
        Rollback = "rollback",
    }
}

string_enum! {
    /// Where a patch job is.
    pub enum PatchJobStatus: "patch job status" {
        /// Waiting for its maintenance window.
        Scheduled = "scheduled",
        /// Sent to its devices; not every part has answered.
        Running = "running",
        /// Every device's part succeeded.
        Succeeded = "succeeded",
        /// Some parts succeeded (fully or partly), some did not.
        Partial = "partial",
        Failed = "failed",
        /// Cancelled while it waited for its window.
        Cancelled = "cancelled",
    }
}

string_enum! {
    /// Where one device's part of a patch job is.
    pub enum PatchPartStatus: "patch part status" {
        /// Waiting for the job's window.
        Scheduled = "scheduled",
        /// Its command is on its way to, or running on, the agent.
        Sent = "sent",
        /// Every package changed as asked.
        Succeeded = "succeeded",
        /// Some packages changed, some did not.
        Partial = "partial",
        Failed = "failed",
        /// Not sent: the job was cancelled.
        Skipped = "skipped",
    }
}

impl PatchPartStatus {
    /// Whether the part still waits for its command's answer (or its window).
    pub fn is_open(self) -> bool {
        matches!(self, Self::Scheduled | Self::Sent)
    }
}

string_enum! {
    /// What an install, rollback or removal did to one package, as the agent reports it.
    pub enum PackageStatus: "package status" {
        Installed = "installed",
        RolledBack = "rolled_back",
        Removed = "removed",
        /// A removal found it not installed.
        NotInstalled = "not_installed",
        Failed = "failed",
        /// The package manager does not offer it (at that version).
        NotAvailable = "not_available",
    }
}

impl PackageStatus {
    /// Whether an install or rollback did what was asked.
    pub fn changed_as_asked(self) -> bool {
        matches!(self, Self::Installed | Self::RolledBack)
    }
}
