//! [`PolicyConfig`]: every policy by name, with its configuration.

use serde::{Deserialize, Serialize};

use crate::{Capacity, ConfigError, Policy};

/// Any policy, with its configuration; `policy = "name"` selects it in TOML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum PolicyConfig {
    /// First in, first out.
    Fifo(crate::fifo::FifoConfig),
    /// FIFO-Merge: batches of the oldest units, the least used evicted
    /// (Segcache, Yang et al., NSDI'21).
    #[serde(rename = "fifo-merge")]
    FifoMerge(crate::fifomerge::FifoMergeConfig),
    /// Least recently used.
    Lru(crate::lru::LruConfig),
    /// Most recently used (Chou & DeWitt, VLDB'85).
    Mru(crate::mru::MruConfig),
    /// ONS: NEW/OLD regions, LFU with LRU tie-break (papers/000).
    Ons(crate::ons::OnsConfig),
    /// Eviction-cost groups: per-group LRU, cheapest tail goes (papers/004).
    Cost(crate::cost::CostConfig),
    /// Frequency-based replacement (Robinson & Devarakonda 1990).
    Fbr(crate::fbr::FbrConfig),
    /// Dual cache: per-file prefaces in an FPC, the rest in any policy
    /// (papers/001).
    Dual(crate::dual::DualConfig),
    /// Greedy-Dual-Size-Frequency (Cherkasova 1998).
    Gdsf(crate::gdsf::GdsfConfig),
    /// LIRS: low inter-reference recency set (Jiang & Zhang, SIGMETRICS'02).
    Lirs(crate::lirs::LirsConfig),
    /// Belady's offline optimum (needs next-access times).
    Opt(crate::opt::OptConfig),
    /// Sampled size-aware Belady, libCacheSim's `BeladySize` (needs
    /// next-access times).
    Beladysize(crate::beladysize::BeladySizeConfig),
    /// FIFO whose eviction passes over units due back soon (libCacheSim
    /// aa0fc40's `FIFO_Belady`; needs next-access times).
    #[serde(rename = "fifo-belady")]
    FifoBelady(crate::fifobelady::FifoBeladyConfig),
    /// LRU whose eviction passes over units due back soon (libCacheSim
    /// aa0fc40's `LRU_Belady`; needs next-access times).
    #[serde(rename = "lru-belady")]
    LruBelady(crate::lrubelady::LruBeladyConfig),
    /// SIEVE whose hand passes over units due back soon, admitting only
    /// those (libCacheSim aa0fc40's `Sieve_Belady`; needs next-access
    /// times).
    #[serde(rename = "sieve-belady")]
    SieveBelady(crate::sievebelady::SieveBeladyConfig),
    /// W-TinyLFU: LRU window, SLRU main, frequency-sketch admission.
    Tinylfu(crate::tinylfu::TinyLfuConfig),
    /// S3-FIFO: small, main and ghost FIFOs (Yang et al., SOSP'23);
    /// `s3fifo-v0` is a preset with the paper's admission.
    S3fifo(crate::s3fifo::S3FifoConfig),
    /// QD-LP: a probationary FIFO with a ghost before a CLOCK main cache
    /// (Yang et al., HotOS 2023).
    Qdlp(crate::qdlp::QdlpConfig),
    /// Segmented FIFO: S4LRU with FIFO segments (libCacheSim `SFIFO`).
    Sfifo(crate::sfifo::SfifoConfig),
    /// Segmented FIFO with lazy promotion at segment 0's tail (Yang et al.,
    /// HotOS 2023).
    #[serde(rename = "lp-sfifo")]
    LpSfifo(crate::lpsfifo::LpSfifoConfig),
    /// ARC with CLOCK lists (lazy promotion; Yang et al., HotOS 2023).
    #[serde(rename = "lp-arc")]
    LpArc(crate::lparc::LpArcConfig),
    /// 2Q with a CLOCK Am (lazy promotion; Yang et al., HotOS 2023).
    #[serde(rename = "lp-twoq")]
    LpTwoq(crate::lptwoq::LpTwoQConfig),
    /// S3-LRU: S3-FIFO's small FIFO and ghost before an LRU main
    /// (libCacheSim's own).
    S3lru(crate::s3lru::S3LruConfig),
    /// S3-FIFO-D: S3-FIFO whose small FIFO is resized by which queue's
    /// victims come back more (libCacheSim aa0fc40's `S3FIFOd`).
    S3fifod(crate::s3fifod::S3FifodConfig),
    /// Clock2Q+: S3-FIFO's queues, a 1-bit CLOCK main and a correlation
    /// window on the small FIFO (libCacheSim's own).
    Clock2qplus(crate::clock2qplus::Clock2QPlusConfig),
    /// CLOCK / second chance (n-bit counter).
    Clock(crate::clock::ClockConfig),
    /// CLOCK-Pro: hot/cold pages, test periods, three hands (Jiang, Chen &
    /// Zhang, USENIX ATC 2005).
    Clockpro(crate::clockpro::ClockProConfig),
    /// LRU whose hits promote with a probability (libCacheSim's `LRUProb`).
    #[serde(rename = "lru-prob")]
    LruProb(crate::lruprob::LruProbConfig),
    /// DRAM LRU over a flash FIFO with probabilistic flash admission
    /// (libCacheSim's `FlashProb`).
    Flashprob(crate::flashprob::FlashProbConfig),
    /// Least frequently used, least recently used among equals.
    Lfu(crate::lfu::LfuConfig),
    /// LFU with dynamic aging (Arlitt et al. 2000), as libCacheSim.
    Lfuda(crate::lfuda::LfudaConfig),
    /// LRU-K (O'Neil, O'Neil & Weikum, SIGMOD 1993).
    Lruk(crate::lruk::LruKConfig),
    /// Multi-Queue (Zhou, Philbin & Li, USENIX ATC 2001).
    Mq(crate::mq::MqConfig),
    /// SIEVE.
    Sieve(crate::sieve::SieveConfig),
    /// Segmented LRU (n segments; `s4lru` is a preset with four).
    Slru(crate::slru::SlruConfig),
    /// 2Q (A1in FIFO, A1out ghosts, Am LRU).
    Twoq(crate::twoq::TwoQConfig),
    /// Adaptive Replacement Cache.
    Arc(crate::arc::ArcConfig),
    /// LeCaR: LRU and LFU experts weighted by regret (Vietri et al.,
    /// HotStorage'18).
    Lecar(crate::lecar::LecarConfig),
    /// Cacheus: SR-LRU and CR-LFU experts with an adaptive learning rate
    /// (Rodriguez et al., FAST'21).
    Cacheus(crate::cacheus::CacheusConfig),
    /// SR-LRU, Cacheus's scan-resistant expert on its own (Rodriguez et al.,
    /// FAST'21).
    #[serde(rename = "sr-lru")]
    SrLru(crate::srlru::SrLruConfig),
    /// CR-LFU, Cacheus's churn-resistant expert on its own (Rodriguez et
    /// al., FAST'21).
    #[serde(rename = "cr-lfu")]
    CrLfu(crate::crlfu::CrLfuConfig),
    /// SIZE: evict the largest unit (Williams et al., SIGCOMM'96).
    Size(crate::size::SizeConfig),
    /// Random eviction, libCacheSim's sample and generator.
    Random(crate::random::RandomConfig),
    /// Two random draws, the less recently used evicted (power of two
    /// choices; libCacheSim aa0fc40's `RandomTwo`).
    #[serde(rename = "random-two")]
    RandomTwo(crate::randomtwo::RandomTwoConfig),
    /// `n_sample` random draws, the least recently used evicted (sampled
    /// LRU; libCacheSim aa0fc40's `RandomLRU`).
    #[serde(rename = "random-lru")]
    RandomLru(crate::randomlru::RandomLruConfig),
    /// Hyperbolic caching (Blankstein, Sen & Freedman, ATC'17).
    Hyperbolic(crate::hyperbolic::HyperbolicConfig),
    /// LHD, least hit density (Beckmann, Chen & Cidon, NSDI'18).
    Lhd(crate::lhd::LhdConfig),
    /// LRB, Learning Relaxed Belady: gradient-boosted trees predict the
    /// next request (Song, Berger, Li & Lloyd, NSDI'20).
    Lrb(crate::lrb::LrbConfig),
    /// `GLCache`: segments merged by learned group utility (Yang, Mao, Yue &
    /// Rashmi, FAST'23).
    Glcache(crate::glcache::GlCacheConfig),
    /// 3L-Cache: gradient-boosted trees rank candidates from the LRU end and
    /// the newest admissions (Zhou et al., FAST'25).
    #[serde(rename = "3lcache")]
    ThreeLCache(crate::threelcache::ThreeLCacheConfig),
}

