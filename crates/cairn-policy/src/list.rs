//! A slab of nodes threaded into any number of doubly-linked lists by index.
//!
//! Every list-based policy (LRU, FIFO, SLRU, ARC, ...) keeps its entries here:
//! nodes are allocated once and recycled through a free list, links are `u32`
//! indices rather than pointers, so the steady state allocates nothing and
//! needs no `unsafe`. A [`List`] is only a head/tail/length triple; the node
//! storage is shared, which lets an entry move between lists (SLRU segments,
//! ARC's T1→T2) without being reallocated.
//!
//! Orientation: the *front* (head) is the most recently inserted or promoted
//! end, the *back* (tail) the oldest, which is where eviction looks.

/// Index of a node in a [`Slab`].
pub type Index = u32;

/// The "no node" index.
pub const NIL: Index = Index::MAX;

#[derive(Clone, Debug)]
struct Node<T> {
    prev: Index,
    next: Index,
    value: T,
}

/// One list threaded through a [`Slab`]: head, tail and length.
#[derive(Clone, Copy, Debug)]
pub struct List {
    head: Index,
    tail: Index,
    len: u32,
}

impl Default for List {
    fn default() -> Self {
        Self::new()
    }
}

impl List {
    /// An empty list.
    pub const fn new() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of nodes in the list.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The front (most recent) node.
    pub fn front(&self) -> Option<Index> {
        (self.head != NIL).then_some(self.head)
    }

    /// The back (oldest) node.
    pub fn back(&self) -> Option<Index> {
        (self.tail != NIL).then_some(self.tail)
    }
}

