//! Gradient-boosted regression trees, `LightGBM`'s way, for learned policies
//! ([`lrb`](crate::lrb)).
//!
//! What `LightGBM` does with `objective=regression` (squared loss) and the
//! parameters LRB passes it, re-implemented so that a policy can predict
//! without allocating and train on buffers it keeps:
//! - each feature is cut into at most `max_bin` (255) bins: one per distinct
//!   value when there are few enough (thresholds half-way between
//!   neighbours), otherwise greedy equal-count bins over the sorted values;
//!   a feature with one bin is never split;
//! - the first score is the mean label (`boost_from_average`); each
//!   iteration fits one tree to the gradients `score − label`;
//! - trees grow leaf-wise (best-first): the leaf whose best split gains most
//!   is split, until `leaves` leaves or no split gains; a split needs
//!   `min_data_in_leaf` (20) rows on each side; the gain of a split is
//!   `G_L²/n_L + G_R²/n_R − G²/n` (hessians are 1), found on per-leaf
//!   histograms, the larger child's as its parent's minus the smaller's;
//! - a leaf's output is `−learning_rate · G/n`;
//! - optionally as `XGBoost` (for [`glcache`](crate::glcache)): an L2 term
//!   λ (`lambda_l2`) makes gains `G²/(n + λ)` and outputs
//!   `−learning_rate · G/(n + λ)`, `max_depth` stops a leaf that deep from
//!   splitting (with `2^max_depth` leaves allowed, best-first growth gives
//!   the same tree as `XGBoost`'s level-by-level), and a split must gain more
//!   than `min_gain_to_split` (`XGBoost`'s 1e-6);
//! - each tree sees a random `feature_fraction` of the features, and every
//!   `bagging_freq` iterations a fresh random `bagging_fraction` of the rows.
//!
//! Not `LightGBM`'s code: its random numbers, its bin boundaries on many
//! distinct values, and its tie-breaking differ, so a model trained on the
//! same rows predicts close to, not exactly, what `LightGBM`'s would.
//! Features are `f32` (LRB's are integers below 2^24 on traces shorter than
//! 16 M requests, and decays).

/// How a [`Trainer`] fits trees (`LightGBM`'s parameter names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Boosting iterations, one tree each (`num_iterations`).
    pub trees: u32,
    /// Leaves per tree, at least 2 (`num_leaves`).
    pub leaves: u32,
    /// Shrinkage of each tree's outputs (`learning_rate`).
    pub learning_rate: f64,
    /// Share of the features each tree may split on (`feature_fraction`).
    pub feature_fraction: f64,
    /// Share of the rows each tree is fitted on (`bagging_fraction`).
    pub bagging_fraction: f64,
    /// Iterations between re-drawing the bag; 0 fits every tree on all rows
    /// (`bagging_freq`).
    pub bagging_freq: u32,
    /// Rows a leaf needs at least (`min_data_in_leaf`).
    pub min_data_in_leaf: u32,
    /// Bins per feature, 2..=256 (`max_bin`).
    pub max_bin: u32,
    /// The sampling generator's seed.
    pub seed: u64,
    /// L2 regularisation of leaf outputs (`lambda_l2`; `XGBoost`'s
    /// `lambda`): a gain's and an output's row counts get this added.
    pub lambda_l2: f64,
    /// The deepest a leaf may be, the root at depth 0; 0 for no limit
    /// (`max_depth`).
    pub max_depth: u32,
    /// The least gain a split needs (`min_gain_to_split`).
    pub min_gain_to_split: f64,
}

impl Default for Params {
    /// LRB's parameters and `LightGBM`'s defaults for the rest.
    fn default() -> Self {
        Self {
            trees: 32,
            leaves: 32,
            learning_rate: 0.1,
            feature_fraction: 0.8,
            bagging_fraction: 0.8,
            bagging_freq: 5,
            min_data_in_leaf: 20,
            max_bin: 255,
            seed: 0,
            lambda_l2: 0.0,
            max_depth: 0,
            min_gain_to_split: 0.0,
        }
    }
}

/// A child link with this bit set names a leaf value, not a node.
const LEAF: u32 = 1 << 31;

/// An internal node: rows with `feature ≤ threshold` go left.
#[derive(Clone, Copy, Debug)]
struct Node {
    feature: u32,
    threshold: f32,
    /// The threshold's bin, for routing binned training rows.
    bin: u8,
    left: u32,
    right: u32,
}

