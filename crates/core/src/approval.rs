//! Step-up approval: where a request stands, and the decision a person makes on it.

use crate::string_enum;

string_enum! {
    /// Where an approval request is. It moves forward only: pending, then decided (approved,
    /// denied, reported) or expired or withdrawn; an approved one is claimed (executing) and
    /// ends completed or failed.
    pub enum ApprovalStatus: "approval status" {
        /// Waiting for a person's decision (until it expires).
        Pending = "pending",
        /// Approved, not yet claimed for its one execution.
        Approved = "approved",
        Denied = "denied",
        /// Denied, and the requesting credential revoked.
        Reported = "reported",
        /// Nobody decided in time.
        Expired = "expired",
        /// Taken back before it ran (the run that asked for it was cancelled).
        Withdrawn = "withdrawn",
        /// Claimed: its one execution is under way.
        Executing = "executing",
        /// It ran; the result is recorded.
        Completed = "completed",
        /// Its execution failed or was interrupted.
        Failed = "failed",
    }
}

impl ApprovalStatus {
    /// Whether nothing more will happen to it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Denied
                | Self::Expired
                | Self::Reported
                | Self::Withdrawn
                | Self::Completed
                | Self::Failed
        )
    }
}

string_enum! {
    /// A person's decision on a pending request, in the form every door takes it (the REST
    /// path, the dashboard's form, the CLI).
    pub enum Decision: "approval decision" {
        Approve = "approve",
        Deny = "deny",
        /// Deny and revoke the requesting credential: the request looks like abuse.
        Report = "report",
    }
}

impl Decision {
    /// The status the request takes.
    pub const fn status(self) -> ApprovalStatus {
        match self {
            Self::Approve => ApprovalStatus::Approved,
            Self::Deny => ApprovalStatus::Denied,
            Self::Report => ApprovalStatus::Reported,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_parse_once_and_lead_to_their_status() {
        assert_eq!("approve".parse::<Decision>(), Ok(Decision::Approve));
        assert!("approved".parse::<Decision>().is_err());
        assert_eq!(Decision::Report.status(), ApprovalStatus::Reported);
        assert!(Decision::Deny.status().is_final());
        assert!(!ApprovalStatus::Approved.is_final());
    }
}
