//! Key_Shared routing: the key a stored entry is routed by, its hash, and which consumer of a
//! subscription owns each hash (Pulsar's AUTO_SPLIT hash ranges).
//!
//! Owns no I/O and no subscription state beyond the hash ranges. Must never route two entries
//! of one key to two consumers while the range map is unchanged: [`Ranges::owner`] depends on
//! the hash alone, and the hash on the key bytes alone.

use std::borrow::Cow;
use std::collections::BTreeMap;

use prost::Message as _;
use pulsar::proto::{self, CompressionType};

/// Hashes are taken modulo this (Pulsar's `DEFAULT_RANGE_SIZE`): `0..RANGE`.
pub const RANGE: u32 = 1 << 16;

/// The key of a message without an ordering key or partition key (Pulsar's `NONE_KEY`).
pub const NONE_KEY: &[u8] = b"NONE_KEY";

/// Murmur3 x86 32-bit of `data` with `seed`.
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mix = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h = seed;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        h = (h ^ mix(k))
            .rotate_left(13)
            .wrapping_mul(5)
            .wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        h ^= mix(k);
    }
    // A key longer than 4 GiB does not fit a frame; the length is taken modulo 2^32 as Murmur3.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "Murmur3 mixes in the length modulo 2^32"
    )]
    let len = data.len() as u32;
    h ^= len;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The hash a key is routed by, as a Pulsar broker: Murmur3 32-bit (seed 0) of the key bytes,
/// its sign bit cleared, modulo [`RANGE`].
pub fn key_hash(key: &[u8]) -> u32 {
    (murmur3_32(key, 0) & 0x7fff_ffff) % RANGE
}

/// The key an entry is routed by: the metadata's `ordering_key`, else its `partition_key`;
/// for a batch whose metadata names neither, the first message's (read from an uncompressed
/// batch payload only); else [`NONE_KEY`]. A batch of several keys goes by its first key.
pub fn entry_key<'a>(metadata: &'a proto::MessageMetadata, payload: &'a [u8]) -> Cow<'a, [u8]> {
    if let Some(key) = message_key(
        metadata.ordering_key.as_deref(),
        metadata.partition_key.as_deref(),
    ) {
        return Cow::Borrowed(key);
    }
    let plain = metadata
        .compression
        .is_none_or(|c| c == CompressionType::None as i32);
    if metadata.num_messages_in_batch.is_some()
        && plain
        && let Some(first) = first_single_metadata(payload)
        && let Some(key) = message_key(
            first.ordering_key.as_deref(),
            first.partition_key.as_deref(),
        )
    {
        return Cow::Owned(key.to_vec());
    }
    Cow::Borrowed(NONE_KEY)
}

fn message_key<'a>(ordering: Option<&'a [u8]>, partition: Option<&'a str>) -> Option<&'a [u8]> {
    ordering
        .filter(|k| !k.is_empty())
        .or_else(|| partition.filter(|k| !k.is_empty()).map(str::as_bytes))
}

/// The first message's metadata of a batch payload: `u32` big-endian length, then that many
/// bytes of `SingleMessageMetadata`; `None` when the bytes do not hold it.
fn first_single_metadata(payload: &[u8]) -> Option<proto::SingleMessageMetadata> {
    let (len, rest) = payload.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    let bytes = rest.get(..len)?;
    proto::SingleMessageMetadata::decode(bytes).ok()
}

/// Which consumer owns each hash: contiguous ranges covering `0..RANGE`, keyed by their last
/// hash (inclusive). As Pulsar's AUTO_SPLIT selector: the first consumer owns every hash; each
/// consumer joining takes the lower half of the widest range (the first of the widest), whose
/// owner keeps the upper half; a consumer leaving gives its range to the range above it (to the
/// one below when it held the top range).
#[derive(Debug, Default)]
pub struct Ranges {
    ends: BTreeMap<u32, u64>,
}

impl Ranges {
    /// Gives `consumer` a range.
    pub fn add(&mut self, consumer: u64) {
        let mut widest: Option<(u32, u32)> = None;
        let mut start = 0;
        for &end in self.ends.keys() {
            if widest.is_none_or(|(s, e)| end - start > e - s) {
                widest = Some((start, end));
            }
            start = end + 1;
        }
        match widest {
            None => {
                self.ends.insert(RANGE - 1, consumer);
            }
            Some((start, end)) => {
                self.ends.insert(start + (end - start) / 2, consumer);
            }
        }
    }

    /// Takes `consumer`'s range away, giving it to a neighbour.
    pub fn remove(&mut self, consumer: u64) {
        let Some(end) = self
            .ends
            .iter()
            .find(|(_, c)| **c == consumer)
            .map(|(e, _)| *e)
        else {
            return;
        };
        self.ends.remove(&end);
        if end == RANGE - 1
            && let Some((&below, &owner)) = self.ends.iter().next_back()
        {
            self.ends.remove(&below);
            self.ends.insert(end, owner);
        }
    }

    /// The consumer owning `hash`.
    pub fn owner(&self, hash: u32) -> Option<u64> {
        self.ends.range(hash..).next().map(|(_, c)| *c)
    }

