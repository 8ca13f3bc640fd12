//! Protocol revisions and how a connection settles on one.
//!
//! Revisions up to 2025-11-25 are negotiated by `initialize` (the server echoes the client's
//! revision when it supports it, else offers its latest). 2026-07-28 is stateless: every request
//! names its revision in `_meta`, and there is no `initialize`.

use std::fmt;

/// A protocol revision this engine speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V2024_11_05,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every supported revision, oldest first.
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// The newest revision reachable through `initialize`.
    pub const LATEST_NEGOTIATED: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// Assumed when an HTTP request carries no `MCP-Protocol-Version` header.
    pub const HEADER_DEFAULT: ProtocolVersion = ProtocolVersion::V2025_03_26;

    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a revision string; `None` when unsupported.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The revision answered to an `initialize` asking for `requested`.
    pub fn negotiate(requested: Option<&str>) -> Self {
        match requested.and_then(Self::parse) {
            Some(v) if v <= Self::LATEST_NEGOTIATED => v,
            _ => Self::LATEST_NEGOTIATED,
        }
    }

    /// Whether JSON-RPC batches are accepted (only 2025-03-26 has them).
    pub fn allows_batches(self) -> bool {
        self == ProtocolVersion::V2025_03_26
    }

    /// Whether the revision is the stateless one (no sessions, no `initialize`).
    pub fn is_stateless(self) -> bool {
        self >= ProtocolVersion::V2026_07_28
    }

    /// Whether SSE streams may be resumed with `Last-Event-ID`.
    pub fn resumable(self) -> bool {
        self >= ProtocolVersion::V2025_03_26 && self < ProtocolVersion::V2026_07_28
    }

    /// The list of supported revision strings.
    pub fn supported_strings() -> Vec<&'static str> {
        Self::ALL.iter().map(|v| v.as_str()).collect()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `_meta` key carrying a 2026-07-28 request's revision.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying a 2026-07-28 request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying a 2026-07-28 request's client info.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_or_offers_the_latest() {
        for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
            assert_eq!(ProtocolVersion::negotiate(Some(v)).as_str(), v);
        }
        assert_eq!(
            ProtocolVersion::negotiate(Some("1999-01-01")),
            ProtocolVersion::V2025_11_25
        );
        assert_eq!(
            ProtocolVersion::negotiate(Some("2026-07-28")),
            ProtocolVersion::V2025_11_25
        );
        assert_eq!(
            ProtocolVersion::negotiate(None),
            ProtocolVersion::V2025_11_25
        );
    }

    #[test]
    fn revision_features() {
        assert!(ProtocolVersion::V2025_03_26.allows_batches());
        assert!(!ProtocolVersion::V2025_06_18.allows_batches());
        assert!(ProtocolVersion::V2026_07_28.is_stateless());
        assert!(!ProtocolVersion::V2026_07_28.resumable());
        assert!(ProtocolVersion::V2025_11_25.resumable());
    }
}
