//! The scrub (OSCM-11 III, "Object-level reliability"): every data unit of every object read
//! and checked against its checksum, every parity group of a protected object checked against
//! the signature of its data, and (when asked) what parity can rebuild rewritten.

use super::parity::Rebuilt;
use super::*;

/// What became of a damaged unit or parity group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScrubOutcome {
    /// Rebuilt from parity (or, for a parity group, recomputed from the data) and rewritten.
    Repaired,
    /// Parity can rebuild it; the scrub was asked not to write.
    Repairable,
    /// Its contents are lost: the object has no parity, or too much of its group is damaged.
    Unrepairable,
}

/// One damaged unit, or one parity group whose parity does not match its data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScrubFinding {
    /// The object.
    pub object: String,
    /// First byte of the damaged range in the object.
    pub offset: u64,
    /// Bytes in the damaged range (a unit, or a whole parity group's data).
    pub length: u64,
    /// `data unit` or `parity group`.
    pub kind: &'static str,
    /// What is wrong with it.
    pub what: String,
    /// What the scrub did about it.
    pub outcome: ScrubOutcome,
}

/// What a scrub checked, found, repaired and lost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrubReport {
    /// Objects with data units.
    pub objects: u64,
    /// Of those, objects with parity.
    pub protected_objects: u64,
    /// Data units read and checked.
    pub units_checked: u64,
    /// Parity groups whose parity was read and checked against its data.
    pub parity_groups_checked: u64,
    /// Every damaged unit and mismatched parity group.
    pub findings: Vec<ScrubFinding>,
    /// Findings repaired.
    pub repaired: u64,
    /// Findings whose contents are lost.
    pub unrepairable: u64,
}

impl ScrubReport {
    fn push(&mut self, f: ScrubFinding) {
        match f.outcome {
            ScrubOutcome::Repaired => self.repaired += 1,
            ScrubOutcome::Unrepairable => self.unrepairable += 1,
            ScrubOutcome::Repairable => {}
        }
        self.findings.push(f);
    }
}

impl<F: Flash> ObjectStore<F> {
    /// Every object with at least one data extent in the index, each once (the index is
    /// ordered by object, so equal ids are adjacent).
    fn data_objects(&mut self) -> Result<Vec<Oid>, OsdError> {
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        let mut objects: Vec<Oid> = all
            .iter()
            .filter(|(k, _)| k.kind == KIND_DATA)
            .map(|(k, _)| Oid::from_u128(k.oid))
            .collect();
        objects.dedup();
        Ok(objects)
    }

    /// Scrubs the store (with `repair`, after a flush), reading every data unit of every object
    /// and checks it, and checks every parity group of a protected object against its data's
    /// signature. With `repair`, damaged units parity can rebuild are rewritten and stale or
    /// damaged parity is recomputed (and flushed). Units of small objects (in small-object
    /// pages) and inline data are not covered; `fsck` checks those pages.
    pub fn scrub(&mut self, repair: bool) -> Result<ScrubReport, OsdError> {
        if repair {
            self.check_writable()?;
            self.flush_all()?;
        }
        let objects = self.data_objects()?;
        let mut report = ScrubReport::default();
        for oid in objects {
            report.objects += 1;
            self.scrub_object(oid, repair, &mut report)?;
        }
        if repair {
            self.flush_parity()?;
        }
        Ok(report)
    }

    /// The quick scan (OSCM-11 III's "quick scan", from the OOB records alone): for every
    /// parity group of every protected object, the signature of its data units' payload
    /// checksums must equal its parity units' covers signature. No payload is read, so damage
    /// to a unit's bytes is not seen (the full scrub, [`Self::scrub`], reads them); what it
    /// finds is parity that is stale or missing and units whose OOB record cannot be read. Its
    /// findings are `Repairable` (`scrub` with `repair` recomputes such parity) when the
    /// group's data reads back, which the quick scan does not check.
    pub fn scrub_quick(&mut self) -> Result<ScrubReport, OsdError> {
        let objects = self.data_objects()?;
        let unit = self.unit as u64;
        let mut report = ScrubReport::default();
        for oid in objects {
            report.objects += 1;
            let Some((k, m)) = (match self.load_onode(oid)? {
                Some(_) => self.protection(oid)?,
                None => None,
            }) else {
                continue;
            };
            report.protected_objects += 1;
            let mapped = self.mapped_units(oid, 0, u64::MAX)?;
            report.units_checked += mapped.len() as u64;
            let mut groups: Vec<u64> = mapped.iter().map(|(u, _)| u / k as u64).collect();
            groups.dedup();
            for g in groups {
                report.parity_groups_checked += 1;
                // Dirty groups in the cache are newer than flash: the full scrub checks those.
                if self.parity.get(&(oid, g)).is_some_and(|p| p.is_dirty())
                    || self.parity_current_by_oob(oid, g, k, m)?
                {
                    continue;
                }
                report.push(ScrubFinding {
                    object: oid.to_string(),
                    offset: g * k as u64 * unit,
                    length: k as u64 * unit,
                    kind: "parity group",
                    what: "the signature of its data's OOB records does not match its parity \
                           (stale or missing parity, or an unreadable record)"
                        .into(),
                    outcome: ScrubOutcome::Repairable,
                });
            }
        }
        Ok(report)
    }

