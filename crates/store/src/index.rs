//! The live index: which (queue, message) references are live, and which
//! segment a message id lives in (docs/STORAGE.md §5.1).
//!
//! Per queue the live ids are a [`RoaringTreemap`] (about one bit per
//! message for dense ids). No per-message location is kept: message ids are
//! store-wide and increase in log order, and the PUBLISH records of segment N
//! hold exactly the ids `[base(N), base(next segment))`, where `base` is the
//! `base_message_id` of the segment header (assigned before the id of the
//! record that triggered the rollover). So one map from each segment's base id
//! to its number finds the segment of any live id. A segment holding no
//! PUBLISH has the same base as the next one; on such ties the later segment
//! wins (the earlier one holds no id to look up).

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included};

use roaring::RoaringTreemap;

use crate::recovery::SegmentInfo;

/// Base message id → segment number.
pub type Bases = BTreeMap<u64, u32>;

/// The segment whose PUBLISH records hold `id`, if any managed segment can.
pub fn segment_of(bases: &Bases, id: u64) -> Option<u32> {
    bases.range(..=id).next_back().map(|(_, segment)| *segment)
}

/// Records a segment's base (a later segment overwrites an equal base).
pub fn add_base(bases: &mut Bases, segment: u32, info: &SegmentInfo) {
    bases.insert(info.base_message_id, segment);
}

/// Drops a removed segment's base, unless a later segment owns that base.
pub fn forget_base(bases: &mut Bases, segment: u32, info: &SegmentInfo) {
    if bases.get(&info.base_message_id) == Some(&segment) {
        bases.remove(&info.base_message_id);
    }
}

/// How many of `ids` each segment holds, as (segment, count) with count > 0,
/// computed from ranks (no per-id iteration). Ids below the lowest base are
/// not attributed to any segment (there are none in a consistent index).
pub fn refs_per_segment(ids: &RoaringTreemap, bases: &Bases) -> Vec<(u32, u64)> {
    let (Some(min), Some(max)) = (ids.min(), ids.max()) else {
        return Vec::new();
    };
    // The segment holding `min`, then every segment starting in (min, max].
    let starts: Vec<(u64, u32)> = bases
        .range(..=min)
        .next_back()
        .into_iter()
        .chain(bases.range((Excluded(min), Included(max))))
        .map(|(base, segment)| (*base, *segment))
        .collect();
    let mut out = Vec::with_capacity(starts.len());
    for (i, &(start, segment)) in starts.iter().enumerate() {
        // Number of ids < start, and < the next segment's start.
        let below = if start == 0 { 0 } else { ids.rank(start - 1) };
        let upto = match starts.get(i + 1) {
            Some(&(next, _)) => ids.rank(next - 1),
            None => ids.len(),
        };
        if upto > below {
            out.push((segment, upto - below));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(base: u64) -> SegmentInfo {
        SegmentInfo {
            base_message_id: base,
            ..SegmentInfo::default()
        }
    }

    #[test]
    fn ids_map_to_the_segment_whose_range_holds_them() {
        let mut bases = Bases::new();
        add_base(&mut bases, 1, &info(1));
        add_base(&mut bases, 2, &info(10));
        add_base(&mut bases, 3, &info(10)); // 2 holds no publish: 3 wins the tie
        add_base(&mut bases, 4, &info(25));
        assert_eq!(segment_of(&bases, 0), None);
        assert_eq!(segment_of(&bases, 1), Some(1));
        assert_eq!(segment_of(&bases, 9), Some(1));
        assert_eq!(segment_of(&bases, 10), Some(3));
        assert_eq!(segment_of(&bases, 24), Some(3));
        assert_eq!(segment_of(&bases, u64::MAX), Some(4));
        forget_base(&mut bases, 2, &info(10)); // not its base any more: kept
        assert_eq!(segment_of(&bases, 10), Some(3));
        forget_base(&mut bases, 3, &info(10));
        assert_eq!(segment_of(&bases, 10), Some(1));
    }

    #[test]
    fn counts_per_segment_by_rank() {
        let mut bases = Bases::new();
        for (segment, base) in [(1, 1), (2, 100), (3, 200), (4, 200), (5, 1000)] {
            add_base(&mut bases, segment, &info(base));
        }
        let mut ids = RoaringTreemap::new();
        ids.insert_range(50..150); // 50 in 1, 50 in 2
        ids.insert(999); // 4
        ids.insert(1000); // 5
        ids.insert(u64::MAX); // 5
        assert_eq!(
            refs_per_segment(&ids, &bases),
            vec![(1, 50), (2, 50), (4, 1), (5, 2)]
        );
        assert_eq!(refs_per_segment(&RoaringTreemap::new(), &bases), vec![]);
        let one: RoaringTreemap = [150u64].into_iter().collect();
        assert_eq!(refs_per_segment(&one, &bases), vec![(2, 1)]);
        let zero: RoaringTreemap = [0u64, 5].into_iter().collect();
        assert_eq!(refs_per_segment(&zero, &bases), vec![(1, 1)]);
    }

    #[test]
    fn counts_match_a_naive_count() {
        let mut bases = Bases::new();
        let mut state = 7u64;
        let mut base = 0;
        for segment in 1..50u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            base += state >> 58; // 0..63, ties included
            add_base(&mut bases, segment, &info(base));
        }
        let mut ids = RoaringTreemap::new();
        for _ in 0..500 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ids.insert(state % (base + 100));
        }
        let mut naive: BTreeMap<u32, u64> = BTreeMap::new();
        for id in &ids {
            if let Some(segment) = segment_of(&bases, id) {
                *naive.entry(segment).or_default() += 1;
            }
        }
        let got: BTreeMap<u32, u64> = refs_per_segment(&ids, &bases).into_iter().collect();
        assert_eq!(got, naive);
    }
}
