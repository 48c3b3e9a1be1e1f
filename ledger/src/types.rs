//! The ledger's vocabulary as types: a GPU's state, a cost component, a month. The SQL spells
//! them as text; they become these types where a result is read ([`crate::decode`]), so that Rust
//! code matches on variants instead of comparing strings.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::config::IdlePolicy;

/// What a GPU did with a stretch of time (docs/accounting.md, "GPU states").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    Productive,
    AllocatedIdle,
    Failed,
    Preempted,
    Unallocated,
}

impl State {
    /// Every state, in the order reports show them.
    pub const ALL: [State; 5] = [State::Productive, State::AllocatedIdle, State::Failed, State::Preempted, State::Unallocated];

    /// The name in the SQL and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Productive => "productive",
            State::AllocatedIdle => "allocated_idle",
            State::Failed => "failed",
            State::Preempted => "preempted",
            State::Unallocated => "unallocated",
        }
    }

    /// Whether time in this state is lost to a run that did not finish.
    pub fn is_lost(self) -> bool {
        matches!(self, State::Failed | State::Preempted)
    }
}

/// Why idle time was idle (docs/accounting.md "Why GPUs were idle"): the first three split a pod's
/// allocated-idle time, the last three unallocated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdleReason {
    Startup,
    Stall,
    Teardown,
    Cordoned,
    Stranded,
    NoDemand,
}

impl IdleReason {
    /// Every reason, in the order reports show them.
    pub const ALL: [IdleReason; 6] =
        [IdleReason::Startup, IdleReason::Stall, IdleReason::Teardown, IdleReason::Cordoned, IdleReason::Stranded, IdleReason::NoDemand];

    /// The name in the SQL and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleReason::Startup => "startup",
            IdleReason::Stall => "stall",
            IdleReason::Teardown => "teardown",
            IdleReason::Cordoned => "cordoned",
            IdleReason::Stranded => "stranded",
            IdleReason::NoDemand => "no_demand",
        }
    }

    /// The reason's position in [`IdleReason::ALL`] (a chart's series).
    pub fn index(self) -> usize {
        self as usize
    }

    /// What the reason means, in a few words, for the reports' legends.
    pub fn meaning(self) -> &'static str {
        match self {
            IdleReason::Startup => "pod held the GPU before its first busy sample",
            IdleReason::Stall => "pod idle between busy samples",
            IdleReason::Teardown => "pod held the GPU after its last busy sample",
            IdleReason::Cordoned => "node cordoned or not Ready",
            IdleReason::Stranded => "GPU Workloads waited for quota this node could serve",
            IdleReason::NoDemand => "nothing waited for it",
        }
    }
}

impl FromStr for IdleReason {
    type Err = Unknown;

    fn from_str(s: &str) -> Result<IdleReason, Unknown> {
        IdleReason::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| Unknown { what: "idle reason", name: s.to_string() })
    }
}

/// One term of the cost formula `(compute + network + storage + support + idle + failed_runs +
/// operations) / accepted_units`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CostComponent {
    Compute,
    Network,
    Storage,
    Support,
    Idle,
    FailedRuns,
    Operations,
}

impl CostComponent {
    /// Every component, in the order of the formula.
    pub const ALL: [CostComponent; 7] =
        [CostComponent::Compute, CostComponent::Network, CostComponent::Storage, CostComponent::Support, CostComponent::Idle, CostComponent::FailedRuns, CostComponent::Operations];

    /// The name in the SQL, the chargeback's column and the `/metrics` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CostComponent::Compute => "compute",
            CostComponent::Network => "network",
            CostComponent::Storage => "storage",
            CostComponent::Support => "support",
            CostComponent::Idle => "idle",
            CostComponent::FailedRuns => "failed_runs",
            CostComponent::Operations => "operations",
        }
    }
}

/// A calendar month, `YYYY-MM` (UTC).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month(String);

impl Month {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A month that is not `YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("month {0:?} is not YYYY-MM")]
pub struct BadMonth(pub String);

impl FromStr for Month {
    type Err = BadMonth;

    fn from_str(s: &str) -> Result<Month, BadMonth> {
        let b = s.as_bytes();
        let ok = b.len() == 7 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[5..].iter().all(u8::is_ascii_digit) && matches!(s[5..].parse::<u8>(), Ok(1..=12));
        if ok { Ok(Month(s.to_string())) } else { Err(BadMonth(s.to_string())) }
    }
}

/// A name that is not one of a type's variants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct Unknown {
    pub what: &'static str,
    pub name: String,
}

impl FromStr for State {
    type Err = Unknown;

    fn from_str(s: &str) -> Result<State, Unknown> {
        State::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| Unknown { what: "GPU state", name: s.to_string() })
    }
}

impl FromStr for CostComponent {
    type Err = Unknown;

    fn from_str(s: &str) -> Result<CostComponent, Unknown> {
        CostComponent::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| Unknown { what: "cost component", name: s.to_string() })
    }
}

macro_rules! as_text {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    )*};
}
as_text!(State, IdleReason, CostComponent, Month);

// Reports serialise the policy they were made under by its configuration name.
impl Serialize for IdlePolicy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
        }
        for c in CostComponent::ALL {
            assert_eq!(c.as_str().parse::<CostComponent>().unwrap(), c);
        }
        assert_eq!("idle_allocated".parse::<State>().unwrap_err().to_string(), "unknown GPU state \"idle_allocated\"");
        assert!(State::Failed.is_lost() && !State::AllocatedIdle.is_lost());
        for (i, r) in IdleReason::ALL.into_iter().enumerate() {
            assert_eq!(r.as_str().parse::<IdleReason>().unwrap(), r);
            assert_eq!(r.index(), i, "{r}: a chart series is picked by index");
        }
    }

    #[test]
    fn months_are_yyyy_mm() {
        assert_eq!("2026-10".parse::<Month>().unwrap().as_str(), "2026-10");
        for bad in ["2026-13", "2026-00", "2026-1", "26-10", "2026/10", "2026-10-01", ""] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&State::AllocatedIdle).unwrap(), "\"allocated_idle\"");
    }
}
