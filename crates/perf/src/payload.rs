//! The message body layout: like PerfTest, the send timestamp travels in the body (so it
//! survives any broker, and clocks on one machine agree), followed by who sent it and its
//! sequence number, which exact loss accounting needs. The rest is padding to `--size`.
//!
//! | bytes  | field                                        |
//! |--------|----------------------------------------------|
//! | 0..8   | send time, ns since the Unix epoch (u64 BE)  |
//! | 8..12  | producer id (u32 BE)                         |
//! | 12..20 | message sequence number per producer (u64 BE)|

use std::time::{SystemTime, UNIX_EPOCH};

/// Bodies are at least this long; a smaller `--size` is rounded up (PerfTest does the same
/// with its 12-byte header).
pub const MIN_BODY_BYTES: usize = 20;

/// The wall clock in ns since the Unix epoch (0 if it reads before it). Read twice per
/// message (stamp and receipt): straight from `clock_gettime(CLOCK_REALTIME)`, the clock
/// `SystemTime::now` reads, without its `Duration` arithmetic (a tenth of the tool's
/// instructions per message went to reading the time).
pub fn now_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) } == 0 {
            return u64::try_from(t.tv_sec).map_or(0, |s| {
                s.saturating_mul(1_000_000_000)
                    .saturating_add(t.tv_nsec as u64)
            });
        }
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub fn new_body(size: usize) -> Vec<u8> {
    vec![b'x'; size.max(MIN_BODY_BYTES)]
}

pub fn stamp(body: &mut [u8], sent_ns: u64, producer_id: u32, seq: u64) {
    body[0..8].copy_from_slice(&sent_ns.to_be_bytes());
    body[8..12].copy_from_slice(&producer_id.to_be_bytes());
    body[12..20].copy_from_slice(&seq.to_be_bytes());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub sent_ns: u64,
    pub producer_id: u32,
    pub seq: u64,
}

/// None for bodies another tool sent.
pub fn parse(body: &[u8]) -> Option<Stamp> {
    if body.len() < MIN_BODY_BYTES {
        return None;
    }
    Some(Stamp {
        sent_ns: u64::from_be_bytes(body[0..8].try_into().ok()?),
        producer_id: u32::from_be_bytes(body[8..12].try_into().ok()?),
        seq: u64::from_be_bytes(body[12..20].try_into().ok()?),
    })
}

/// Flight time in µs, 0 when clocks disagree (a timestamp from the future).
pub fn flight_us(sent_ns: u64, now_ns: u64) -> u64 {
    now_ns.saturating_sub(sent_ns) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_the_system_clock() {
        let system_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        // The same clock read moments apart (a minute's slack for a stepped clock or a
        // descheduled test thread).
        assert!(now_ns().abs_diff(system_ns) < 60_000_000_000);
    }

    #[test]
    fn round_trip() {
        let mut b = new_body(5);
        assert_eq!(b.len(), MIN_BODY_BYTES);
        stamp(&mut b, 123, 7, 99);
        assert_eq!(
            parse(&b),
            Some(Stamp {
                sent_ns: 123,
                producer_id: 7,
                seq: 99
            })
        );
        assert_eq!(parse(b"short"), None);
    }
}