/// Node storage with a free list.
#[derive(Clone, Debug)]
pub struct Slab<T> {
    nodes: Vec<Node<T>>,
    free: Vec<Index>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    /// An empty slab.
    pub const fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
        }
    }

    /// An empty slab with room for `capacity` nodes before it reallocates.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            nodes: Vec::with_capacity(capacity),
            free: Vec::new(),
        }
    }

    /// Number of live nodes.
    pub fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Whether no node is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `value` in a node that belongs to no list yet.
    pub fn insert(&mut self, value: T) -> Index {
        let node = Node {
            prev: NIL,
            next: NIL,
            value,
        };
        if let Some(index) = self.free.pop() {
            self.nodes[index as usize] = node;
            index
        } else {
            let index = self.nodes.len();
            assert!(
                index < NIL as usize,
                "slab full: more than {} nodes",
                NIL - 1
            );
            self.nodes.push(node);
            index as Index
        }
    }

    /// Frees a node. It must already be unlinked from every list. The value
    /// stays in place until the slot is reused, so `T` should be plain data.
    pub fn remove(&mut self, index: Index) -> &T {
        debug_assert!(
            !self.free.contains(&index),
            "double free of slab node {index}"
        );
        self.free.push(index);
        &self.nodes[index as usize].value
    }

    /// The value in a node.
    #[inline]
    pub fn get(&self, index: Index) -> &T {
        &self.nodes[index as usize].value
    }

    /// Hints that node `index` will be read soon (see [`crate::prefetch`]).
    /// An index past the end is ignored.
    #[inline]
    pub fn prefetch(&self, index: Index) {
        if let Some(node) = self.nodes.get(index as usize) {
            crate::hint::prefetch(node);
        }
    }

    /// Hints that node `index`'s list neighbours will be written soon (an
    /// unlink or a move to the front).
    #[inline]
    pub fn prefetch_links(&self, index: Index) {
        if let Some(node) = self.nodes.get(index as usize) {
            self.prefetch(node.prev);
            self.prefetch(node.next);
        }
    }

    /// The value in a node, mutably.
    #[inline]
    pub fn get_mut(&mut self, index: Index) -> &mut T {
        &mut self.nodes[index as usize].value
    }

    /// The node after `index` (towards the back), if any.
    #[inline]
    pub fn next(&self, index: Index) -> Option<Index> {
        let next = self.nodes[index as usize].next;
        (next != NIL).then_some(next)
    }

    /// The node before `index` (towards the front), if any.
    #[inline]
    pub fn prev(&self, index: Index) -> Option<Index> {
        let prev = self.nodes[index as usize].prev;
        (prev != NIL).then_some(prev)
    }

    /// Links an unlinked node at the front of `list`.
    #[inline]
    pub fn push_front(&mut self, list: &mut List, index: Index) {
        let old_head = list.head;
        {
            let node = &mut self.nodes[index as usize];
            node.prev = NIL;
            node.next = old_head;
        }
        if old_head == NIL {
            list.tail = index;
        } else {
            self.nodes[old_head as usize].prev = index;
        }
        list.head = index;
        list.len += 1;
    }

    /// Links an unlinked node at the back of `list`.
    #[inline]
    pub fn push_back(&mut self, list: &mut List, index: Index) {
        let old_tail = list.tail;
        {
            let node = &mut self.nodes[index as usize];
            node.next = NIL;
            node.prev = old_tail;
        }
        if old_tail == NIL {
            list.head = index;
        } else {
            self.nodes[old_tail as usize].next = index;
        }
        list.tail = index;
        list.len += 1;
    }

    /// Links an unlinked node right after `at` (towards the back) in `list`.
    #[inline]
    pub fn insert_after(&mut self, list: &mut List, at: Index, index: Index) {
        let after = self.nodes[at as usize].next;
        {
            let node = &mut self.nodes[index as usize];
            node.prev = at;
            node.next = after;
        }
        self.nodes[at as usize].next = index;
        if after == NIL {
            list.tail = index;
        } else {
            self.nodes[after as usize].prev = index;
        }
        list.len += 1;
    }

    /// Unlinks a node from `list`, which must be the list it is in.
    #[inline]
    pub fn unlink(&mut self, list: &mut List, index: Index) {
        let (prev, next) = {
            let node = &self.nodes[index as usize];
            (node.prev, node.next)
        };
        if prev == NIL {
            debug_assert_eq!(list.head, index, "node {index} is not in this list");
            list.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            debug_assert_eq!(list.tail, index, "node {index} is not in this list");
            list.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        let node = &mut self.nodes[index as usize];
        node.prev = NIL;
        node.next = NIL;
        list.len -= 1;
    }

    /// Moves a node of `list` to its front.
    #[inline]
    pub fn move_to_front(&mut self, list: &mut List, index: Index) {
        if list.head != index {
            self.unlink(list, index);
            self.push_front(list, index);
        }
    }

    /// Unlinks and returns the back (oldest) node of `list`.
    #[inline]
    pub fn pop_back(&mut self, list: &mut List) -> Option<Index> {
        let tail = list.back()?;
        self.unlink(list, tail);
        Some(tail)
    }

    /// Unlinks and returns the front (newest) node of `list`.
    #[inline]
    pub fn pop_front(&mut self, list: &mut List) -> Option<Index> {
        let head = list.front()?;
        self.unlink(list, head);
        Some(head)
    }

    /// Iterates a list from front (newest) to back (oldest).
    pub fn iter<'a>(&'a self, list: &List) -> impl Iterator<Item = (Index, &'a T)> + 'a {
        let mut at = list.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let node = &self.nodes[at as usize];
            let item = (at, &node.value);
            at = node.next;
            Some(item)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(slab: &Slab<u64>, list: &List) -> Vec<u64> {
        slab.iter(list).map(|(_, v)| *v).collect()
    }

    #[test]
    fn lists_share_one_slab_and_recycle_nodes() {
        let mut slab = Slab::new();
        let (mut a, mut b) = (List::new(), List::new());
        let n: Vec<Index> = (0..4).map(|v| slab.insert(v)).collect();
        slab.push_front(&mut a, n[0]);
        slab.push_front(&mut a, n[1]);
        slab.push_back(&mut a, n[2]);
        slab.push_front(&mut b, n[3]);
        assert_eq!(collect(&slab, &a), [1, 0, 2]);
        slab.move_to_front(&mut a, n[2]);
        assert_eq!(collect(&slab, &a), [2, 1, 0]);
        let moved = slab.pop_back(&mut a).unwrap();
        slab.push_front(&mut b, moved);
        assert_eq!(collect(&slab, &b), [0, 3]);
        assert_eq!((a.len(), b.len()), (2, 2));
        slab.unlink(&mut b, n[3]);
        slab.remove(n[3]);
        assert_eq!(slab.insert(9), n[3], "a freed node is reused");
        slab.insert_after(&mut a, n[2], n[3]);
        assert_eq!(collect(&slab, &a), [2, 9, 1]);
        assert_eq!(slab.len(), 4);
    }
}
