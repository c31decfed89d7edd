//! The background scrub (issue 16 item 3): the scrub's check and repair (`scrub_units`, shared
//! with [`ObjectStore::scrub`]) run a parity group at a time in the store's idle time, from a
//! cursor kept in memory that walks every object's data units and wraps around.
//!
//! Policy ([`BackgroundScrubConfig`]: how many units per second of idle time, whether it
//! repairs) is apart from the mechanism ([`ObjectStore::scrub_step`]), as GC's victim choice is
//! apart from its copying. Nothing of it is on flash: a repair is the read path's repair (a
//! rebuilt unit programmed as a GC copy, a recomputed parity group), so a power cut in a step
//! leaves what any read repair leaves, and the cursor starts again from the first object.

use std::collections::VecDeque;

use super::*;

/// Background scrub settings (off by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackgroundScrubConfig {
    /// Data units read and checked per second of idle virtual time; 0 (the default) turns the
    /// background scrub off. Off by default because every run and figure so far was measured
    /// without it, and because its reads cost die time and read disturb that only a user who
    /// wants latent damage found early should pay. A rate, not a pass period, so that its cost
    /// does not grow with the store: 1000 units per second (4 MB/s of 4 KiB units) kept the
    /// device busy 4.7% of the idle time on `nandsim-128m` (docs/PERFORMANCE.md) and passes
    /// over 1 GiB of 4 KiB units in under 5 idle minutes.
    pub units_per_second: u64,
    /// Most units one idle period checks (default 256), so that a long idle period (or a
    /// caller passing a far `until`) hands the device back soon: the credit of a longer idle
    /// period is dropped, not banked. At least 1, at most 65536.
    pub max_units_per_call: u64,
    /// Rewrite what parity can rebuild (default true, as `ossd scrub --repair`): a damaged unit
    /// rebuilt from parity whose signature matches its group, a stale or damaged parity group
    /// recomputed from its data. False only checks and counts.
    pub repair: bool,
    /// Unrepairable findings kept in memory, the newest (default 64, at most 4096); the
    /// counters count them all.
    pub max_findings: usize,
}

impl Default for BackgroundScrubConfig {
    fn default() -> Self {
        BackgroundScrubConfig {
            units_per_second: 0,
            max_units_per_call: 256,
            repair: true,
            max_findings: 64,
        }
    }
}

impl BackgroundScrubConfig {
    /// Checks the settings' ranges.
    pub fn validate(&self) -> Result<(), OsdError> {
        if !(1..=65536).contains(&self.max_units_per_call) {
            return Err(OsdError::InvalidArgument(format!(
                "background scrub max_units_per_call = {}: from 1 to 65536",
                self.max_units_per_call
            )));
        }
        if self.max_findings > 4096 {
            return Err(OsdError::InvalidArgument(format!(
                "background scrub max_findings = {}: at most 4096",
                self.max_findings
            )));
        }
        // Idle credit is computed as ns times this rate in 128 bits; a billion units a second
        // is far beyond any device and keeps the figure meaningful.
        if self.units_per_second > 1_000_000_000 {
            return Err(OsdError::InvalidArgument(format!(
                "background scrub units_per_second = {}: at most 1000000000",
                self.units_per_second
            )));
        }
        Ok(())
    }
}

/// Units of an object without parity checked per step (it has no groups to follow).
const UNPROTECTED_SPAN: u64 = 16;

/// The background scrub's state, in memory only.
#[derive(Default)]
pub(super) struct BgScrub {
    pub(super) config: BackgroundScrubConfig,
    /// The next unit to check: (object id, unit).
    cursor: (u128, u64),
    /// The cursor has moved since the pass began (a pass over an empty store is no pass).
    moved: bool,
    /// Idle time credited so far (an idle window is credited once, however often it is
    /// offered).
    credited_until: Nanos,
    /// Idle ns times units per second not yet worth a whole unit.
    carry: u128,
    /// Units checked beyond the last call's budget (a group is never split), owed by the next
    /// calls' credit so that the rate holds on average.
    debt: u64,
    /// The newest unrepairable findings, oldest first.
    findings: VecDeque<ScrubFinding>,
}

