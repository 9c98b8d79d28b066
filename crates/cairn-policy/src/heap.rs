//! An indexed 4-ary min-heap: a priority queue whose entries can be found,
//! re-prioritised and removed through stable handles.
//!
//! Priority-ordered policies (GDSF, OPT, LFU-like ones) keep one entry per
//! resident key and store its [`Handle`] in their key map. Entries live in a
//! slot vector recycled through a free list, and the heap order is a vector
//! of handles, so the steady state allocates nothing (unlike a `BTreeMap`,
//! which allocates nodes as it goes). A 4-ary layout halves the depth of a
//! binary heap and keeps a node's children on one cache line.
//!
//! The smallest priority is at the top; wrap it in [`std::cmp::Reverse`] for
//! a max-heap. Ties are broken by whatever the priority type compares, so
//! give it a tie-breaker (a sequence number) when the order of equals
//! matters.

/// A stable reference to one heap entry, valid until the entry is popped or
/// removed (then the slot may be reused by a later push).
pub type Handle = u32;

const ARITY: usize = 4;
const FREE: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Slot<P, T> {
    priority: P,
    value: T,
    /// Where the handle sits in `order`, or [`FREE`].
    position: u32,
}

/// An indexed 4-ary min-heap of `(priority, value)` entries.
#[derive(Clone, Debug)]
pub struct IndexedHeap<P, T> {
    order: Vec<Handle>,
    slots: Vec<Slot<P, T>>,
    free: Vec<Handle>,
}

