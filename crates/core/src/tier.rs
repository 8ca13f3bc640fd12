//! Tiers: how much a tool call can change, and so what it takes to allow it.

use serde::Serialize;

use crate::Scope;

/// How much a call can change. Declared on every tool and action; the guard turns it into
/// the scope a key needs and whether a person must approve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Tier {
    /// Reads only; needs `ai:read`.
    T1 = 1,
    /// Low-risk changes; needs `ai:write` (or `ai:execute`).
    T2 = 2,
    /// Destructive or code-running; needs `ai:execute` and human approval.
    T3 = 3,
    /// Never allowed.
    T4 = 4,
}

impl Tier {
    /// 1 to 4.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// The scope a key needs for this tier (outside the production `ai:execute_admin` rule).
    pub fn scope(self) -> Scope {
        match self {
            Tier::T1 => Scope::AiRead,
            Tier::T2 => Scope::AiWrite,
            Tier::T3 | Tier::T4 => Scope::AiExecute,
        }
    }
}