    /// Forgets every range.
    pub fn clear(&mut self) {
        self.ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_known_vectors() {
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65, 0x87], 0), 0xf55b_516b);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65], 0), 0x7e4a_8634);
    }

    #[test]
    fn ranges_split_the_widest_and_give_back_to_a_neighbour() {
        let mut r = Ranges::default();
        assert_eq!(r.owner(0), None);
        r.add(1);
        assert!((0..RANGE).step_by(997).all(|h| r.owner(h) == Some(1)));
        r.add(2);
        assert_eq!(
            (r.owner(0), r.owner(32767), r.owner(32768)),
            (Some(2), Some(2), Some(1))
        );
        r.add(3);
        // The widest first: [0, 32767] (2's) splits, 3 taking [0, 16383].
        assert_eq!(
            (r.owner(16383), r.owner(16384), r.owner(65535)),
            (Some(3), Some(2), Some(1))
        );
        r.remove(2);
        assert_eq!(
            (r.owner(16383), r.owner(16384), r.owner(65535)),
            (Some(3), Some(1), Some(1))
        );
        r.remove(1);
        assert_eq!((r.owner(0), r.owner(65535)), (Some(3), Some(3)));
        r.remove(3);
        assert_eq!(r.owner(0), None);
    }

    /// A model of the AUTO_SPLIT selector: each consumer's inclusive range, split and given
    /// back as its documentation says, kept as a list sorted by start.
    #[derive(Default)]
    struct Model(Vec<(u32, u32, u64)>);

    impl Model {
        fn add(&mut self, consumer: u64) {
            if self.0.is_empty() {
                self.0.push((0, RANGE - 1, consumer));
                return;
            }
            let mut widest = 0;
            for (i, r) in self.0.iter().enumerate() {
                if r.1 - r.0 > self.0[widest].1 - self.0[widest].0 {
                    widest = i;
                }
            }
            let (start, end, owner) = self.0[widest];
            let mid = start + (end - start) / 2;
            self.0[widest] = (mid + 1, end, owner);
            self.0.insert(widest, (start, mid, consumer));
        }

        fn remove(&mut self, consumer: u64) {
            let Some(i) = self.0.iter().position(|r| r.2 == consumer) else {
                return;
            };
            let (start, end, _) = self.0.remove(i);
            if let Some(above) = self.0.get_mut(i) {
                above.0 = start;
            } else if let Some(below) = self.0.last_mut() {
                below.1 = end;
            }
        }
    }

    /// Random joins and leaves (a seeded generator): after each, every hash has exactly the
    /// model's owner, the model's ranges cover `0..RANGE` without gap or overlap, and each
    /// consumer attached owns exactly one range.
    #[test]
    fn ranges_match_a_model_over_random_joins_and_leaves() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut r, mut m) = (Ranges::default(), Model::default());
        let mut attached: Vec<u64> = Vec::new();
        for consumer in 0..3000_u64 {
            if attached.len() < 2 || next() % 5 < 3 {
                r.add(consumer);
                m.add(consumer);
                attached.push(consumer);
            } else {
                let gone = attached.swap_remove(usize::try_from(next()).unwrap() % attached.len());
                r.remove(gone);
                m.remove(gone);
            }
            let mut from = 0;
            for &(start, end, owner) in &m.0 {
                assert_eq!(start, from, "a gap or overlap at {start} after {consumer}");
                assert!(end >= start);
                assert_eq!((r.owner(start), r.owner(end)), (Some(owner), Some(owner)));
                from = end + 1;
            }
            assert_eq!(from, RANGE);
            let ends: Vec<(u32, u64)> = r.ends.iter().map(|(e, c)| (*e, *c)).collect();
            let model: Vec<(u32, u64)> = m.0.iter().map(|&(_, e, c)| (e, c)).collect();
            assert_eq!(ends, model, "the ranges after {consumer}");
            let mut owners: Vec<u64> = m.0.iter().map(|r| r.2).collect();
            owners.sort_unstable();
            attached.sort_unstable();
            assert_eq!(owners, attached, "one range per consumer after {consumer}");
        }
    }

    #[test]
    fn entry_key_prefers_ordering_key_then_partition_key_then_first_of_batch() {
        let mut m = proto::MessageMetadata {
            partition_key: Some("p".into()),
            ordering_key: Some(b"o".to_vec()),
            ..Default::default()
        };
        assert_eq!(&*entry_key(&m, b""), b"o");
        m.ordering_key = None;
        assert_eq!(&*entry_key(&m, b""), b"p");
        m.partition_key = None;
        assert_eq!(&*entry_key(&m, b""), NONE_KEY);
        let single = proto::SingleMessageMetadata {
            partition_key: Some("first".into()),
            payload_size: 1,
            ..Default::default()
        }
        .encode_to_vec();
        let mut payload = u32::try_from(single.len()).unwrap().to_be_bytes().to_vec();
        payload.extend_from_slice(&single);
        payload.push(0);
        m.num_messages_in_batch = Some(2);
        assert_eq!(&*entry_key(&m, &payload), b"first");
        m.compression = Some(CompressionType::Lz4 as i32);
        assert_eq!(&*entry_key(&m, &payload), NONE_KEY);
        assert_eq!(&*entry_key(&m, &[0, 0, 0, 9, 1]), NONE_KEY);
    }

    #[test]
    fn key_hash_is_in_range() {
        assert!(key_hash(NONE_KEY) < RANGE);
        assert_eq!(key_hash(b"hello"), 0x248b_fa47 % RANGE);
    }
}
