//! Garbage collection as the FTL sees it: foreground and background GC steps, and what the map
//! does when GC copies, relocates or loses a unit.

use flash::gang::Vpa;
use flash::{Flash, FlashError, Nanos};
use fml::{GcStep, Owner, StreamId};

use crate::map::Map;
use crate::oob::{Kind, Record};
use crate::{Ftl, FtlError, LOST, UNMAPPED};

impl Owner for Map {
    fn record_of(&mut self, from: Vpa, oob: &mut [u8]) -> bool {
        let Some(r) = self
            .owners
            .as_ref()
            .and_then(|o| o.record(from.0, self.slots))
        else {
            return false;
        };
        let e = r.encode();
        match oob.get_mut(..e.len()) {
            Some(dst) => {
                dst.copy_from_slice(&e);
                true
            }
            None => false,
        }
    }

    fn recognizes(&mut self, from: Vpa, oob: &[u8]) -> bool {
        match Record::decode(oob) {
            // A data unit is the one its page holds only if the map points there: a
            // misdirected program may have left another page's unit on it (it landed there
            // first, and the program meant for this page went astray), and then the unit the
            // map means here is lost, not that one (`ossd torture --stack blockfs --faults all
            // --fill 80 --seed 58`, seed 3918125775138367641: an assertion in `relocated`).
            Ok(Some(r)) if r.kind == Kind::Data => self.l2p.get(r.key as usize) == Some(&from.0),
            Ok(Some(_)) => true,
            _ => false,
        }
    }

    fn before_copy(&mut self, from: Vpa, oob: &mut [u8]) -> Option<StreamId> {
        // A copy gets a fresh sequence number: a moved data unit or translation page then wins
        // over the checkpoint at recovery, and every block's records rise with the offset,
        // which bounded recovery relies on. A checkpoint part keeps its checkpoint's number in
        // its page.
        // A packed unit's copy names only its slots still live: a page overwritten since must
        // not come back at recovery under the copy's newer number.
        self.copying = None;
        if let Ok(Some(mut r)) = Record::decode(oob) {
            if r.kind == Kind::Packed {
                r = self.live_slots(from, r);
            }
            self.copying = Some(r);
            r.seq = self.take_seq();
            let e = r.encode();
            oob[..e.len()].copy_from_slice(&e);
            if matches!(r.kind, Kind::Data | Kind::Packed) {
                return self.gc_data_stream;
            }
        }
        None
    }

    #[expect(
        clippy::expect_used,
        reason = "the FML relocates only units whose record this owner recognized (Owner::recognizes) before the copy"
    )]
    fn relocated(&mut self, from: Vpa, to: Vpa, oob: &[u8]) {
        // The record as it was before the copy: a checkpoint part's carries its checkpoint's
        // number.
        let r = self
            .copying
            .take()
            .or_else(|| Record::decode(oob).ok().flatten())
            .expect("GC copied a unit whose record the FTL wrote");
        self.wrote(to.0, &r);
        self.forget(from.0);
        match r.kind {
            Kind::Data => {
                let lpn = r.key;
                assert_eq!(
                    self.l2p[lpn as usize], from.0,
                    "GC moved lpn {lpn} from a unit the map does not point to"
                );
                self.l2p[lpn as usize] = to.0;
                if let Some(cmt) = self.cmt.as_mut() {
                    if !cmt.mark_dirty_if_cached(lpn) {
                        self.moved.push(lpn);
                    }
                }
            }
            Kind::Packed => self.relocate_slots(from, to, &r),
            Kind::Map => self.gtd[r.key as usize] = to.0,
            Kind::Checkpoint => {
                let set = if r.seq == self.ckpt_new_seq {
                    &mut self.ckpt_new
                } else {
                    &mut self.ckpt
                };
                if let Some(slot) = set.iter_mut().find(|v| **v == from.0) {
                    *slot = to.0;
                }
            }
        }
    }

    fn lost(&mut self, from: Vpa, _error: &FlashError) {
        // A rare event: find the owner by search rather than keep a reverse map (4 bytes per
        // unit) for it.
        self.lost += 1;
        self.forget(from.0);
        // Under sub-page mapping the map holds slot locations, not units: a unit holds data
        // exactly when a slot of it is live.
        let data = if self.slots > 1 {
            let live = self.live[from.0 as usize] > 0;
            if live {
                self.lose_slots(from);
            }
            live
        } else if let Some(lpn) = self.l2p.iter().position(|&v| v == from.0) {
            self.l2p[lpn] = LOST;
            true
        } else {
            false
        };
        if data {
            return;
        }
        if let Some(g) = self.gtd.iter_mut().find(|g| **g == from.0) {
            *g = UNMAPPED; // rewritten from the in-memory table at the next write-back
        } else {
            for set in [&mut self.ckpt, &mut self.ckpt_new] {
                set.retain(|v| *v != from.0);
            }
        }
    }
}

impl<F: Flash> Ftl<F> {
    /// Where GC's next copy of a data unit lands, if that stream's update block is open.
    pub fn next_gc_destination(&self) -> Option<Vpa> {
        let stream = self.map.gc_data_stream.unwrap_or(self.fml.gc_stream());
        self.fml.next_unit(stream)
    }

    /// Runs GC until free blocks are back at the low watermark; returns when it is done. Every
    /// write to a host stream (data, translation pages, checkpoints) makes room this way first.
    pub(crate) fn make_room(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = at;
        while self.fml.must_collect() {
            match self.gc_step(t)? {
                GcStep::Idle => break,
                GcStep::Copied { done_ns } | GcStep::Erased { done_ns } => t = done_ns,
                GcStep::Chose { .. } | GcStep::Retired => {}
            }
        }
        Ok(t)
    }

    /// [`Self::make_room`], then the translation updates for units GC moved (DFTL).
    pub(crate) fn foreground_gc(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let t = self.make_room(at)?;
        self.update_moved(t)
    }

    /// Background GC in idle time: steps while the FML wants them and they start before
    /// `until`. Returns when the last step completes.
    pub fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FtlError> {
        let idle = self.buf.is_empty();
        let mut t = from;
        while t < until && self.fml.wants_collect(idle) {
            match self.gc_step(t)? {
                GcStep::Idle => break,
                GcStep::Copied { done_ns } | GcStep::Erased { done_ns } => t = done_ns,
                GcStep::Chose { .. } | GcStep::Retired => {}
            }
        }
        // Translation updates for moved units are written once GC has freed space: they go to
        // a host stream, which may not take GC's last free block.
        self.update_moved(t)
    }

    /// DFTL: brings the translations of units GC moved into the cache, dirty.
    fn update_moved(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = at;
        while let Some(lpn) = self.map.moved.pop() {
            t = self.translate(t, lpn, true)?;
        }
        Ok(t)
    }
}
