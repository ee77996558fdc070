//! [`Residents`]: the resident partitions of a [`RangeSetWrapper`](super::RangeSetWrapper), in a
//! slab of slots threaded by recency lists, found by key through a small hash table.
//!
//! Owns: where each resident partition lives (a slot), which one is *hot* (the one in use, in
//! no list), and the order of the others by last use in three lists: [`List::Saved`],
//! [`List::Unsaved`] and [`List::Pinned`]. Finding a resident partition, making it hot, moving
//! one to another list and taking the least recently used of a list are O(1) and allocate
//! nothing: a partition stays in its slot while it is resident, and only the links change. The
//! slab and its table allocate only when a partition needs a slot and none is free (the
//! slab's capacity doubles from one, the table is rebuilt at twice that, and a slab of a few
//! slots has none), and give their memory back when [`Residents::shrink`] finds the slab empty
//! but for the hot partition.
//!
//! Memory: a slot that holds a partition is part of that partition's charge
//! ([`PARTITION_OVERHEAD_BYTES`]); the slab's spare slots (free, or never used, up to its
//! capacity) and the table are charged apart ([`Residents::overhead_bytes`]).
//!
//! Must never: decide what to evict or when (the wrapper does), or touch the store.

use roaring::RoaringBitmap;

use super::{Charge, PARTITION_OVERHEAD_BYTES, PartitionKey};

/// No slot: the end of a list or of the free chain, or an empty place in the table.
const NIL: u32 = u32::MAX;

/// Bytes of one slot of the slab.
pub const SLOT_BYTES: usize = size_of::<Resident>();

/// Bytes of one place of the table.
pub const TABLE_PLACE_BYTES: usize = size_of::<u32>();

/// A slab of at most this many slots has no table: a lookup compares every slot's key.
const UNINDEXED_SLOTS: usize = 4;

/// Bytes of the vector of containers a one-container bitmap may have grown (4 slots of 40
/// bytes): the rest of [`PARTITION_OVERHEAD_BYTES`].
const CONTAINER_VEC_BYTES: usize = 160;

// A partition's charge covers its slot.
const _: () = assert!(CONTAINER_VEC_BYTES + SLOT_BYTES <= PARTITION_OVERHEAD_BYTES);

/// The recency lists a resident partition other than the hot one is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// The store holds the partition's contents: evicting it drops it.
    Saved = 0,
    /// The store does not hold them: evicting it stores it first.
    Unsaved = 1,
    /// Unsaved, and the store could not take it: kept past the budget.
    Pinned = 2,
}

/// Where a slot is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Place {
    Listed(List),
    Hot,
    #[default]
    Free,
}

/// A resident partition's bitmap and flags, in its slot of the slab.
#[derive(Debug)]
pub struct Resident {
    pub(super) bitmap: RoaringBitmap,
    /// What the partition is charged against the budget.
    pub charge: Charge,
    /// The bitmap's cardinality (at most `PARTITION_SPAN`), kept beside it: counting a run
    /// container's values walks its runs.
    pub(super) len: u32,
    /// The store does not hold the current contents.
    pub(super) unsaved: bool,
    /// Changed since the last `mark_clean`.
    pub(super) dirty: bool,
    pub key: PartitionKey,
    /// In a list, the next less recently used slot; in the free chain, the next free slot.
    older: u32,
    /// In a list, the next more recently used slot.
    newer: u32,
    place: Place,
}

impl Resident {
    /// `bitmap` of partition `key`, charged `charge`, about to become resident.
    #[must_use]
    pub fn new(
        key: PartitionKey,
        bitmap: RoaringBitmap,
        charge: Charge,
        unsaved: bool,
        dirty: bool,
    ) -> Self {
        Self {
            len: u32::try_from(bitmap.len()).expect("a partition holds at most 2^16 values"),
            bitmap,
            charge,
            unsaved,
            dirty,
            key,
            older: NIL,
            newer: NIL,
            place: Place::Free,
        }
    }