    fn scrub_object(
        &mut self,
        oid: Oid,
        repair: bool,
        report: &mut ScrubReport,
    ) -> Result<(), OsdError> {
        let protection = self.scrub_protection(oid)?;
        if protection.is_some() {
            report.protected_objects += 1;
        }
        let k = protection.map_or(1, |p| p.0 as u64);
        let mapped = self.mapped_units(oid, 0, u64::MAX)?;
        let mut at = 0;
        while at < mapped.len() {
            let g = mapped[at].0 / k;
            let end = mapped[at..]
                .iter()
                .position(|(u, _)| u / k != g)
                .map_or(mapped.len(), |n| at + n);
            self.scrub_units(oid, protection, &mapped[at..end], repair, report)?;
            at = end;
        }
        Ok(())
    }

    /// The object's parity (data units per group, parity units), `None` without (or without
    /// an onode).
    pub(super) fn scrub_protection(&mut self, oid: Oid) -> Result<Option<(u8, u8)>, OsdError> {
        match self.load_onode(oid)? {
            Some(_) => self.protection(oid),
            None => Ok(None),
        }
    }

    /// The check (and with `repair`, the repair) of mapped units of `oid`, shared by the scrub
    /// command and the background scrub: with `protection`, `units` are the mapped units of
    /// one parity group (every one of them, so the group's signature can be checked); without,
    /// any units, each checked alone. A damaged unit is rewritten only from parity whose
    /// signature matches the rest of its group (`reconstruct_group` refuses stale parity).
    pub(super) fn scrub_units(
        &mut self,
        oid: Oid,
        protection: Option<(u8, u8)>,
        units: &[(u64, u32)],
        repair: bool,
        report: &mut ScrubReport,
    ) -> Result<(), OsdError> {
        let Some(&(first, _)) = units.first() else {
            return Ok(());
        };
        let k = protection.map_or(1, |p| p.0 as u64);
        let g = first / k;
        let unit = self.unit as u64;
        let mut damaged = Vec::new();
        let mut sig = 0u32;
        for &(u, v) in units {
            report.units_checked += 1;
            let r = if v == LOST {
                Err(OsdError::Uncorrectable {
                    what: "unreadable when GC moved it".into(),
                    location: "lost".into(),
                    unit: None,
                })
            } else {
                self.read_data_unit(oid, u, v)
            };
            match r {
                Ok(c) => {
                    let crc = match c {
                        Content::Fingerprint(fp) => payload_crc(Payload::Fingerprint(fp)),
                        _ => payload_crc(Payload::Bytes(&self.scratch)),
                    };
                    sig ^= covers_term(u - g * k, crc);
                }
                Err(e @ (OsdError::Device(_) | OsdError::Internal(_))) => return Err(e),
                Err(e) => damaged.push((u, e.to_string())),
            }
        }
        let Some((kk, m)) = protection else {
            for (u, what) in damaged {
                report.push(ScrubFinding {
                    object: oid.to_string(),
                    offset: u * unit,
                    length: unit,
                    kind: "data unit",
                    what,
                    outcome: ScrubOutcome::Unrepairable,
                });
            }
            return Ok(());
        };
        let group_range = (g * k * unit, k * unit);
        if damaged.is_empty() {
            report.parity_groups_checked += 1;
            // The cache holds the parity of the data on flash, newer than flash's when dirty.
            let cached = self.parity.get(&(oid, g)).map(|p| p.usable_for(sig));
            let stored = match cached {
                Some(c) => Some(c),
                None => self
                    .read_parity_units(oid, g, kk, m)?
                    .map(|p| p.usable_for(sig)),
            };
            let what = match stored {
                Some(true) => return Ok(()),
                Some(false) => "its parity is stale (the signature does not match the data)",
                None => "its parity units are missing or damaged",
            };
            let outcome = if repair {
                let grp = self.rebuild_group(oid, g, kk, m)?;
                self.parity.insert((oid, g), grp);
                self.flush_parity()?;
                ScrubOutcome::Repaired
            } else {
                ScrubOutcome::Repairable
            };
            report.push(ScrubFinding {
                object: oid.to_string(),
                offset: group_range.0,
                length: group_range.1,
                kind: "parity group",
                what: what.into(),
                outcome,
            });
            return Ok(());
        }
        let rebuilt = self.reconstruct_group(oid, g)?;
        for (u, what) in damaged {
            let (outcome, what) = match &rebuilt {
                Rebuilt::Units(units) => match units.iter().find(|(x, _)| *x == u) {
                    Some((_, fill)) if repair => {
                        // Without room (or on a poisoned store) the rewrite leaves the damaged
                        // copy: then it is only repairable, and parity still rebuilds it.
                        let before = self.stats.units_rewritten;
                        self.rewrite_rebuilt(oid, u, fill)?;
                        if self.stats.units_rewritten > before {
                            self.stats.units_corrected += 1;
                            (ScrubOutcome::Repaired, what)
                        } else {
                            (ScrubOutcome::Repairable, what)
                        }
                    }
                    Some(_) => (ScrubOutcome::Repairable, what),
                    None => (
                        ScrubOutcome::Unrepairable,
                        format!("{what}; reads back whole within its group"),
                    ),
                },
                Rebuilt::Not(why) => (
                    ScrubOutcome::Unrepairable,
                    format!("{what}; parity did not rebuild it: {why}"),
                ),
            };
            report.push(ScrubFinding {
                object: oid.to_string(),
                offset: u * unit,
                length: unit,
                kind: "data unit",
                what,
                outcome,
            });
        }
        Ok(())
    }
}