impl<P, T> Default for IndexedHeap<P, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P, T> IndexedHeap<P, T> {
    /// An empty heap.
    pub const fn new() -> Self {
        Self {
            order: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the heap is empty.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Makes room for `total` entries in all, so that pushes and removals
    /// allocate nothing while at most that many are held.
    pub fn reserve_total(&mut self, total: usize) {
        self.order.reserve(total.saturating_sub(self.order.len()));
        self.slots.reserve(total.saturating_sub(self.slots.len()));
        self.free.reserve(total.saturating_sub(self.free.len()));
    }
}

impl<P: Ord + Copy, T: Copy> IndexedHeap<P, T> {
    /// Adds an entry; returns its handle.
    pub fn push(&mut self, priority: P, value: T) -> Handle {
        let position = self.order.len() as u32;
        let slot = Slot {
            priority,
            value,
            position,
        };
        let handle = if let Some(handle) = self.free.pop() {
            self.slots[handle as usize] = slot;
            handle
        } else {
            assert!(self.slots.len() < FREE as usize, "heap full");
            self.slots.push(slot);
            (self.slots.len() - 1) as Handle
        };
        self.order.push(handle);
        self.sift_up(position as usize);
        handle
    }

    /// The entry with the smallest priority.
    pub fn peek(&self) -> Option<(Handle, P, T)> {
        let &handle = self.order.first()?;
        let slot = &self.slots[handle as usize];
        Some((handle, slot.priority, slot.value))
    }

    /// Removes and returns the entry with the smallest priority.
    pub fn pop(&mut self) -> Option<(P, T)> {
        let &handle = self.order.first()?;
        Some(self.remove(handle))
    }

    /// Removes an entry by handle.
    pub fn remove(&mut self, handle: Handle) -> (P, T) {
        let position = self.position(handle);
        let last = self.order.len() - 1;
        self.swap(position, last);
        self.order.pop();
        let slot = &mut self.slots[handle as usize];
        slot.position = FREE;
        let removed = (slot.priority, slot.value);
        self.free.push(handle);
        if position < last {
            self.restore(position);
        }
        removed
    }

    /// Changes an entry's priority.
    pub fn set_priority(&mut self, handle: Handle, priority: P) {
        let position = self.position(handle);
        self.slots[handle as usize].priority = priority;
        self.restore(position);
    }

    /// An entry's priority.
    pub fn priority(&self, handle: Handle) -> P {
        debug_assert_ne!(self.slots[handle as usize].position, FREE, "stale handle");
        self.slots[handle as usize].priority
    }

    /// An entry's value.
    pub fn value(&self, handle: Handle) -> T {
        debug_assert_ne!(self.slots[handle as usize].position, FREE, "stale handle");
        self.slots[handle as usize].value
    }

    /// An entry's value, mutably (the value does not affect the order).
    pub fn value_mut(&mut self, handle: Handle) -> &mut T {
        debug_assert_ne!(self.slots[handle as usize].position, FREE, "stale handle");
        &mut self.slots[handle as usize].value
    }

    /// Iterates the entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, P, T)> + '_ {
        self.order.iter().map(|&h| {
            let slot = &self.slots[h as usize];
            (h, slot.priority, slot.value)
        })
    }

    fn position(&self, handle: Handle) -> usize {
        let position = self.slots[handle as usize].position;
        assert_ne!(position, FREE, "stale heap handle {handle}");
        position as usize
    }

    fn key(&self, position: usize) -> P {
        self.slots[self.order[position] as usize].priority
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.order.swap(a, b);
        self.slots[self.order[a] as usize].position = a as u32;
        self.slots[self.order[b] as usize].position = b as u32;
    }

    /// Moves the entry at `position` up or down to where it belongs.
    fn restore(&mut self, position: usize) {
        if position > 0 && self.key(position) < self.key((position - 1) / ARITY) {
            self.sift_up(position);
        } else {
            self.sift_down(position);
        }
    }

    fn sift_up(&mut self, mut position: usize) {
        while position > 0 {
            let parent = (position - 1) / ARITY;
            if self.key(position) >= self.key(parent) {
                break;
            }
            self.swap(position, parent);
            position = parent;
        }
    }

    fn sift_down(&mut self, mut position: usize) {
        let len = self.order.len();
        loop {
            let first = position * ARITY + 1;
            if first >= len {
                break;
            }
            let mut smallest = first;
            for child in first + 1..(first + ARITY).min(len) {
                if self.key(child) < self.key(smallest) {
                    smallest = child;
                }
            }
            if self.key(smallest) >= self.key(position) {
                break;
            }
            self.swap(position, smallest);
            position = smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pops_in_priority_order_and_updates_in_place() {
        let mut heap = IndexedHeap::new();
        let handles: Vec<Handle> = [5, 3, 8, 1, 9, 2]
            .iter()
            .map(|&p| heap.push(p, p * 10))
            .collect();
        assert_eq!(heap.peek().map(|(_, p, v)| (p, v)), Some((1, 10)));
        heap.set_priority(handles[2], 0); // 8 -> 0
        heap.remove(handles[1]); // drop 3
        let popped: Vec<(i32, i32)> = std::iter::from_fn(|| heap.pop()).collect();
        assert_eq!(popped, [(0, 80), (1, 10), (2, 20), (5, 50), (9, 90)]);
        let reused = heap.push(4, 40);
        assert!(handles.contains(&reused), "a freed slot is reused");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Pop,
        Remove(usize),
        Update(usize, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u8>().prop_map(Op::Push),
            Just(Op::Pop),
            any::<usize>().prop_map(Op::Remove),
            (any::<usize>(), any::<u8>()).prop_map(|(i, p)| Op::Update(i, p)),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_sorted_vector(ops in prop::collection::vec(op(), 1..300)) {
            let mut heap = IndexedHeap::new();
            // (priority, value, handle); values are unique so ties are stable.
            let mut model: Vec<((u8, u32), Handle)> = vec![];
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Push(p) => {
                        let key = (p, step as u32);
                        model.push((key, heap.push(key, step)));
                    }
                    Op::Pop => {
                        model.sort_unstable();
                        let expected = (!model.is_empty()).then(|| model.remove(0).0);
                        prop_assert_eq!(heap.pop().map(|(p, _)| p), expected);
                    }
                    Op::Remove(i) if !model.is_empty() => {
                        let (key, handle) = model.remove(i % model.len());
                        prop_assert_eq!(heap.remove(handle).0, key);
                    }
                    Op::Update(i, p) if !model.is_empty() => {
                        let at = i % model.len();
                        model[at].0.0 = p;
                        heap.set_priority(model[at].1, model[at].0);
                    }
                    _ => {}
                }
                prop_assert_eq!(heap.len(), model.len());
                let min = model.iter().map(|m| m.0).min();
                prop_assert_eq!(heap.peek().map(|(_, p, _)| p), min);
            }
        }
    }
}