/// A node of the prediction layout: a leaf routes every row to itself
/// (threshold +∞, both children itself), so a batch walks each tree a fixed
/// number of steps with no data-dependent branch.
#[derive(Clone, Copy, Debug)]
struct Step {
    feature: u32,
    threshold: f32,
    left: u32,
    right: u32,
    value: f64,
}

/// A trained ensemble; empty (untrained) until a [`Trainer`] fits it.
#[derive(Clone, Debug, Default)]
pub struct Model {
    base: f64,
    /// Each tree's root: a node index, or `LEAF | value index`.
    roots: Vec<u32>,
    nodes: Vec<Node>,
    values: Vec<f64>,
    /// The same trees for [`Model::predict_many`]: steps, and each tree's
    /// root step and depth.
    steps: Vec<Step>,
    step_roots: Vec<(u32, u32)>,
}

impl Model {
    /// Whether a model has been fitted.
    pub fn is_trained(&self) -> bool {
        !self.roots.is_empty()
    }

    /// The number of trees.
    pub fn trees(&self) -> usize {
        self.roots.len()
    }

    /// The prediction for one row of features (the trainer's feature
    /// order). Allocates nothing.
    pub fn predict(&self, row: &[f32]) -> f64 {
        let mut sum = self.base;
        for &root in &self.roots {
            let mut link = root;
            while link & LEAF == 0 {
                let node = &self.nodes[link as usize];
                link = if row[node.feature as usize] <= node.threshold {
                    node.left
                } else {
                    node.right
                };
            }
            sum += self.values[(link & !LEAF) as usize];
        }
        sum
    }

    /// The base score (the first prediction, before any tree).
    pub fn base(&self) -> f64 {
        self.base
    }

    /// What tree `tree` adds to the prediction for `row`.
    pub fn tree_value(&self, tree: usize, row: &[f32]) -> f64 {
        let mut link = self.roots[tree];
        while link & LEAF == 0 {
            let node = &self.nodes[link as usize];
            link = if row[node.feature as usize] <= node.threshold {
                node.left
            } else {
                node.right
            };
        }
        self.values[(link & !LEAF) as usize]
    }

    /// Keeps the first `trees` trees (early stopping), dropping the rest.
    pub fn truncate(&mut self, trees: usize) {
        if trees < self.roots.len() {
            self.roots.truncate(trees);
            self.lay_out();
        }
    }

    /// Predictions for `out.len()` rows of `stride` features each, laid
    /// end to end in `rows`. Walks each tree for all rows in lockstep (the
    /// rows' walks are independent, so the processor overlaps them).
    /// Allocates nothing; equals [`Model::predict`] row by row.
    pub fn predict_many(&self, rows: &[f32], stride: usize, out: &mut [f64]) {
        const LANES: usize = 64;
        debug_assert!(rows.len() >= out.len() * stride);
        out.fill(self.base);
        for (chunk, scores) in out.chunks_mut(LANES).enumerate() {
            let rows = &rows[chunk * LANES * stride..];
            let mut at = [0u32; LANES];
            for &(root, depth) in &self.step_roots {
                let at = &mut at[..scores.len()];
                at.fill(root);
                for _ in 0..depth {
                    for (i, link) in at.iter_mut().enumerate() {
                        let step = &self.steps[*link as usize];
                        let value = rows[i * stride + step.feature as usize];
                        *link = if value <= step.threshold {
                            step.left
                        } else {
                            step.right
                        };
                    }
                }
                for (score, &link) in scores.iter_mut().zip(at.iter()) {
                    *score += self.steps[link as usize].value;
                }
            }
        }
    }

    /// Builds the prediction layout from the trees.
    fn lay_out(&mut self) {
        self.steps.clear();
        self.step_roots.clear();
        for t in 0..self.roots.len() {
            let root = self.steps.len() as u32;
            let depth = self.lay_out_link(self.roots[t]);
            self.step_roots.push((root, depth));
        }
    }

