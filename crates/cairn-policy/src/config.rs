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
    /// Least recently used.
    Lru(crate::lru::LruConfig),
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
    /// W-TinyLFU: LRU window, SLRU main, frequency-sketch admission.
    Tinylfu(crate::tinylfu::TinyLfuConfig),
    /// S3-FIFO: small, main and ghost FIFOs (Yang et al., SOSP'23);
    /// `s3fifo-v0` is a preset with the paper's admission.
    S3fifo(crate::s3fifo::S3FifoConfig),
    /// CLOCK / second chance (n-bit counter).
    Clock(crate::clock::ClockConfig),
    /// CLOCK-Pro: hot/cold pages, test periods, three hands (Jiang, Chen &
    /// Zhang, USENIX ATC 2005).
    Clockpro(crate::clockpro::ClockProConfig),
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
    /// SIZE: evict the largest unit (Williams et al., SIGCOMM'96).
    Size(crate::size::SizeConfig),
    /// Random eviction, libCacheSim's sample and generator.
    Random(crate::random::RandomConfig),
    /// Hyperbolic caching (Blankstein, Sen & Freedman, ATC'17).
    Hyperbolic(crate::hyperbolic::HyperbolicConfig),
    /// LHD, least hit density (Beckmann, Chen & Cidon, NSDI'18).
    Lhd(crate::lhd::LhdConfig),
    /// LRB, Learning Relaxed Belady: gradient-boosted trees predict the
    /// next request (Song, Berger, Li & Lloyd, NSDI'20).
    Lrb(crate::lrb::LrbConfig),
}

impl PolicyConfig {
    /// Every policy name, in the order tables list them.
    pub const NAMES: &'static [&'static str] = &[
        "fifo",
        "lru",
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
        "s3fifo",
        "s3fifo-v0",
        "tinylfu",
        "gdsf",
        "size",
        "hyperbolic",
        "lhd",
        "lrb",
        "random",
        "ons",
        "fbr",
        "cost",
        "dual",
        "opt",
        "beladysize",
    ];

    /// The default configuration of the policy called `name`.
    pub fn default_for(name: &str) -> Option<Self> {
        Some(match name {
            "fifo" => Self::Fifo(crate::fifo::FifoConfig::default()),
            "lru" => Self::Lru(crate::lru::LruConfig::default()),
            "ons" => Self::Ons(crate::ons::OnsConfig::default()),
            "cost" => Self::Cost(crate::cost::CostConfig::default()),
            "fbr" => Self::Fbr(crate::fbr::FbrConfig::default()),
            "dual" => Self::Dual(crate::dual::DualConfig::default()),
            "gdsf" => Self::Gdsf(crate::gdsf::GdsfConfig::default()),
            "lirs" => Self::Lirs(crate::lirs::LirsConfig::default()),
            "opt" => Self::Opt(crate::opt::OptConfig::default()),
            "beladysize" => Self::Beladysize(crate::beladysize::BeladySizeConfig::default()),
            "tinylfu" => Self::Tinylfu(crate::tinylfu::TinyLfuConfig::default()),
            "s3fifo" => Self::S3fifo(crate::s3fifo::S3FifoConfig::default()),
            "s3fifo-v0" => Self::S3fifo(crate::s3fifo::S3FifoConfig::v0()),
            "clock" => Self::Clock(crate::clock::ClockConfig::default()),
            "clockpro" => Self::Clockpro(crate::clockpro::ClockProConfig::default()),
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
            "size" => Self::Size(crate::size::SizeConfig::default()),
            "random" => Self::Random(crate::random::RandomConfig::default()),
            "hyperbolic" => Self::Hyperbolic(crate::hyperbolic::HyperbolicConfig::default()),
            "lhd" => Self::Lhd(crate::lhd::LhdConfig::default()),
            "lrb" => Self::Lrb(crate::lrb::LrbConfig::default()),
            _ => return None,
        })
    }

    /// Whether the policy reads [`Access::next`](crate::Access::next), the
    /// next-access times only an offline replay knows.
    pub fn needs_next_access(&self) -> bool {
        matches!(self, Self::Opt(_) | Self::Beladysize(_))
    }

    /// Builds the policy with the given capacity.
    pub fn build(&self, capacity: Capacity) -> Result<Box<dyn Policy>, ConfigError> {
        Ok(match self {
            Self::Fifo(c) => Box::new(crate::fifo::new(capacity, c)?),
            Self::Lru(c) => Box::new(crate::lru::Lru::new(capacity, c)?),
            Self::Ons(c) => Box::new(crate::ons::Ons::new(capacity, c)?),
            Self::Cost(c) => Box::new(crate::cost::Cost::new(capacity, c)?),
            Self::Fbr(c) => Box::new(crate::fbr::Fbr::new(capacity, c)?),
            Self::Dual(c) => Box::new(crate::dual::Dual::new(capacity, c)?),
            Self::Gdsf(c) => Box::new(crate::gdsf::Gdsf::new(capacity, c)?),
            Self::Lirs(c) => Box::new(crate::lirs::Lirs::new(capacity, c)?),
            Self::Opt(c) => Box::new(crate::opt::Opt::new(capacity, c)?),
            Self::Beladysize(c) => Box::new(crate::beladysize::BeladySize::new(capacity, c)?),
            Self::Tinylfu(c) => Box::new(crate::tinylfu::TinyLfu::new(capacity, c)?),
            Self::S3fifo(c) => Box::new(crate::s3fifo::S3Fifo::new(capacity, c)?),
            Self::Clock(c) => Box::new(crate::clock::Clock::new(capacity, c)?),
            Self::Clockpro(c) => Box::new(crate::clockpro::ClockPro::new(capacity, c)?),
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
            Self::Size(c) => Box::new(crate::size::Size::new(capacity, c)?),
            Self::Random(c) => Box::new(crate::random::Random::new(capacity, c)?),
            Self::Hyperbolic(c) => Box::new(crate::hyperbolic::Hyperbolic::new(capacity, c)?),
            Self::Lhd(c) => Box::new(crate::lhd::Lhd::new(capacity, c)?),
            Self::Lrb(c) => Box::new(crate::lrb::Lrb::new(capacity, c)?),
        })
    }
}