/// What one [`ObjectStore::scrub_step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubStep {
    /// Data units read and checked.
    pub units_checked: u64,
    /// Groups passed over because the data buffer holds some of their units (newer than
    /// flash): the next pass checks them.
    pub groups_deferred: u64,
    /// The step finished a pass (the cursor wrapped to the first object); a step ends there.
    pub pass_completed: bool,
}

impl<F: Flash> ObjectStore<F> {
    /// Sets the background scrub's policy (the cursor and counters are kept).
    pub fn set_background_scrub(&mut self, config: BackgroundScrubConfig) -> Result<(), OsdError> {
        config.validate()?;
        self.bg_scrub.config = config;
        while self.bg_scrub.findings.len() > config.max_findings {
            self.bg_scrub.findings.pop_front();
        }
        Ok(())
    }

    /// The background scrub's policy.
    pub fn background_scrub(&self) -> BackgroundScrubConfig {
        self.bg_scrub.config
    }

    /// The unrepairable findings of the background scrub (each damaged range once, the
    /// newest `max_findings`, oldest first); its counters are in [`Self::stats`].
    pub fn background_scrub_findings(&self) -> impl Iterator<Item = &ScrubFinding> {
        self.bg_scrub.findings.iter()
    }

    /// Where the background scrub goes on from: (object, unit).
    pub fn background_scrub_cursor(&self) -> (Oid, u64) {
        (
            Oid::from_u128(self.bg_scrub.cursor.0),
            self.bg_scrub.cursor.1,
        )
    }

    /// The background scrub's share of an idle period `[self.now, until)`: called by
    /// [`Self::background`] once GC has what it needs. Idle time not yet credited earns units
    /// at the configured rate, at most `max_units_per_call`; steps stop at `until`.
    pub(super) fn background_scrub_idle(&mut self, until: Nanos) -> Result<(), OsdError> {
        let cfg = self.bg_scrub.config;
        if cfg.units_per_second == 0 || self.poisoned.is_some() || self.txns.installing {
            return Ok(());
        }
        let start = self.now().max(self.bg_scrub.credited_until);
        if until > start {
            self.bg_scrub.credited_until = until;
            self.bg_scrub.carry += (until - start) as u128 * cfg.units_per_second as u128;
        }
        let earned = (self.bg_scrub.carry / 1_000_000_000) as u64;
        self.bg_scrub.carry %= 1_000_000_000;
        let owed = self.bg_scrub.debt.min(earned);
        self.bg_scrub.debt -= owed;
        let mut budget = (earned - owed).min(cfg.max_units_per_call);
        if budget == 0 {
            return Ok(());
        }
        // A group at a time, so that the scrub hands the device back within one group's reads
        // of `until`, as GC does within one step.
        while budget > 0 && self.now() < until {
            self.set_time(self.now());
            let step = self.scrub_step(1)?;
            if step.pass_completed || step.units_checked == 0 && step.groups_deferred == 0 {
                break;
            }
            // A deferred group costs a unit of budget, so a buffer full of hot groups ends
            // the call as spent budget would.
            let spent = step.units_checked + step.groups_deferred;
            self.bg_scrub.debt += spent.saturating_sub(budget);
            budget = budget.saturating_sub(spent);
        }
        self.set_time(self.now());
        Ok(())
    }