    /// Lays out the subtree at `link` from the next free step; returns its
    /// depth (0 for a leaf).
    fn lay_out_link(&mut self, link: u32) -> u32 {
        let at = self.steps.len() as u32;
        if link & LEAF != 0 {
            self.steps.push(Step {
                feature: 0,
                threshold: f32::INFINITY,
                left: at,
                right: at,
                value: self.values[(link & !LEAF) as usize],
            });
            return 0;
        }
        let node = self.nodes[link as usize];
        self.steps.push(Step {
            feature: node.feature,
            threshold: node.threshold,
            left: 0,
            right: 0,
            value: 0.0,
        });
        let left = self.steps.len() as u32;
        let left_depth = self.lay_out_link(node.left);
        let right = self.steps.len() as u32;
        let right_depth = self.lay_out_link(node.right);
        let step = &mut self.steps[at as usize];
        step.left = left;
        step.right = right;
        1 + left_depth.max(right_depth)
    }

    fn clear(&mut self) {
        self.base = 0.0;
        self.roots.clear();
        self.nodes.clear();
        self.values.clear();
        self.steps.clear();
        self.step_roots.clear();
    }
}

/// One histogram cell: the gradient sum and row count of a bin.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    gradient: f64,
    count: u32,
}

/// The best split found for a leaf.
#[derive(Clone, Copy, Debug, Default)]
struct Split {
    gain: f64,
    feature: u32,
    bin: u8,
}

/// A leaf being grown: its rows are `order[begin..end]`.
#[derive(Clone, Copy, Debug, Default)]
struct Leaf {
    begin: usize,
    end: usize,
    gradient: f64,
    /// Splits from the root to this leaf.
    depth: u32,
    /// Where the link to this leaf lives: a tree root or a node's child.
    parent: Parent,
    best: Option<Split>,
}

#[derive(Clone, Copy, Debug, Default)]
enum Parent {
    #[default]
    Root,
    Left(u32),
    Right(u32),
}

/// Collects training rows and fits [`Model`]s on them, reusing its buffers
/// from one fit to the next (after the first fit of a given size it
/// allocates nothing).
#[derive(Debug)]
pub struct Trainer {
    params: Params,
    features: usize,
    /// Row-major features.
    rows: Vec<f32>,
    labels: Vec<f32>,
    // Workspace.
    /// Each feature's bin upper bounds, `max_bin` slots a feature.
    bounds: Vec<f32>,
    /// Bins per feature (1: never split).
    bin_counts: Vec<u32>,
    /// Row-major bins.
    bins: Vec<u8>,
    column: Vec<f32>,
    scores: Vec<f64>,
    gradients: Vec<f64>,
    order: Vec<u32>,
    used_features: Vec<u32>,
    tree_features: Vec<u32>,
    /// One histogram per leaf slot: `features × max_bin` cells.
    histograms: Vec<Cell>,
    leaves: Vec<Leaf>,
    rng: u64,
}

