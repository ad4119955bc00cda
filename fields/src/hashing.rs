//! One fast hasher for the engine's in-memory maps and digests: a
//! multiply-rotate over 8-byte words (the scheme of rustc's Fx hash). The
//! keys it serves (pointers, ids, small integers, a recorded step's launch
//! list) come from the engine itself, never from outside input, so
//! resistance to crafted collisions is not needed, and SipHash's cost
//! showed in profiles (an assignment looked up per call, a V-cycle's memo
//! hundreds of times per solve). Nothing hashed here is stored on disk.
//!
//! ```
//! use std::collections::HashMap;
//! use watershed_fields::hashing::{QuickHash, digest_of};
//! let mut ids: HashMap<u64, &str, QuickHash> = HashMap::default();
//! ids.insert(7, "seven");
//! assert_eq!(ids[&7], "seven");
//! assert_eq!(digest_of(&[1u64, 2]), digest_of(&[1u64, 2]));
//! assert_ne!(digest_of(&[1u8, 2]), digest_of(&[1u8, 2, 0]));
//! ```

use std::hash::{BuildHasherDefault, Hash, Hasher};

/// The multiply-rotate hasher (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct QuickHasher(u64);

impl Hasher for QuickHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    /// Whole 8-byte words, then the rest in one word tagged with its length
    /// (so that `[1, 2]` and `[1, 2, 0]` differ).
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

/// `HashMap<K, V, QuickHash>`: a map hashed with [`QuickHasher`].
pub type QuickHash = BuildHasherDefault<QuickHasher>;

/// `value` hashed with [`QuickHasher`]: a 64-bit digest.
pub fn digest_of(value: &impl Hash) -> u64 {
    let mut hasher = QuickHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}
