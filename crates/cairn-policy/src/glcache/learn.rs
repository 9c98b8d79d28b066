//! GL-Cache's learning: the training snapshot, fitting the trees, the
//! features of a segment, ranking and the learned selection of segments to
//! merge. The rest of the policy (segments, merging, the `Policy`) is in
//! the parent module.

use super::{
    FEATURES, GlCache, MAX_TRAIN_ROWS, MAX_VALID_ROWS, NIL, NONE, RERANK, UNMERGEABLE, pack,
};

impl GlCache {
    /// The learned selection (`select_segs_learned`).
    pub(super) fn select_learned(&mut self) -> bool {
        self.picked.clear();
        let mut resized = false;
        if self.ranked_size < self.in_use {
            self.ranked_size = self.in_use * 2;
            resized = true;
        }
        if self.ranked_pos as f64 >= self.ranked_len as f64 * self.rank_interval || resized {
            self.rank();
        }
        let mut pos = self.ranked_pos;
        let mut at = self.ranked_at(pos);
        while at == NIL && pos < self.ranked_len {
            pos += 1;
            at = self.ranked_at(pos);
        }
        let first_pick = at;
        self.take_ranked(pos);
        while !self.evictable(at, self.n_merge, self.merge_consecutive) {
            if pos as f64 > self.ranked_len as f64 * 0.8 {
                // libCacheSim dereferences a missing first pick; ours takes
                // the chain's first segment.
                let one = if first_pick == NIL {
                    self.first
                } else {
                    first_pick
                };
                self.picked.push(one);
                self.ranked_pos = RERANK;
                return false;
            }
            pos += 1;
            at = self.ranked_at(pos);
            self.take_ranked(pos);
        }
        self.ranked_pos = pos + 1;
        self.picked.push(at);
        for _ in 1..self.n_merge {
            let prev = &self.segments[at as usize];
            at = if self.merge_consecutive {
                prev.next
            } else {
                prev.next_ranked
            };
            self.picked.push(at);
            let rank = self.segments[at as usize].rank;
            if rank != usize::MAX {
                self.take_ranked(rank);
            }
        }
        true
    }

    /// The features of segment `index` (`prepare_one_row`), in f32 as
    /// libCacheSim computes them.
    pub(super) fn features(&self, index: u32) -> [f32; FEATURES] {
        let s = &self.segments[index as usize];
        [
            self.clock as f32 - s.create_clock as f32,
            s.bytes as f32 / s.units.len() as f32,
            s.hits as f32,
            s.active as f32,
            s.req_rate as f32,
            s.miss_ratio as f32,
        ]
    }

    /// Predicts every segment's utility and ranks them (`rank_segs`).
    pub(super) fn rank(&mut self) {
        self.inference_x.clear();
        let mut at = self.first;
        while at != NIL {
            let row = self.features(at);
            self.inference_x.extend_from_slice(&row);
            at = self.segments[at as usize].next;
        }
        let n = self.in_use;
        self.predictions.clear();
        self.predictions.resize(n, 0.0);
        self.model
            .predict_many(&self.inference_x, FEATURES, &mut self.predictions);
        self.ranked.clear();
        let small = self.in_use < self.n_merge + 1;
        let mut at = self.first;
        for i in 0..n {
            let prediction = self.predictions[i] as f32;
            let s = &mut self.segments[at as usize];
            if prediction > 0.0 {
                s.pred_utility = f64::from(prediction) * 1e6 / s.bytes as f64;
            } else if prediction < 0.0 {
                s.pred_utility = f64::from(prediction) * s.bytes as f64;
            }
            if small {
                s.pred_utility += UNMERGEABLE;
            }
            self.ranked.push(at);
            at = s.next;
        }
        let segments = &self.segments;
        // glibc's qsort is a stable merge sort here.
        self.ranked.sort_by(|&a, &b| {
            let (a, b) = (&segments[a as usize], &segments[b as usize]);
            a.pred_utility
                .total_cmp(&b.pred_utility)
                .then(a.create_clock.cmp(&b.create_clock))
        });
        self.ranked_len = n;
        self.ranked_pos = 0;
        for i in 0..n {
            let next = self.ranked.get(i + 1).copied().unwrap_or(NIL);
            let s = &mut self.segments[self.ranked[i] as usize];
            s.rank = i;
            s.next_ranked = next;
        }
    }