impl PolicyConfig {
    /// Every policy name, in the order tables list them.
    pub const NAMES: &'static [&'static str] = &[
        "fifo",
        "fifo-merge",
        "lru",
        "mru",
        "clock",
        "clockpro",
        "lfu",
        "lfuda",
        "lruk",
        "mq",
        "sieve",
        "arc",
        "twoq",
        "slru",
        "s4lru",
        "lirs",
        "lecar",
        "cacheus",
        "sr-lru",
        "cr-lfu",
        "s3fifo",
        "s3fifo-v0",
        "qdlp",
        "sfifo",
        "lp-sfifo",
        "lp-arc",
        "lp-twoq",
        "clock2qplus",
        "s3lru",
        "s3fifod",
        "tinylfu",
        "gdsf",
        "size",
        "hyperbolic",
        "lhd",
        "lrb",
        "glcache",
        "3lcache",
        "random",
        "random-two",
        "random-lru",
        "lru-prob",
        "flashprob",
        "ons",
        "fbr",
        "cost",
        "dual",
        "opt",
        "beladysize",
        "fifo-belady",
        "lru-belady",
        "sieve-belady",
    ];

    /// The default configuration of the policy called `name`.
    pub fn default_for(name: &str) -> Option<Self> {
        Some(match name {
            "fifo" => Self::Fifo(crate::fifo::FifoConfig::default()),
            "fifo-merge" => Self::FifoMerge(crate::fifomerge::FifoMergeConfig::default()),
            "lru" => Self::Lru(crate::lru::LruConfig::default()),
            "mru" => Self::Mru(crate::mru::MruConfig::default()),
            "ons" => Self::Ons(crate::ons::OnsConfig::default()),
            "cost" => Self::Cost(crate::cost::CostConfig::default()),
            "fbr" => Self::Fbr(crate::fbr::FbrConfig::default()),
            "dual" => Self::Dual(crate::dual::DualConfig::default()),
            "gdsf" => Self::Gdsf(crate::gdsf::GdsfConfig::default()),
            "lirs" => Self::Lirs(crate::lirs::LirsConfig::default()),
            "opt" => Self::Opt(crate::opt::OptConfig::default()),
            "beladysize" => Self::Beladysize(crate::beladysize::BeladySizeConfig::default()),
            "fifo-belady" => Self::FifoBelady(crate::fifobelady::FifoBeladyConfig::default()),
            "lru-belady" => Self::LruBelady(crate::lrubelady::LruBeladyConfig::default()),
            "sieve-belady" => Self::SieveBelady(crate::sievebelady::SieveBeladyConfig::default()),
            "tinylfu" => Self::Tinylfu(crate::tinylfu::TinyLfuConfig::default()),
            "s3fifo" => Self::S3fifo(crate::s3fifo::S3FifoConfig::default()),
            "s3fifo-v0" => Self::S3fifo(crate::s3fifo::S3FifoConfig::v0()),
            "qdlp" => Self::Qdlp(crate::qdlp::QdlpConfig::default()),
            "sfifo" => Self::Sfifo(crate::sfifo::SfifoConfig::default()),
            "lp-sfifo" => Self::LpSfifo(crate::lpsfifo::LpSfifoConfig::default()),
            "lp-arc" => Self::LpArc(crate::lparc::LpArcConfig::default()),
            "lp-twoq" => Self::LpTwoq(crate::lptwoq::LpTwoQConfig::default()),
            "s3lru" => Self::S3lru(crate::s3lru::S3LruConfig::default()),
            "s3fifod" => Self::S3fifod(crate::s3fifod::S3FifodConfig::default()),
            "clock2qplus" => Self::Clock2qplus(crate::clock2qplus::Clock2QPlusConfig::default()),
            "clock" => Self::Clock(crate::clock::ClockConfig::default()),
            "clockpro" => Self::Clockpro(crate::clockpro::ClockProConfig::default()),
            "lru-prob" => Self::LruProb(crate::lruprob::LruProbConfig::default()),
            "flashprob" => Self::Flashprob(crate::flashprob::FlashProbConfig::default()),
            "lfu" => Self::Lfu(crate::lfu::LfuConfig::default()),
            "lfuda" => Self::Lfuda(crate::lfuda::LfudaConfig::default()),
            "lruk" => Self::Lruk(crate::lruk::LruKConfig::default()),
            "mq" => Self::Mq(crate::mq::MqConfig::default()),
            "sieve" => Self::Sieve(crate::sieve::SieveConfig::default()),
            "slru" => Self::Slru(crate::slru::SlruConfig::default()),
            "s4lru" => Self::Slru(crate::slru::SlruConfig::s4lru()),
            "twoq" => Self::Twoq(crate::twoq::TwoQConfig::default()),
            "arc" => Self::Arc(crate::arc::ArcConfig::default()),
            "lecar" => Self::Lecar(crate::lecar::LecarConfig::default()),
            "cacheus" => Self::Cacheus(crate::cacheus::CacheusConfig::default()),
            "sr-lru" => Self::SrLru(crate::srlru::SrLruConfig::default()),
            "cr-lfu" => Self::CrLfu(crate::crlfu::CrLfuConfig::default()),
            "size" => Self::Size(crate::size::SizeConfig::default()),
            "random" => Self::Random(crate::random::RandomConfig::default()),
            "random-two" => Self::RandomTwo(crate::randomtwo::RandomTwoConfig::default()),
            "random-lru" => Self::RandomLru(crate::randomlru::RandomLruConfig::default()),
            "hyperbolic" => Self::Hyperbolic(crate::hyperbolic::HyperbolicConfig::default()),
            "lhd" => Self::Lhd(crate::lhd::LhdConfig::default()),
            "lrb" => Self::Lrb(crate::lrb::LrbConfig::default()),
            "glcache" => Self::Glcache(crate::glcache::GlCacheConfig::default()),
            "3lcache" => Self::ThreeLCache(crate::threelcache::ThreeLCacheConfig::default()),
            _ => return None,
        })
    }

    /// Whether the policy reads [`Access::next`](crate::Access::next), the
    /// next-access times only an offline replay knows.
    pub fn needs_next_access(&self) -> bool {
        matches!(
            self,
            Self::Opt(_)
                | Self::Beladysize(_)
                | Self::FifoBelady(_)
                | Self::LruBelady(_)
                | Self::SieveBelady(_)
        )
    }

    /// Builds the policy with the given capacity; `cost` reads its costs
    /// from `table` (shared, updated at run time: [`CostEstimator`](crate::cost::CostEstimator)),
    /// every other policy ignores it.
    pub fn build_with_costs(
        &self,
        capacity: Capacity,
        table: &std::sync::Arc<crate::cost::CostTable>,
    ) -> Result<Box<dyn Policy>, ConfigError> {
        match self {
            Self::Cost(c) => Ok(Box::new(crate::cost::Cost::with_table(
                capacity,
                c,
                std::sync::Arc::clone(table),
            ))),
            other => other.build(capacity),
        }
    }

    /// The cost table for `groups` groups this policy starts from: `cost`'s
    /// configured costs, else every group 1.
    pub fn cost_table(&self, groups: usize) -> Result<crate::cost::CostTable, ConfigError> {
        match self {
            Self::Cost(c) => crate::cost::CostTable::for_config(groups, c),
            _ => Ok(crate::cost::CostTable::new(groups)),
        }
    }

    /// Builds the policy with the given capacity.
    pub fn build(&self, capacity: Capacity) -> Result<Box<dyn Policy>, ConfigError> {
        Ok(match self {
            Self::Fifo(c) => Box::new(crate::fifo::new(capacity, c)?),
            Self::FifoMerge(c) => Box::new(crate::fifomerge::FifoMerge::new(capacity, c)?),
            Self::Lru(c) => Box::new(crate::lru::Lru::new(capacity, c)?),
            Self::Mru(c) => Box::new(crate::mru::Mru::new(capacity, c)?),
            Self::Ons(c) => Box::new(crate::ons::Ons::new(capacity, c)?),
            Self::Cost(c) => Box::new(crate::cost::Cost::new(capacity, c)?),
            Self::Fbr(c) => Box::new(crate::fbr::Fbr::new(capacity, c)?),
            Self::Dual(c) => Box::new(crate::dual::Dual::new(capacity, c)?),
            Self::Gdsf(c) => Box::new(crate::gdsf::Gdsf::new(capacity, c)?),
            Self::Lirs(c) => Box::new(crate::lirs::Lirs::new(capacity, c)?),
            Self::Opt(c) => Box::new(crate::opt::Opt::new(capacity, c)?),
            Self::Beladysize(c) => Box::new(crate::beladysize::BeladySize::new(capacity, c)?),
            Self::FifoBelady(c) => Box::new(crate::fifobelady::new(capacity, c)?),
            Self::LruBelady(c) => Box::new(crate::lrubelady::LruBelady::new(capacity, c)?),
            Self::SieveBelady(c) => Box::new(crate::sievebelady::SieveBelady::new(capacity, c)?),
            Self::Tinylfu(c) => Box::new(crate::tinylfu::TinyLfu::new(capacity, c)?),
            Self::S3fifo(c) => Box::new(crate::s3fifo::S3Fifo::new(capacity, c)?),
            Self::Qdlp(c) => Box::new(crate::qdlp::Qdlp::new(capacity, c)?),
            Self::Sfifo(c) => Box::new(crate::sfifo::Sfifo::new(capacity, c)?),
            Self::LpSfifo(c) => Box::new(crate::lpsfifo::LpSfifo::new(capacity, c)?),
            Self::LpArc(c) => Box::new(crate::lparc::LpArc::new(capacity, c)?),
            Self::LpTwoq(c) => Box::new(crate::lptwoq::LpTwoQ::new(capacity, c)?),
            Self::S3lru(c) => Box::new(crate::s3lru::S3Lru::new(capacity, c)?),
            Self::S3fifod(c) => Box::new(crate::s3fifod::S3Fifod::new(capacity, c)?),
            Self::Clock2qplus(c) => Box::new(crate::clock2qplus::Clock2QPlus::new(capacity, c)?),
            Self::Clock(c) => Box::new(crate::clock::Clock::new(capacity, c)?),
            Self::Clockpro(c) => Box::new(crate::clockpro::ClockPro::new(capacity, c)?),
            Self::LruProb(c) => Box::new(crate::lruprob::LruProb::new(capacity, c)?),
            Self::Flashprob(c) => Box::new(crate::flashprob::FlashProb::new(capacity, c)?),
            Self::Lfu(c) => Box::new(crate::lfu::Lfu::new(capacity, c)?),
            Self::Lfuda(c) => Box::new(crate::lfuda::Lfuda::new(capacity, c)?),
            Self::Lruk(c) => Box::new(crate::lruk::LruK::new(capacity, c)?),
            Self::Mq(c) => Box::new(crate::mq::Mq::new(capacity, c)?),
            Self::Sieve(c) => Box::new(crate::sieve::Sieve::new(capacity, c)?),
            Self::Slru(c) => Box::new(crate::slru::Slru::new(capacity, c)?),
            Self::Twoq(c) => Box::new(crate::twoq::TwoQ::new(capacity, c)?),
            Self::Arc(c) => Box::new(crate::arc::Arc::new(capacity, c)?),
            Self::Lecar(c) => Box::new(crate::lecar::Lecar::new(capacity, c)?),
            Self::Cacheus(c) => Box::new(crate::cacheus::Cacheus::new(capacity, c)?),
            Self::SrLru(c) => Box::new(crate::srlru::SrLru::new(capacity, c)?),
            Self::CrLfu(c) => Box::new(crate::crlfu::CrLfu::new(capacity, c)?),
            Self::Size(c) => Box::new(crate::size::Size::new(capacity, c)?),
            Self::Random(c) => Box::new(crate::random::Random::new(capacity, c)?),
            Self::RandomTwo(c) => Box::new(crate::randomtwo::RandomTwo::new(capacity, c)?),
            Self::RandomLru(c) => Box::new(crate::randomlru::new(capacity, c)?),
            Self::Hyperbolic(c) => Box::new(crate::hyperbolic::Hyperbolic::new(capacity, c)?),
            Self::Lhd(c) => Box::new(crate::lhd::Lhd::new(capacity, c)?),
            Self::Lrb(c) => Box::new(crate::lrb::Lrb::new(capacity, c)?),
            Self::Glcache(c) => Box::new(crate::glcache::GlCache::new(capacity, c)?),
            Self::ThreeLCache(c) => Box::new(crate::threelcache::ThreeLCache::new(capacity, c)?),
        })
    }
}