    /// The mechanism of the background scrub: checks (and repairs, by its policy) whole
    /// parity groups from the cursor on until about `max_units` units are checked, at least
    /// one group (a group is never split: its signature needs every unit). Reads are issued at
    /// the store's time and charged to it like any other. A step ends where a pass does.
    /// Returns what it did; no unit, no deferred group and no pass completed means the store
    /// has no data units.
    pub fn scrub_step(&mut self, max_units: u64) -> Result<ScrubStep, OsdError> {
        let repair = self.bg_scrub.config.repair && self.poisoned.is_none();
        let mut step = ScrubStep::default();
        while step.units_checked + step.groups_deferred < max_units.max(1) {
            let Some((oid, u)) = self.next_mapped_unit(self.bg_scrub.cursor)? else {
                if !self.bg_scrub.moved {
                    break;
                }
                self.bg_scrub.cursor = (0, 0);
                self.bg_scrub.moved = false;
                self.stats.bg_scrub_passes += 1;
                // A pass boundary ends the step: the next pass starts with the next call.
                step.pass_completed = true;
                break;
            };
            let protection = self.scrub_protection(oid)?;
            let span = protection.map_or(UNPROTECTED_SPAN, |p| p.0 as u64);
            let first = u / span * span;
            let end = first + span;
            self.bg_scrub.cursor = (oid.as_u128(), end);
            self.bg_scrub.moved = true;
            // Buffered units are newer than flash (and a repair must not race their program):
            // the group waits for the next pass.
            if (first..end).any(|x| self.buf.get((oid, x)).is_some()) {
                step.groups_deferred += 1;
                continue;
            }
            let units = self.mapped_units(oid, first, end)?;
            let mut report = ScrubReport::default();
            self.scrub_units(oid, protection, &units, repair, &mut report)?;
            // Reads of one group overlap on the dies; the next group waits for them.
            self.set_time(self.now());
            step.units_checked += report.units_checked;
            self.note_bg_findings(report);
        }
        Ok(step)
    }

    fn note_bg_findings(&mut self, report: ScrubReport) {
        let st = &mut self.stats;
        st.bg_scrub_units_checked += report.units_checked;
        st.bg_scrub_groups_checked += report.parity_groups_checked;
        st.bg_scrub_damage_found += report.findings.len() as u64;
        st.bg_scrub_repaired += report.repaired;
        st.bg_scrub_unrepairable += report.unrepairable;
        let keep = self.bg_scrub.config.max_findings;
        for f in report.findings {
            if f.outcome != ScrubOutcome::Unrepairable || keep == 0 {
                continue;
            }
            let list = &mut self.bg_scrub.findings;
            // Each damaged range once: a later pass finding it again moves it to the end.
            list.retain(|g| (&g.object, g.offset, g.kind) != (&f.object, f.offset, f.kind));
            if list.len() == keep {
                list.pop_front();
            }
            list.push_back(f);
        }
    }

    /// The first mapped data unit at or after `at` (object, unit) in index order.
    fn next_mapped_unit(&mut self, at: (u128, u64)) -> Result<Option<(Oid, u64)>, OsdError> {
        let key = |oid: u128, offset: u64| IndexKey {
            oid,
            kind: KIND_DATA,
            offset,
        };
        // An extent starting before `at` may cover it.
        let floor = self.with_index(|ix, io| ix.floor(io, &key(at.0, at.1)))?;
        if let Some((k, v)) = floor {
            if k.oid == at.0 && k.kind == KIND_DATA && k.offset + extent(v).1 as u64 > at.1 {
                return Ok(Some((Oid::from_u128(at.0), at.1)));
            }
        }
        let mut from = key(at.0, at.1);
        loop {
            let next = self.with_index(|ix, io| ix.range(io, &from, &IndexKey::MAX, 1))?;
            let Some(&(k, _)) = next.first() else {
                return Ok(None);
            };
            from = match k.kind {
                KIND_DATA => return Ok(Some((Oid::from_u128(k.oid), k.offset))),
                // The object's data keys follow its onode key.
                kind if kind < KIND_DATA => key(k.oid, 0),
                // Past the object's data keys (its parity, chunk or small-object keys).
                _ => match k.oid.checked_add(1) {
                    Some(o) => key(o, 0),
                    None => return Ok(None),
                },
            };
        }
    }
}
