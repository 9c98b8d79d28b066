//! Development aid: replays an oracleGeneral trace in object-count mode, the way
//! libCacheSim's `cachesim ... -e ignore_obj_size=1` does, and prints the miss
//! ratio per policy and cache size (a fraction of the number of distinct objects).
//!
//! `cargo run --release -p cairn-sim --example replay_objects -- TRACE POLICY[,POLICY..] FRACTION[,FRACTION..]`

use cairn_policy::{Capacity, PolicyConfig};
use cairn_trace::read::oracle_general;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, policies, fractions] = &args[..] else {
        return Err("usage: replay_objects TRACE POLICY[,..] FRACTION[,..]".into());
    };
    let path = std::path::Path::new(path);
    let mut splitter = cairn_trace::Splitter::new(cairn_trace::Unit::Object);
    let mut accesses = Vec::new();
    for request in oracle_general::open(path)? {
        splitter.split(&request?, &mut accesses);
    }
    let distinct = accesses
        .iter()
        .map(|a| a.key)
        .collect::<std::collections::HashSet<_>>()
        .len();
    println!("{} requests, {distinct} distinct objects", accesses.len());
    for name in policies.split(',') {
        for fraction in fractions.split(',') {
            let fraction: f64 = fraction.parse()?;
            let size = (distinct as f64 * fraction) as u64;
            let config = PolicyConfig::default_for(name).ok_or(format!("unknown policy {name}"))?;
            let mut policy = config.build(Capacity::Objects(size))?;
            let mut victims = Vec::new();
            let misses = accesses
                .iter()
                .filter(|a| {
                    victims.clear();
                    !policy.access(a, &mut victims)
                })
                .count();
            println!(
                "{name:10} {fraction:5} size {size:7} miss ratio {:.4}",
                misses as f64 / accesses.len() as f64
            );
        }
    }
    Ok(())
}
