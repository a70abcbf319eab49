//! Password hashes as RabbitMQ stores them: `base64(salt ++ H(salt ++ password))` with a
//! 4-byte random salt, H being SHA-256 (`rabbit_password_hashing_sha256`, the default) or
//! SHA-512. Hashes exported from RabbitMQ's definitions therefore keep working here, and
//! ours there. Comparison is constant-time.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

pub const SHA256: &str = "rabbit_password_hashing_sha256";
pub const SHA512: &str = "rabbit_password_hashing_sha512";
const SALT_BYTES: usize = 4;

/// A hashing algorithm RabbitMQ names by its module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hashing {
    Sha256,
    Sha512,
}

impl Hashing {
    pub fn parse(module: &str) -> Option<Hashing> {
        match module {
            SHA256 => Some(Hashing::Sha256),
            SHA512 => Some(Hashing::Sha512),
            _ => None,
        }
    }

    pub fn module(self) -> &'static str {
        match self {
            Hashing::Sha256 => SHA256,
            Hashing::Sha512 => SHA512,
        }
    }

    fn digest_len(self) -> usize {
        match self {
            Hashing::Sha256 => 32,
            Hashing::Sha512 => 64,
        }
    }

    fn salted(self, salt: &[u8], password: &str) -> Vec<u8> {
        match self {
            Hashing::Sha256 => {
                let mut h = Sha256::new();
                h.update(salt);
                h.update(password.as_bytes());
                h.finalize().to_vec()
            }
            Hashing::Sha512 => {
                let mut h = Sha512::new();
                h.update(salt);
                h.update(password.as_bytes());
                h.finalize().to_vec()
            }
        }
    }

    /// A fresh hash of `password` with a random salt, base64 as RabbitMQ writes it.
    pub fn hash(self, password: &str) -> String {
        let salt: [u8; SALT_BYTES] = rand::random();
        self.hash_with_salt(salt, password)
    }

    fn hash_with_salt(self, salt: [u8; SALT_BYTES], password: &str) -> String {
        let mut raw = salt.to_vec();
        raw.extend_from_slice(&self.salted(&salt, password));
        BASE64.encode(raw)
    }

    /// Whether `password` matches the base64 `stored` hash. The digest comparison is
    /// constant-time; a malformed or empty hash matches nothing (a user without password).
    pub fn verify(self, stored: &str, password: &str) -> bool {
        let Ok(raw) = BASE64.decode(stored) else {
            return false;
        };
        if raw.len() != SALT_BYTES + self.digest_len() {
            return false;
        }
        let (salt, expected) = raw.split_at(SALT_BYTES);
        self.salted(salt, password).ct_eq(expected).into()
    }

    /// Spends the time of one verification, so that an unknown user takes as long to refuse
    /// as a wrong password (no user enumeration by timing).
    pub fn waste_one_verification(self, password: &str) {
        let _ = self
            .salted(&[0; SALT_BYTES], password)
            .ct_eq(&[0; 64][..self.digest_len()]);
    }
}

/// Whether `stored` looks like a hash this algorithm wrote (for imports).
pub fn well_formed(hashing: Hashing, stored: &str) -> bool {
    stored.is_empty()
        || BASE64
            .decode(stored)
            .is_ok_and(|raw| raw.len() == SALT_BYTES + hashing.digest_len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rabbitmq_layout() {
        // base64(salt ++ sha256(salt ++ "guest")) with salt 0x908dc60a, computed independently
        // (python3: base64.b64encode(salt + hashlib.sha256(salt + b"guest").digest())).
        let salt = [0x90, 0x8d, 0xc6, 0x0a];
        let hash = Hashing::Sha256.hash_with_salt(salt, "guest");
        let raw = BASE64.decode(&hash).unwrap();
        assert_eq!(&raw[..4], &salt);
        let mut h = Sha256::new();
        h.update(salt);
        h.update(b"guest");
        assert_eq!(&raw[4..], &h.finalize()[..]);
        assert!(Hashing::Sha256.verify(&hash, "guest"));
        assert!(!Hashing::Sha256.verify(&hash, "guesT"));
    }

    #[test]
    fn verifies_a_fixed_vector() {
        // python3: base64.b64encode(salt + hashlib.sha256(salt + b"guest").digest()).
        let vector = "kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe";
        let hashing = Hashing::parse("rabbit_password_hashing_sha256").unwrap();
        assert!(well_formed(hashing, vector));
        assert!(hashing.verify(vector, "guest"));
        assert!(!hashing.verify(vector, "Guest"));
    }

    #[test]
    fn salts_differ_and_bad_hashes_match_nothing() {
        let a = Hashing::Sha256.hash("p");
        let b = Hashing::Sha256.hash("p");
        assert_ne!(a, b, "random salt");
        assert!(Hashing::Sha512.verify(&Hashing::Sha512.hash("p"), "p"));
        assert!(!Hashing::Sha256.verify("", "p"));
        assert!(!Hashing::Sha256.verify("not base64!", "p"));
        assert!(!Hashing::Sha512.verify(&a, "p"), "wrong length for sha512");
    }
}