    /// Samples segments for the next training (`snapshot_segs_to_training_data`).
    pub(super) fn snapshot(&mut self) {
        if self.train_x.is_empty() {
            self.train_x.resize(MAX_TRAIN_ROWS * FEATURES, 0.0);
            self.train_y.resize(MAX_TRAIN_ROWS, 0.0);
            self.valid_x.resize(MAX_VALID_ROWS * FEATURES, 0.0);
            self.valid_y.resize(MAX_VALID_ROWS, 0.0);
        }
        let ratio = (self.in_use as f64 / MAX_TRAIN_ROWS as f64).max(1.0);
        let mut credit = 0.0;
        let mut at = self.first;
        for _ in 0..self.in_use.saturating_sub(1) {
            credit += 1.0;
            let next = self.segments[at as usize].next;
            if credit >= ratio && next != NIL {
                self.segments[at as usize].sampled = true;
                credit -= ratio;
                if self.train_rows < MAX_TRAIN_ROWS {
                    let row = self.train_rows;
                    self.train_rows += 1;
                    let features = self.features(at);
                    self.train_x[row * FEATURES..(row + 1) * FEATURES].copy_from_slice(&features);
                    self.train_y[row] = 0.0;
                    let requests = self.requests;
                    let s = &mut self.segments[at as usize];
                    s.row = row;
                    s.sampled_at = requests;
                    s.train_utility = 0.0;
                }
            } else {
                let s = &mut self.segments[at as usize];
                s.sampled = false;
                s.train_utility = 0.0;
            }
            at = next;
        }
    }

    /// Fits a model on the snapshot and forgets the training segments
    /// (`train`, `prepare_training_data`).
    pub(super) fn train(&mut self) {
        let n = self.train_rows;
        let (mut min_y, mut max_y) = (self.train_y[0], self.train_y[0]);
        for &y in &self.train_y[1..n.max(1)] {
            max_y = max_y.max(y);
            min_y = min_y.min(y);
        }
        let (mut trains, mut valids) = (0, 0);
        for i in 0..n {
            let valid = i % 10 == 0 && valids < MAX_VALID_ROWS;
            let x = i * FEATURES;
            if self.train_x[x..x + FEATURES].iter().all(|&v| v == 0.0) {
                continue;
            }
            let y = self.train_y[i];
            let row = self.train_x_row(i);
            let (xs, ys, at) = if valid {
                valids += 1;
                (&mut self.valid_x, &mut self.valid_y, valids - 1)
            } else {
                trains += 1;
                (&mut self.train_x, &mut self.train_y, trains - 1)
            };
            xs[at * FEATURES..(at + 1) * FEATURES].copy_from_slice(&row);
            if max_y - min_y > 0.0 {
                ys[at] = (y - min_y) / (max_y - min_y);
            }
        }
        self.trainer.clear();
        for i in 0..trains {
            self.trainer.push(
                &self.train_x[i * FEATURES..(i + 1) * FEATURES],
                self.train_y[i],
            );
        }
        self.trainer.fit(&mut self.model);
        if valids >= 10 && self.model.is_trained() {
            self.stop_early(valids);
        }
        // Forget the ghosts of the training segments.
        for t in 0..self.training.len() {
            let index = self.training[t];
            for slot in 0..self.segments[index as usize].units.len() {
                let key = self.segments[index as usize].units[slot].key;
                if let Some(entry) = self.map.get(key, &self.locations) {
                    let location = self.locations.get_mut(entry);
                    if location.ghost == pack(index, slot) {
                        location.ghost = NONE;
                        if location.live == NONE {
                            self.forget(entry);
                        }
                    }
                }
            }
            self.release(index);
        }
        self.training.clear();
        self.trainings += 1;
        self.last_train_clock = self.clock;
        self.train_rows = 0;
    }

    pub(super) fn train_x_row(&self, row: usize) -> [f32; FEATURES] {
        let mut out = [0.0; FEATURES];
        out.copy_from_slice(&self.train_x[row * FEATURES..(row + 1) * FEATURES]);
        out
    }

    /// `XGBoost`'s early stopping as libCacheSim sets it: after each round,
    /// the validation RMSE; three rounds in a row within 1 % of the round
    /// before end the training there.
    pub(super) fn stop_early(&mut self, valids: usize) {
        self.valid_pred.clear();
        self.valid_pred.resize(valids, self.model.base());
        let mut last = 0.0;
        let mut stable = 0;
        for tree in 0..self.model.trees() {
            let mut squares = 0.0;
            for i in 0..valids {
                let row = &self.valid_x[i * FEATURES..(i + 1) * FEATURES];
                self.valid_pred[i] += self.model.tree_value(tree, row);
                let error = self.valid_pred[i] - f64::from(self.valid_y[i]);
                squares += error * error;
            }
            let rmse = (squares / valids as f64).sqrt();
            if ((last - rmse) / rmse).abs() < 0.01 {
                stable += 1;
                if stable > 2 {
                    self.model.truncate(tree + 1);
                    return;
                }
            } else {
                stable = 0;
            }
            last = rmse;
        }
    }
}