    fn vacant(next_free: u32) -> Self {
        let mut vacant = Self::new(
            PartitionKey {
                ledger_id: 0,
                chunk: 0,
            },
            RoaringBitmap::new(),
            Charge::default(),
            false,
            false,
        );
        vacant.older = next_free;
        vacant
    }
}

/// The two ends of a list.
#[derive(Clone, Copy, Debug)]
struct Ends {
    newest: u32,
    oldest: u32,
    len: usize,
    /// Bytes charged for the partitions in the list.
    bytes: usize,
}

impl Ends {
    const EMPTY: Self = Self {
        newest: NIL,
        oldest: NIL,
        len: 0,
        bytes: 0,
    };
}

/// Resident partitions in a slab of slots (see the module docs).
#[derive(Debug)]
pub struct Residents {
    pub slots: Vec<Resident>,
    /// Open addressing with linear probing over the occupied slots, by key; at least twice as
    /// many places as the slab has slots (a power of two), so probes stay short.
    pub table: Vec<u32>,
    /// The first free slot, chained through `older`.
    free: u32,
    occupied: usize,
    lists: [Ends; 3],
    hot: u32,
}

fn at(slot: u32) -> usize {
    slot as usize
}

impl Residents {
    #[must_use]
    #[allow(clippy::new_without_default, reason = "built by its owner only")]
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            table: Vec::new(),
            free: NIL,
            occupied: 0,
            lists: [Ends::EMPTY; 3],
            hot: NIL,
        }
    }

    /// Resident partitions, the hot one included.
    #[must_use]
    #[allow(
        clippy::len_without_is_empty,
        reason = "a count the tests read; emptiness is never asked"
    )]
    pub fn len(&self) -> usize {
        self.occupied
    }

    /// Partitions in `list`.
    #[must_use]
    pub fn list_len(&self, list: List) -> usize {
        self.lists[list as usize].len
    }

    /// Bytes charged for the partitions in `list`.
    #[must_use]
    pub fn list_bytes(&self, list: List) -> usize {
        self.lists[list as usize].bytes
    }

    /// Bytes of the slab's slots that hold no partition and of the table.
    #[must_use]
    pub fn overhead_bytes(&self) -> usize {
        (self.slots.capacity() - self.occupied) * SLOT_BYTES
            + self.table.capacity() * TABLE_PLACE_BYTES
    }

    /// The hot partition's slot, if `key` is the hot partition.
    #[must_use]
    pub fn hot_slot(&self, key: PartitionKey) -> Option<u32> {
        self.slots
            .get(at(self.hot))
            .is_some_and(|s| s.key == key)
            .then_some(self.hot)
    }

    /// The hot partition, if any.
    pub(super) fn hot(&self) -> Option<&Resident> {
        self.slots.get(at(self.hot))
    }

    /// The slot of `key`'s partition, if it is resident.
    #[must_use]
    pub fn find(&self, key: PartitionKey) -> Option<u32> {
        if self.table.is_empty() {
            let found = self
                .slots
                .iter()
                .position(|s| s.key == key && s.place != Place::Free)?;
            return Some(u32::try_from(found).expect("slots are numbered by u32"));
        }
        let mask = self.table.len() - 1;
        let mut place = self.home(key);
        loop {
            let slot = self.table[place];
            if slot == NIL {
                return None;
            }
            if self.slots[at(slot)].key == key {
                return Some(slot);
            }
            place = (place + 1) & mask;
        }
    }

    /// The partition in `slot` (which holds one).
    pub(super) fn get(&self, slot: u32) -> &Resident {
        &self.slots[at(slot)]
    }

    /// The partition in `slot` (which holds one).
    pub(super) fn get_mut(&mut self, slot: u32) -> &mut Resident {
        &mut self.slots[at(slot)]
    }

    /// The key of the partition in `slot` (which holds one).
    #[must_use]
    pub fn key(&self, slot: u32) -> PartitionKey {
        self.slots[at(slot)].key
    }

    /// The list `slot` is in (`None` for the hot partition).
    #[must_use]
    pub fn list_of(&self, slot: u32) -> Option<List> {
        match self.slots[at(slot)].place {
            Place::Listed(list) => Some(list),
            Place::Hot | Place::Free => None,
        }
    }

    /// The least recently used partition of `list`.
    #[must_use]
    pub fn oldest(&self, list: List) -> Option<u32> {
        let oldest = self.lists[list as usize].oldest;
        (oldest != NIL).then_some(oldest)
    }

    /// The slots of `list`, most recently used first.
    #[must_use]
    pub fn slots_of(&self, list: List) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.list_len(list));
        let mut next = self.lists[list as usize].newest;
        while next != NIL {
            out.push(next);
            next = self.slots[at(next)].older;
        }
        out
    }

    /// Makes sure a slot is free for the next [`Self::insert_hot`]: when none is, the slab's
    /// capacity doubles and the table is rebuilt, so the bytes this adds to
    /// [`Self::overhead_bytes`] show before the partition comes in. An empty slab is left
    /// as it is: its first slot, taken by [`Self::insert_hot`], is the partition's own.
    pub(super) fn reserve_one(&mut self) {
        if self.free != NIL
            || self.slots.len() < self.slots.capacity()
            || self.slots.capacity() == 0
        {
            return;
        }
        self.slots.reserve_exact(self.slots.capacity().max(1));
        self.rebuild_table();
    }

    /// Puts a partition in a free slot as the hot one (there is none: [`Self::retire_hot`]
    /// first); returns its slot. Allocates only when no slot is free (see
    /// [`Self::reserve_one`]).
    pub fn insert_hot(&mut self, mut resident: Resident) -> u32 {
        debug_assert_eq!(self.hot, NIL, "the hot partition was retired first");
        self.reserve_one();
        if self.slots.capacity() == 0 {
            self.slots.reserve_exact(1);
        }
        resident.place = Place::Hot;
        resident.older = NIL;
        resident.newer = NIL;
        let slot = if self.free == NIL {
            let slot = u32::try_from(self.slots.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("fewer than 2^32 - 1 resident partitions");
            self.slots.push(resident);
            slot
        } else {
            let slot = self.free;
            self.free = self.slots[at(slot)].older;
            self.slots[at(slot)] = resident;
            slot
        };
        self.occupied += 1;
        self.hot = slot;
        self.table_insert(slot);
        slot
    }

    /// Makes the partition in `slot` (resident, in a list) the hot one; the hot partition, if
    /// any, joins its list first, as by [`Self::retire_hot`].
    ///
    /// Each list's length and bytes are written once. Apart, the retirement's writes of a
    /// list's ends and the unlink's read of both back at once (one 16-byte load, as compiled)
    /// made the processor wait for the writes to land: on every switch of the hot partition,
    /// which an ack in a random order makes nearly every time, half of this call's time.
    pub fn make_hot(&mut self, slot: u32) {
        let Place::Listed(from) = self.slots[at(slot)].place else {
            unreachable!("only a listed slot is made hot");
        };
        self.detach(slot, from);
        let taken = self.slots[at(slot)].charge.bytes;
        self.slots[at(slot)].place = Place::Hot;
        let retired = std::mem::replace(&mut self.hot, slot);
        // Detached first, then the retired one attached: the chain is the one the other order
        // makes (the list without `slot`, the retired partition its newest).
        let joined = (retired != NIL).then(|| {
            let list = self.list_by_flag(retired);
            (list, self.attach(retired, list, true))
        });
        match joined {
            Some((list, bytes)) if list == from => {
                let ends = &mut self.lists[from as usize];
                ends.bytes = ends.bytes - taken + bytes;
            }
            _ => {
                let ends = &mut self.lists[from as usize];
                ends.len -= 1;
                ends.bytes -= taken;
                if let Some((list, bytes)) = joined {
                    let ends = &mut self.lists[list as usize];
                    ends.len += 1;
                    ends.bytes += bytes;
                }
            }
        }
    }

    /// The list the partition in `slot` joins when it stops being hot: by its flag.
    fn list_by_flag(&self, slot: u32) -> List {
        if self.slots[at(slot)].unsaved {
            List::Unsaved
        } else {
            List::Saved
        }
    }

    /// Puts the hot partition, if any, in its list ([`List::Unsaved`] or [`List::Saved`] by
    /// its flag) as the most recently used entry.
    pub fn retire_hot(&mut self) {
        let hot = std::mem::replace(&mut self.hot, NIL);
        if hot != NIL {
            self.link(hot, self.list_by_flag(hot), true);
        }
    }

    /// Charges the partition in `slot` (which holds one) `charge` instead of what it was
    /// charged, keeping the bytes of the list it is in, if any, equal to its partitions'
    /// charges; returns the old charge.
    pub fn recharge(&mut self, slot: u32, charge: Charge) -> Charge {
        let resident = &mut self.slots[at(slot)];
        let old = std::mem::replace(&mut resident.charge, charge);
        if let Place::Listed(list) = resident.place {
            let ends = &mut self.lists[list as usize];
            ends.bytes = ends.bytes - old.bytes + charge.bytes;
        }
        old
    }

    /// Moves the partition in `slot` (not the hot one) to its list by its flag
    /// ([`List::Unsaved`] or [`List::Saved`]) as the most recently used entry, as if it had
    /// been made hot and then retired.
    #[inline]
    pub fn relist_by_flag(&mut self, slot: u32) {
        let list = self.list_by_flag(slot);
        if self.slots[at(slot)].place != Place::Listed(list) {
            self.relist(slot, list, true);
        } else if self.lists[list as usize].newest != slot {
            // Within its list: the links change, not the list's length or bytes.
            self.detach(slot, list);
            self.attach(slot, list, true);
        }
    }

    /// Moves the partition in `slot` (not the hot one) to `list`, as its most recently used
    /// entry if `newest`, else as its least recently used one.
    pub fn relist(&mut self, slot: u32, list: List, newest: bool) {
        self.unlink(slot);
        self.link(slot, list, newest);
    }

    /// Takes the partition out of `slot` (hot or listed); the slot becomes free.
    pub fn remove(&mut self, slot: u32) -> Resident {
        if self.hot == slot {
            self.hot = NIL;
        } else {
            self.unlink(slot);
        }
        self.table_remove(slot);
        self.occupied -= 1;
        let vacant = Resident::vacant(self.free);
        self.free = slot;
        std::mem::replace(&mut self.slots[at(slot)], vacant)
    }

    /// Gives the slab's spare slots and the table's spare places back when the slab holds no
    /// partition but the hot one (which moves to the first slot).
    pub fn shrink(&mut self) {
        if self.occupied > usize::from(self.hot != NIL) || self.slots.capacity() == self.occupied {
            return;
        }
        if self.hot == NIL {
            *self = Self::new();
            return;
        }
        let hot = std::mem::replace(&mut self.hot, 0);
        self.slots.swap(0, at(hot));
        self.slots.truncate(1);
        self.slots.shrink_to_fit();
        self.free = NIL;
        self.table = Vec::new();
        self.rebuild_table();
    }

    /// The place of the table where a probe for `key` starts.
    fn home(&self, key: PartitionKey) -> usize {
        let mixed = (key.ledger_id.rotate_left(29) ^ key.chunk).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The table's length is a power of two: its top bits.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the top log2(table length) bits of a u64 fit a usize"
        )]
        let top = (mixed >> (64 - self.table.len().trailing_zeros())) as usize;
        top
    }

    /// Puts `slot` in the table, if there is one (it is not in it, and the table has a free
    /// place).
    fn table_insert(&mut self, slot: u32) {
        if self.table.is_empty() {
            return;
        }
        let mask = self.table.len() - 1;
        let mut place = self.home(self.slots[at(slot)].key);
        while self.table[place] != NIL {
            place = (place + 1) & mask;
        }
        self.table[place] = slot;
    }

    /// Takes `slot` out of the table, moving back the entries that probed past it.
    fn table_remove(&mut self, slot: u32) {
        if self.table.is_empty() {
            return;
        }
        let mask = self.table.len() - 1;
        let mut hole = self.home(self.slots[at(slot)].key);
        while self.table[hole] != slot {
            hole = (hole + 1) & mask;
        }
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let moved = self.table[next];
            if moved == NIL {
                break;
            }
            // `moved` may fill the hole unless its home lies cyclically in (hole, next].
            let start = self.home(self.slots[at(moved)].key);
            if (next.wrapping_sub(start) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.table[hole] = moved;
                hole = next;
            }
        }
        self.table[hole] = NIL;
    }

    /// Sizes the table at twice the slab's capacity (a power of two; none for a slab of at
    /// most [`UNINDEXED_SLOTS`]) and puts every occupied slot in it.
    fn rebuild_table(&mut self) {
        if self.slots.capacity() <= UNINDEXED_SLOTS {
            self.table = Vec::new();
            return;
        }
        let places = (2 * self.slots.capacity()).next_power_of_two();
        self.table = vec![NIL; places];
        for slot in 0..self.slots.len() {
            if self.slots[slot].place != Place::Free {
                self.table_insert(u32::try_from(slot).expect("slots are numbered by u32"));
            }
        }
    }

    /// Takes `slot` out of its list (it is in one).
    fn unlink(&mut self, slot: u32) {
        let Place::Listed(list) = self.slots[at(slot)].place else {
            unreachable!("only a listed slot is unlinked");
        };
        self.detach(slot, list);
        let ends = &mut self.lists[list as usize];
        ends.len -= 1;
        ends.bytes -= self.slots[at(slot)].charge.bytes;
    }

    /// Takes `slot` out of the chain of `list` (it is in it), leaving the list's length and
    /// bytes as they were.
    fn detach(&mut self, slot: u32, list: List) {
        let Resident { older, newer, .. } = self.slots[at(slot)];
        match self.slots.get_mut(at(older)) {
            Some(s) => s.newer = newer,
            None => self.lists[list as usize].oldest = newer,
        }
        match self.slots.get_mut(at(newer)) {
            Some(s) => s.older = older,
            None => self.lists[list as usize].newest = older,
        }
    }

    /// Puts `slot` (in no list) at one end of `list`.
    fn link(&mut self, slot: u32, list: List, newest: bool) {
        let bytes = self.attach(slot, list, newest);
        let ends = &mut self.lists[list as usize];
        ends.len += 1;
        ends.bytes += bytes;
    }

    /// Puts `slot` in the chain of `list` at one end, leaving the list's length and bytes as
    /// they were; returns the bytes charged for the partition in `slot`.
    fn attach(&mut self, slot: u32, list: List, newest: bool) -> usize {
        let ends = self.lists[list as usize];
        let (older, newer) = if newest {
            (ends.newest, NIL)
        } else {
            (NIL, ends.oldest)
        };
        let s = &mut self.slots[at(slot)];
        s.place = Place::Listed(list);
        s.older = older;
        s.newer = newer;
        let bytes = s.charge.bytes;
        if let Some(o) = self.slots.get_mut(at(older)) {
            o.newer = slot;
        }
        if let Some(n) = self.slots.get_mut(at(newer)) {
            n.older = slot;
        }
        let ends = &mut self.lists[list as usize];
        if newest {
            ends.newest = slot;
            if ends.oldest == NIL {
                ends.oldest = slot;
            }
        } else {
            ends.oldest = slot;
            if ends.newest == NIL {
                ends.newest = slot;
            }
        }
        bytes
    }
}
