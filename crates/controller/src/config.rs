//! The controller's settings: which policy each decision follows, with the papers' defaults.

use serde::{Deserialize, Serialize};

/// Which queued request the controller issues next (BLOCKMGMT-09 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DieScheduler {
    /// First come, first served.
    Fcfs,
    /// Shortest wait time first: the request whose dies are free soonest.
    Swtf,
}

/// Whether cleaning looks at outstanding priority requests (BLOCKMGMT-09 3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleaning {
    /// Postponed to the critical threshold while priority requests are outstanding.
    Aware,
    /// Starts at the low threshold whatever is outstanding.
    Agnostic,
}

/// Whether a prioritized request may run between two GC steps (OSSD-13 V-F).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPreemption {
    /// Prioritized requests run between steps; they wait for at most one step.
    Step,
    /// Nothing runs until the collection under way has erased its victim.
    Collection,
    /// Any request may run between two steps (prioritized ones first; a step goes before a
    /// normal request whenever its dies are free), until free blocks fall below the critical
    /// threshold; then as [`GcPreemption::Step`]. Cleaning as background work of a device that
    /// shares its dies between the cleaner and the host.
    Interleave,
}

/// Whether writes are merged and aligned to the stripe (BLOCKMGMT-09 3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StripeMerge {
    /// A write goes with the queued writes of its class that extend it within its stripes.
    Aligned,
    /// Writes are issued as they come.
    Unaligned,
}

/// A setting out of its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The cleaning thresholds are out of order or out of range.
    #[error("prio thresholds must satisfy 0 < critical_free_percent ({critical}) <= low_free_percent ({low}) < 100")]
    Thresholds {
        /// `critical_free_percent`.
        critical: f64,
        /// `low_free_percent`.
        low: f64,
    },
    /// SWTF needs at least one request to look at.
    #[error("prio.queue_depth must be at least 1")]
    QueueDepth,
}

/// Settings of the device-side controller, with the papers' defaults. The lab's experiments
/// set them as `prio.*`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// Default FCFS.
    pub scheduler: DieScheduler,
    /// Default priority-aware.
    pub cleaning: Cleaning,
    /// Cleaning starts below this share of free blocks, in percent (default 5, BLOCKMGMT-09 3.6).
    pub low_free_percent: f64,
    /// With priority requests outstanding, priority-aware cleaning waits until free blocks fall
    /// below this share, in percent (default 2, BLOCKMGMT-09 3.6).
    pub critical_free_percent: f64,
    /// Default step (OSSD-13 V-F).
    pub gc_preemption: GcPreemption,
    /// Default unaligned (writes issued as they come).
    pub stripe_merge: StripeMerge,
    /// Requests of one class SWTF looks at, oldest first (default 32, a SATA NCQ's depth).
    pub queue_depth: u32,
    /// Whether the device sees the host's priorities (default true). False is a device behind
    /// an interface that does not carry them: every request is served as priority 0 (its
    /// latency is still reported under its own class).
    pub honor_priorities: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            scheduler: DieScheduler::Fcfs,
            cleaning: Cleaning::Aware,
            low_free_percent: 5.0,
            critical_free_percent: 2.0,
            gc_preemption: GcPreemption::Step,
            stripe_merge: StripeMerge::Unaligned,
            queue_depth: 32,
            honor_priorities: true,
        }
    }
}

impl ControllerConfig {
    /// Checks the settings once, before a run.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (critical, low) = (self.critical_free_percent, self.low_free_percent);
        if !(critical > 0.0 && critical <= low && low < 100.0) {
            return Err(ConfigError::Thresholds { critical, low });
        }
        if self.queue_depth == 0 {
            return Err(ConfigError::QueueDepth);
        }
        Ok(())
    }

    /// A threshold in blocks: the share of `blocks`, rounded up, at least 1.
    pub fn blocks_below(percent: f64, blocks: u32) -> u32 {
        ((percent / 100.0 * blocks as f64).ceil() as u32).max(1)
    }

    /// FML watermarks that leave the decision of when to clean to this controller: the FML
    /// collects inside a write only at 2 free blocks (its floor), and lets background steps run
    /// up to one block above the low threshold.
    pub fn fml_watermarks(&self, blocks: u32) -> Watermarks {
        let high = (Self::blocks_below(self.low_free_percent, blocks) + 1).max(2);
        Watermarks {
            low_blocks: 2,
            high_busy_blocks: high,
            high_idle_blocks: high,
        }
    }
}

/// The FML watermarks a controller wants ([`ControllerConfig::fml_watermarks`]), in blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// The FML collects inside a write below this.
    pub low_blocks: u32,
    /// Background steps run up to this while requests are outstanding.
    pub high_busy_blocks: u32,
    /// Background steps run up to this when idle.
    pub high_idle_blocks: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_validate_and_round_up() {
        assert_eq!(ControllerConfig::blocks_below(5.0, 164), 9);
        assert_eq!(ControllerConfig::blocks_below(2.0, 164), 4);
        assert_eq!(ControllerConfig::blocks_below(2.0, 10), 1);
        let bad = ControllerConfig {
            critical_free_percent: 6.0,
            ..ControllerConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Thresholds { .. })
        ));
        let zero = ControllerConfig {
            queue_depth: 0,
            ..ControllerConfig::default()
        };
        assert_eq!(zero.validate(), Err(ConfigError::QueueDepth));
        assert!(ControllerConfig::default().validate().is_ok());
        let w = ControllerConfig::default().fml_watermarks(164);
        assert_eq!(
            (w.low_blocks, w.high_busy_blocks, w.high_idle_blocks),
            (2, 10, 10)
        );
    }
}