impl Trainer {
    /// A trainer for rows of `features` features. `params` must be valid
    /// (the policy's config checks them).
    pub fn new(features: usize, params: Params) -> Self {
        debug_assert!(params.leaves >= 2 && (2..=256).contains(&params.max_bin));
        Self {
            params,
            features,
            rows: Vec::new(),
            labels: Vec::new(),
            bounds: Vec::new(),
            bin_counts: Vec::new(),
            bins: Vec::new(),
            column: Vec::new(),
            scores: Vec::new(),
            gradients: Vec::new(),
            order: Vec::new(),
            used_features: Vec::new(),
            tree_features: Vec::new(),
            histograms: Vec::new(),
            leaves: Vec::new(),
            rng: params.seed ^ 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Makes room for `rows` rows in every per-row buffer, so that collecting
    /// and fitting up to that many allocates nothing.
    pub fn reserve(&mut self, rows: usize) {
        fn room<T>(buffer: &mut Vec<T>, total: usize) {
            buffer.reserve(total.saturating_sub(buffer.len()));
        }
        let cells = rows * self.features;
        room(&mut self.rows, cells);
        room(&mut self.labels, rows);
        room(&mut self.bins, cells);
        room(&mut self.column, rows);
        room(&mut self.scores, rows);
        room(&mut self.gradients, rows);
        room(&mut self.order, rows);
    }

    /// Rows collected since the last fit.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether no row has been collected since the last fit.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Adds a row; `row.len()` must be the trainer's feature count.
    pub fn push(&mut self, row: &[f32], label: f32) {
        debug_assert_eq!(row.len(), self.features);
        self.rows.extend_from_slice(row);
        self.labels.push(label);
    }

    /// Discards the collected rows.
    pub fn clear(&mut self) {
        self.rows.clear();
        self.labels.clear();
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::mix64(self.rng)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Fits `model` (replacing what it held) on the collected rows, then
    /// discards them. With no rows the model is left untrained.
    pub fn fit(&mut self, model: &mut Model) {
        model.clear();
        let n = self.labels.len();
        if n == 0 {
            return;
        }
        self.bin_features();
        let base = self.labels.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64;
        model.base = base;
        self.scores.clear();
        self.scores.resize(n, base);
        self.gradients.clear();
        self.gradients.resize(n, 0.0);
        let cells = self.features * self.params.max_bin as usize;
        self.histograms.clear();
        self.histograms
            .resize(cells * self.params.leaves as usize, Cell::default());
        let wanted = ((self.used_features.len() as f64 * self.params.feature_fraction).round()
            as usize)
            .clamp(1, self.used_features.len().max(1));
        for iteration in 0..self.params.trees {
            if self.params.bagging_freq == 0 {
                if iteration == 0 {
                    self.order.clear();
                    self.order.extend(0..n as u32);
                }
            } else if iteration % self.params.bagging_freq == 0 {
                self.order.clear();
                for row in 0..n as u32 {
                    if self.next_f64() < self.params.bagging_fraction {
                        self.order.push(row);
                    }
                }
            }
            for i in 0..n {
                self.gradients[i] = self.scores[i] - f64::from(self.labels[i]);
            }
            // Partial Fisher-Yates: the first `wanted` of the used features.
            self.tree_features.clear();
            self.tree_features.extend_from_slice(&self.used_features);
            for i in 0..wanted.min(self.tree_features.len()) {
                let j = i + (self.next_u64() % (self.tree_features.len() - i) as u64) as usize;
                self.tree_features.swap(i, j);
            }
            self.tree_features.truncate(wanted);
            self.tree_features.sort_unstable();
            self.grow(model);
            // Score every row (in the bag or not) with the new tree.
            let root = *model.roots.last().expect("grow pushed a root");
            for i in 0..n {
                let mut link = root;
                while link & LEAF == 0 {
                    let node = &model.nodes[link as usize];
                    link = if self.bins[i * self.features + node.feature as usize] <= node.bin {
                        node.left
                    } else {
                        node.right
                    };
                }
                self.scores[i] += model.values[(link & !LEAF) as usize];
            }
        }
        model.lay_out();
        self.clear();
    }

    /// Cuts each feature into bins and bins every row.
    fn bin_features(&mut self) {
        let n = self.labels.len();
        let max_bin = self.params.max_bin as usize;
        self.bounds.clear();
        self.bounds.resize(self.features * max_bin, f32::INFINITY);
        self.bin_counts.clear();
        self.used_features.clear();
        for f in 0..self.features {
            self.column.clear();
            self.column
                .extend((0..n).map(|i| self.rows[i * self.features + f]));
            self.column.sort_unstable_by(f32::total_cmp);
            let bounds = &mut self.bounds[f * max_bin..(f + 1) * max_bin];
            let count = cut(&self.column, bounds);
            self.bin_counts.push(count as u32);
            if count > 1 {
                self.used_features.push(f as u32);
            }
        }
        self.bins.clear();
        self.bins.resize(n * self.features, 0);
        for f in 0..self.features {
            let count = self.bin_counts[f] as usize;
            if count <= 1 {
                continue;
            }
            let bounds = &self.bounds[f * max_bin..f * max_bin + count];
            for i in 0..n {
                let value = self.rows[i * self.features + f];
                // The first bin whose upper bound is at least the value.
                let bin = bounds.partition_point(|&b| b < value).min(count - 1);
                self.bins[i * self.features + f] = bin as u8;
            }
        }
    }

    /// Grows one tree on the rows in `order` and appends it to `model`.
    fn grow(&mut self, model: &mut Model) {
        let max_bin = self.params.max_bin as usize;
        let cells = self.features * max_bin;
        self.leaves.clear();
        let gradient = self.order.iter().map(|&r| self.gradients[r as usize]).sum();
        self.leaves.push(Leaf {
            begin: 0,
            end: self.order.len(),
            gradient,
            depth: 0,
            parent: Parent::Root,
            best: None,
        });
        model.roots.push(0); // patched below
        let tree = model.roots.len() - 1;
        self.build_histogram(0, 0);
        self.leaves[0].best = self.best_split(0);
        while self.leaves.len() < self.params.leaves as usize {
            // The leaf whose best split gains most (the first among equals).
            let mut chosen: Option<(usize, Split)> = None;
            for (i, leaf) in self.leaves.iter().enumerate() {
                if let Some(split) = leaf.best
                    && chosen.is_none_or(|(_, best)| split.gain > best.gain)
                {
                    chosen = Some((i, split));
                }
            }
            let Some((at, split)) = chosen else { break };
            let leaf = self.leaves[at];
            // Partition the leaf's rows: left (bin ≤ split bin) first.
            let feature = split.feature as usize;
            let rows = &mut self.order[leaf.begin..leaf.end];
            let mut mid = 0;
            for i in 0..rows.len() {
                if self.bins[rows[i] as usize * self.features + feature] <= split.bin {
                    rows.swap(i, mid);
                    mid += 1;
                }
            }
            let mid = leaf.begin + mid;
            let node = model.nodes.len() as u32;
            model.nodes.push(Node {
                feature: split.feature,
                threshold: self.bounds[feature * max_bin + split.bin as usize],
                bin: split.bin,
                left: 0,
                right: 0,
            });
            match leaf.parent {
                Parent::Root => model.roots[tree] = node,
                Parent::Left(p) => model.nodes[p as usize].left = node,
                Parent::Right(p) => model.nodes[p as usize].right = node,
            }
            let left_gradient: f64 = self.order[leaf.begin..mid]
                .iter()
                .map(|&r| self.gradients[r as usize])
                .sum();
            let new = self.leaves.len();
            self.leaves[at] = Leaf {
                begin: leaf.begin,
                end: mid,
                gradient: left_gradient,
                depth: leaf.depth + 1,
                parent: Parent::Left(node),
                best: None,
            };
            self.leaves.push(Leaf {
                begin: mid,
                end: leaf.end,
                gradient: leaf.gradient - left_gradient,
                depth: leaf.depth + 1,
                parent: Parent::Right(node),
                best: None,
            });
            // Slot l holds the parent's histogram: build the smaller child's
            // into slot r, and derive the larger's by subtraction.
            if mid - leaf.begin <= leaf.end - mid {
                // Left is smaller: its histogram into slot `new`, slot `at` becomes
                // parent − left (the right's), then the two swap places.
                self.build_histogram(new, at);
                self.subtract_into(at, new);
                let (low, high) = self.histograms.split_at_mut(new * cells);
                low[at * cells..(at + 1) * cells].swap_with_slice(&mut high[..cells]);
            } else {
                self.build_histogram(new, new);
                self.subtract_into(at, new);
            }
            self.leaves[at].best = self.best_split(at);
            self.leaves[new].best = self.best_split(new);
        }
        // Leaf outputs; link each leaf into the tree.
        let shrink = self.params.learning_rate;
        let lambda = self.params.lambda_l2;
        for i in 0..self.leaves.len() {
            let leaf = self.leaves[i];
            let count = (leaf.end - leaf.begin) as f64 + lambda;
            let count = if count > 0.0 { count } else { 1.0 };
            let value = model.values.len() as u32 | LEAF;
            model.values.push(-shrink * leaf.gradient / count);
            match leaf.parent {
                Parent::Root => model.roots[tree] = value,
                Parent::Left(p) => model.nodes[p as usize].left = value,
                Parent::Right(p) => model.nodes[p as usize].right = value,
            }
        }
    }

    /// Fills histogram slot `slot` from the rows of leaf `leaf`.
    fn build_histogram(&mut self, slot: usize, leaf: usize) {
        let max_bin = self.params.max_bin as usize;
        let cells = self.features * max_bin;
        let leaf = self.leaves[leaf];
        let histogram = &mut self.histograms[slot * cells..(slot + 1) * cells];
        for &f in &self.tree_features {
            let f = f as usize;
            histogram[f * max_bin..(f + 1) * max_bin].fill(Cell::default());
        }
        for &row in &self.order[leaf.begin..leaf.end] {
            let row = row as usize;
            let gradient = self.gradients[row];
            let bins = &self.bins[row * self.features..(row + 1) * self.features];
            for &f in &self.tree_features {
                let f = f as usize;
                let cell = &mut histogram[f * max_bin + bins[f] as usize];
                cell.gradient += gradient;
                cell.count += 1;
            }
        }
    }

    /// `slot parent −= slot child`, over the tree's features.
    fn subtract_into(&mut self, parent: usize, child: usize) {
        let max_bin = self.params.max_bin as usize;
        let cells = self.features * max_bin;
        for &f in &self.tree_features {
            let f = f as usize;
            for b in 0..self.bin_counts[f] as usize {
                let c = self.histograms[child * cells + f * max_bin + b];
                let p = &mut self.histograms[parent * cells + f * max_bin + b];
                p.gradient -= c.gradient;
                p.count -= c.count;
            }
        }
    }

    /// The best split of leaf `slot` over the tree's features, if any gains.
    fn best_split(&self, slot: usize) -> Option<Split> {
        let max_bin = self.params.max_bin as usize;
        let cells = self.features * max_bin;
        let leaf = self.leaves[slot];
        let n = (leaf.end - leaf.begin) as u32;
        let min = self.params.min_data_in_leaf.max(1);
        let max_depth = self.params.max_depth;
        if n < 2 * min || (max_depth > 0 && leaf.depth >= max_depth) {
            return None;
        }
        let lambda = self.params.lambda_l2;
        let total = leaf.gradient;
        let parent_score = total * total / (f64::from(n) + lambda);
        let least = (1e-12 * parent_score.max(1.0)).max(self.params.min_gain_to_split);
        let histogram = &self.histograms[slot * cells..(slot + 1) * cells];
        let mut best: Option<Split> = None;
        for &f in &self.tree_features {
            let f = f as usize;
            let count = self.bin_counts[f] as usize;
            let mut left_gradient = 0.0;
            let mut left_n = 0u32;
            for b in 0..count - 1 {
                let cell = histogram[f * max_bin + b];
                left_gradient += cell.gradient;
                left_n += cell.count;
                if left_n < min {
                    continue;
                }
                let right_n = n - left_n;
                if right_n < min {
                    break;
                }
                let right_gradient = total - left_gradient;
                let gain = left_gradient * left_gradient / (f64::from(left_n) + lambda)
                    + right_gradient * right_gradient / (f64::from(right_n) + lambda)
                    - parent_score;
                if gain > least && best.is_none_or(|s| gain > s.gain) {
                    best = Some(Split {
                        gain,
                        feature: f as u32,
                        bin: b as u8,
                    });
                }
            }
        }
        best
    }
}

/// Cuts sorted `values` into at most `bounds.len()` bins; writes each bin's
/// upper bound (the last `+∞`) and returns the number of bins.
#[allow(clippy::float_cmp)] // equal values must share a bin: exactly equal
fn cut(values: &[f32], bounds: &mut [f32]) -> usize {
    let max_bin = bounds.len();
    if values.is_empty() {
        return 1;
    }
    // Distinct values, counted on the fly.
    let distinct = 1 + values.windows(2).filter(|w| w[0] != w[1]).count();
    let mut bins = 0;
    if distinct <= max_bin {
        let mut i = 0;
        while i < values.len() {
            let v = values[i];
            while i < values.len() && values[i] == v {
                i += 1;
            }
            bounds[bins] = if i < values.len() {
                midpoint(v, values[i])
            } else {
                f32::INFINITY
            };
            bins += 1;
        }
        return bins;
    }
    // Greedy equal-count bins: close a bin once it holds its share of the
    // rows still to place; a value never straddles two bins.
    let mut i = 0;
    while i < values.len() {
        let remaining_bins = max_bin - bins;
        if remaining_bins == 1 {
            bounds[bins] = f32::INFINITY;
            return bins + 1;
        }
        let share = (values.len() - i).div_ceil(remaining_bins);
        let start = i;
        while i < values.len() && (i - start < share || values[i] == values[i - 1]) {
            i += 1;
        }
        bounds[bins] = if i < values.len() {
            midpoint(values[i - 1], values[i])
        } else {
            f32::INFINITY
        };
        bins += 1;
    }
    bins
}

/// A threshold between two neighbouring values that `a` is at or below and
/// `b` above.
fn midpoint(a: f32, b: f32) -> f32 {
    let m = a + (b - a) / 2.0;
    if m < b { m.max(a) } else { a }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // features and predictions are compared exactly on purpose
mod tests {
    use super::*;

    #[test]
    fn cut_gives_a_bin_per_distinct_value_when_few() {
        let mut bounds = [0.0; 8];
        let n = cut(&[0.0, 0.0, 1.0, 3.0, 3.0, 3.0], &mut bounds);
        assert_eq!(n, 3);
        assert_eq!(&bounds[..3], &[0.5, 2.0, f32::INFINITY]);
    }

    #[test]
    fn cut_balances_many_values_and_keeps_equal_values_together() {
        let mut values: Vec<f32> = (0..1000).map(|i| (i / 2) as f32).collect();
        values.extend([7.0; 300]);
        values.sort_unstable_by(f32::total_cmp);
        let mut bounds = [0.0; 16];
        let n = cut(&values, &mut bounds);
        assert!((10..=16).contains(&n), "{n} bins");
        assert_eq!(bounds[n - 1], f32::INFINITY);
        for w in bounds[..n].windows(2) {
            assert!(w[0] < w[1], "bounds increase: {bounds:?}");
        }
        let bin = |v: f32| bounds[..n].partition_point(|&b| b < v);
        let mut counts = vec![0; n];
        for &v in &values {
            counts[bin(v)] += 1;
        }
        // The 302 sevens share one bin; the others hold about 1300/16 each.
        assert!(counts[bin(7.0)] >= 302, "{counts:?}");
        assert!(counts.iter().all(|&c| c <= 400), "{counts:?}");
    }

    fn params(trees: u32) -> Params {
        Params {
            trees,
            feature_fraction: 1.0,
            bagging_fraction: 1.0,
            bagging_freq: 0,
            ..Params::default()
        }
    }

    #[test]
    fn one_tree_learns_a_step() {
        let mut trainer = Trainer::new(
            2,
            Params {
                learning_rate: 1.0,
                ..params(1)
            },
        );
        for i in 0..200 {
            let x = i as f32;
            trainer.push(&[x, 5.0], if x < 100.0 { 1.0 } else { 9.0 });
        }
        let mut model = Model::default();
        trainer.fit(&mut model);
        assert_eq!(model.trees(), 1);
        assert!(trainer.is_empty(), "fit consumes the rows");
        assert!((model.predict(&[10.0, 5.0]) - 1.0).abs() < 1e-9);
        assert!((model.predict(&[150.0, 5.0]) - 9.0).abs() < 1e-9);
        // The threshold sits between the classes' neighbouring values.
        assert!((model.predict(&[99.4, 0.0]) - 1.0).abs() < 1e-9);
        assert!((model.predict(&[99.6, 0.0]) - 9.0).abs() < 1e-9);
    }

    #[test]
    fn depth_and_l2_bound_a_tree_as_xgboost_does() {
        // Labels 0, 1, 2, 3 (20 rows each) over x = 0..4: a free tree has
        // four leaves and fits exactly; depth 1 leaves two, and λ = 1
        // shrinks each output to G / (n + 1).
        let fit = |max_depth, lambda_l2| {
            let mut trainer = Trainer::new(
                1,
                Params {
                    learning_rate: 1.0,
                    min_data_in_leaf: 1,
                    max_depth,
                    lambda_l2,
                    ..params(1)
                },
            );
            for i in 0..80 {
                let x = (i / 20) as f32;
                trainer.push(&[x], x);
            }
            let mut model = Model::default();
            trainer.fit(&mut model);
            [0.0, 1.0, 2.0, 3.0].map(|x| model.predict(&[x]))
        };
        let free = fit(0, 0.0);
        assert!(
            free.iter()
                .zip(0..)
                .all(|(p, x)| (p - f64::from(x)).abs() < 1e-9),
            "{free:?}"
        );
        let shallow = fit(1, 0.0);
        assert!(
            (shallow[0] - 0.5).abs() < 1e-9 && (shallow[1] - 0.5).abs() < 1e-9,
            "{shallow:?}"
        );
        assert!(
            (shallow[2] - 2.5).abs() < 1e-9 && (shallow[3] - 2.5).abs() < 1e-9,
            "{shallow:?}"
        );
        // Base 1.5; the left leaf's 40 rows have G = 40: 1.5 − 40/41.
        let shrunk = fit(1, 1.0);
        assert!((shrunk[0] - (1.5 - 40.0 / 41.0)).abs() < 1e-9, "{shrunk:?}");
        assert!((shrunk[3] - (1.5 + 40.0 / 41.0)).abs() < 1e-9, "{shrunk:?}");
    }

    #[test]
    fn a_split_needs_min_gain_to_split() {
        let fit = |min_gain_to_split| {
            let mut trainer = Trainer::new(
                1,
                Params {
                    learning_rate: 1.0,
                    min_data_in_leaf: 1,
                    min_gain_to_split,
                    ..params(1)
                },
            );
            // Two rows, labels 0 and 0.001: the only split gains 5e-7.
            trainer.push(&[0.0], 0.0);
            trainer.push(&[1.0], 0.001);
            let mut model = Model::default();
            trainer.fit(&mut model);
            model.predict(&[0.0])
        };
        assert!(fit(0.0).abs() < 1e-9);
        assert!((fit(1e-6) - 0.0005).abs() < 1e-9);
    }

    #[test]
    fn boosting_fits_a_smooth_function_and_respects_min_data() {
        let mut trainer = Trainer::new(3, params(32));
        let f = |a: f32, b: f32| (a / 100.0).sin() * 3.0 + b * b / 1000.0;
        let mut state = 1u64;
        let mut next = || {
            state = crate::mix64(state.wrapping_add(1));
            (state % 1000) as f32
        };
        let mut rows = vec![];
        for _ in 0..4000 {
            let (a, b, noise) = (next(), next() / 10.0, next());
            rows.push([a, b, noise]);
            trainer.push(&[a, b, noise], f(a, b));
        }
        let mut model = Model::default();
        trainer.fit(&mut model);
        let mse = rows
            .iter()
            .map(|r| (model.predict(r) - f64::from(f(r[0], r[1]))).powi(2))
            .sum::<f64>()
            / rows.len() as f64;
        let variance = {
            let mean = rows.iter().map(|r| f64::from(f(r[0], r[1]))).sum::<f64>() / 4000.0;
            rows.iter()
                .map(|r| (f64::from(f(r[0], r[1])) - mean).powi(2))
                .sum::<f64>()
                / 4000.0
        };
        // 32 trees at rate 0.1 keep (0.9)^32 ≈ 3 % of the variance.
        assert!(mse < 0.08 * variance, "mse {mse} vs variance {variance}");
        // Every leaf holds at least min_data_in_leaf rows: with 30 rows no
        // split is possible.
        let mut small = Trainer::new(1, params(3));
        for i in 0..30 {
            small.push(&[i as f32], i as f32);
        }
        small.fit(&mut model);
        assert!(model.nodes.is_empty(), "30 rows cannot split into 2 × 20");
        assert!((model.predict(&[0.0]) - 14.5).abs() < 1e-9, "the mean");
    }

    #[test]
    fn sampling_is_seeded_and_refits_reuse_buffers() {
        let fit = |seed| {
            let mut trainer = Trainer::new(
                2,
                Params {
                    seed,
                    ..Params::default()
                },
            );
            let mut model = Model::default();
            for i in 0..3000 {
                let x = (i * 7919 % 3000) as f32;
                trainer.push(&[x, (i % 13) as f32], (x / 300.0).floor());
            }
            trainer.fit(&mut model);
            model
        };
        let (a, b, c) = (fit(1), fit(1), fit(2));
        let p = |m: &Model| {
            (0..50)
                .map(|i| m.predict(&[i as f32 * 60.0, 3.0]))
                .collect::<Vec<_>>()
        };
        assert_eq!(p(&a), p(&b), "same seed, same model");
        assert_ne!(p(&a), p(&c), "bagging and feature sampling follow the seed");
        // The batch walk predicts what the row-by-row walk does.
        let rows: Vec<f32> = (0..100)
            .flat_map(|i| [i as f32 * 31.0, (i % 13) as f32])
            .collect();
        let mut batch = vec![0.0; 100];
        a.predict_many(&rows, 2, &mut batch);
        for (i, &b) in batch.iter().enumerate() {
            assert_eq!(b, a.predict(&rows[2 * i..2 * i + 2]), "row {i}");
        }
        // Predictions are close to the truth regardless.
        for i in 0..50 {
            let truth = (f64::from(i) * 60.0 / 300.0).floor();
            assert!((a.predict(&[i as f32 * 60.0, 3.0]) - truth).abs() < 1.0);
        }
    }
}
