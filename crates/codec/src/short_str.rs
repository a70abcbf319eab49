//! `ShortStr`: the AMQP short string (≤ 255 bytes), kept as a `Bytes` slice so decoding a
//! routing key or queue name does not allocate.

use bytes::Bytes;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Invariant: the bytes are valid UTF-8 and at most 255 long.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShortStr(Bytes);

impl ShortStr {
    pub const MAX_LEN: usize = 255;

    pub const fn from_static(s: &'static str) -> ShortStr {
        assert!(s.len() <= Self::MAX_LEN);
        ShortStr(Bytes::from_static(s.as_bytes()))
    }

    /// Checks the invariant on bytes from the wire. Names and routing keys are nearly always
    /// ASCII, which `is_ascii` checks a word at a time; only the rest pays for `from_utf8`.
    pub fn from_bytes(bytes: Bytes) -> Option<ShortStr> {
        Self::is_valid(&bytes).then_some(ShortStr(bytes))
    }

    /// Whether `bytes` would make a short string (`from_bytes` without keeping them).
    pub fn is_valid(bytes: &[u8]) -> bool {
        bytes.len() <= Self::MAX_LEN && (bytes.is_ascii() || std::str::from_utf8(bytes).is_ok())
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor checks (or has by type) valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A copy in an allocation of its own, for a name kept long after the frame it came
    /// in: a slice would keep that frame's whole read buffer alive with it.
    pub fn detached(&self) -> ShortStr {
        ShortStr(Bytes::copy_from_slice(&self.0))
    }

    /// The underlying shared bytes (a reference-count bump, no copy).
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }
}

impl Deref for ShortStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

// Hash as `str` does, so `Borrow<str>` lookups in hash maps agree with ours.
impl Hash for ShortStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

/// Longer strings are cut at the last character boundary within 255 bytes (reply texts are
/// the only place this happens: names from clients arrive already bounded).
impl From<String> for ShortStr {
    fn from(mut s: String) -> ShortStr {
        if s.len() > Self::MAX_LEN {
            let mut end = Self::MAX_LEN;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
        }
        ShortStr(Bytes::from(s))
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> ShortStr {
        ShortStr::from(s.to_owned())
    }
}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_bytes_takes_ascii_and_utf8_and_refuses_the_rest() {
        let ok = |b: &[u8]| ShortStr::from_bytes(Bytes::copy_from_slice(b)).is_some();
        assert!(ok(b"amq.topic"));
        assert!(ok(b""));
        assert!(ok("kö.日本".as_bytes()));
        assert!(!ok(b"\xff"));
        assert!(!ok(b"routing.key.\xc3"));
        assert!(ok(&[b'a'; 255]));
        assert!(!ok(&[b'a'; 256]));
    }
}
