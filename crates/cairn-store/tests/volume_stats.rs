//! A volume walks each export's stack for statistics and runtime commands
//! (`cairn_store::stats::Layer`): the layers come top first with their
//! names and kinds, their counters move with the I/O, `drop-clean` empties
//! the DRAM cache, `flush` writes the tier's dirty blocks back, `mode`
//! switches the tier, and a command a layer does not have is a clear error
//! naming the layer. Each layer times what passes through it: the export's
//! calls land in the top layer's histograms, a miss's reads in the layer
//! below's too, and the volume's switch stops it.
#![allow(clippy::unwrap_used)]

mod common;

use common::volume::{open, parse};

use cairn_store::stats::{LayerCommand, LayerCommandError, LayerStats, Value};

const SPEC: &str = r#"
    data_dir = "data"
    [[export]]
    name = "disk"
    device = "dram"

    [device.dram]
    kind = "cache"
    over = "tier"
    size = "1MiB"
    block_size = "4KiB"
    readahead = "0B"

    [device.tier]
    kind = "tier"
    mode = "write-back"
    over = "hdd"
    cache = "ssd"
    bucket_size = "64KiB"

    [device.ssd]
    kind = "file"
    path = "ssd.img"
    size = "8MiB"

    [device.hdd]
    kind = "file"
    path = "hdd.img"
    size = "16MiB"
"#;

fn metric(layer: &LayerStats, name: &str) -> u64 {
    match layer.get(name) {
        Some(Value::Integer(v)) => v,
        other => panic!("{}: {name} is {other:?}", layer.name),
    }
}

#[test]
fn stats_walk_the_stack_top_first_and_commands_reach_their_layer() {
    let dir = tempfile::tempdir().unwrap();
    let volume = open(&parse(SPEC), dir.path()).unwrap();
    let device = volume.exports()[0].device.as_ref();
    let layers = volume.stats(0);
    let names: Vec<(&str, &str)> = layers
        .iter()
        .map(|l| (l.name.as_str(), l.kind.as_str()))
        .collect();
    assert_eq!(names, [("dram", "cache"), ("tier", "tier")]);
    assert!(volume.stats(1).is_empty(), "no second export");

    // 16 blocks written (dirty in the write-back tier), read twice: 16
    // misses then 16 hits in the DRAM cache.
    device.write_at(&vec![7u8; 16 * 4096], 0).unwrap();
    let mut back = vec![0u8; 16 * 4096];
    device.read_at(&mut back, 0).unwrap();
    device.read_at(&mut back, 0).unwrap();
    let layers = volume.stats(0);
    assert_eq!(metric(&layers[0], "misses"), 16);
    assert_eq!(metric(&layers[0], "hits"), 16);
    assert_eq!(metric(&layers[0], "resident_blocks"), 16);
    assert_eq!(layers[0].get("hit_ratio"), Some(Value::Real(0.5)));
    assert!(!layers[0].groups.is_empty(), "cost groups");
    assert!(metric(&layers[1], "dirty_blocks") > 0, "{:?}", layers[1]);
    assert_eq!(metric(&layers[1], "mode_write_back"), 1);

    // drop-clean reaches the DRAM cache (the tier has no such command).
    let done = volume
        .control("disk", None, &LayerCommand::DropClean)
        .unwrap();
    assert_eq!(done, ["dram: dropped 16 cached blocks (65536 bytes)"]);
    assert_eq!(metric(&volume.stats(0)[0], "resident_blocks"), 0);
    let refused = volume
        .control("disk", Some("tier"), &LayerCommand::DropClean)
        .unwrap_err();
    assert!(
        matches!(refused, LayerCommandError::NotSupported { .. })
            && refused
                .to_string()
                .contains("drop-clean is not supported by this layer (tier)"),
        "{refused}"
    );

    // flush writes the tier's dirty blocks back, then flushes the export.
    let done = volume.control("disk", None, &LayerCommand::Flush).unwrap();
    assert!(
        done.iter().any(|l| l.starts_with("tier: wrote back")),
        "{done:?}"
    );
    assert_eq!(done.last().unwrap(), "export \"disk\": flushed");
    assert_eq!(metric(&volume.stats(0)[1], "dirty_blocks"), 0);

    // mode goes to the tier; the DRAM cache has none.
    let mode = LayerCommand::Mode {
        mode: "write-around".into(),
    };
    let done = volume.control("disk", None, &mode).unwrap();
    assert_eq!(done, ["tier: mode write-around (was write-back)"]);
    assert_eq!(metric(&volume.stats(0)[1], "mode_write_around"), 1);
    let refused = volume.control("disk", Some("dram"), &mode).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("not supported by this layer (cache)"),
        "{refused}"
    );
    let bad = LayerCommand::Mode {
        mode: "sideways".into(),
    };
    let refused = volume.control("disk", Some("tier"), &bad).unwrap_err();
    assert!(
        refused.to_string().contains("unknown mode \"sideways\""),
        "{refused}"
    );

    // Unknown names say what there is.
    let refused = volume
        .control("nope", None, &LayerCommand::Flush)
        .unwrap_err();
    assert_eq!(refused.to_string(), "no export \"nope\" (exports: disk)");
    let refused = volume
        .control("disk", Some("ssd"), &LayerCommand::Flush)
        .unwrap_err();
    assert!(
        refused.to_string().contains("its layers: dram, tier"),
        "{refused}"
    );
    assert_eq!(back, vec![7u8; 16 * 4096]);
    volume.close().unwrap();
}

#[test]
fn each_layer_times_what_passes_through_it_until_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let volume = open(&parse(SPEC), dir.path()).unwrap();
    assert!(volume.layer_timing(), "on from the start");
    let device = volume.exports()[0].device.as_ref();
    device.write_at(&vec![7u8; 16 * 4096], 0).unwrap();
    let mut back = vec![0u8; 16 * 4096];
    device.read_at(&mut back, 0).unwrap();
    device.read_at(&mut back, 0).unwrap();
    device.flush().unwrap();
    let layers = volume.stats(0);
    let (dram, tier) = (&layers[0].latency, &layers[1].latency);
    // The export's calls, each timed once by the top layer.
    assert_eq!(
        (dram.write.count, dram.read.count, dram.flush.count),
        (1, 2, 1)
    );
    // The first read missed: the cache read the tier; the second hit.
    assert!(tier.read.count >= 1, "{tier:?}");
    assert!(tier.write.count >= 1 && tier.flush.count >= 1, "{tier:?}");
    for l in [&dram.read, &dram.write, &tier.read] {
        assert!(
            0 < l.p50_ns && l.p50_ns <= l.p99_ns && l.p999_ns <= l.max_ns,
            "{l:?}"
        );
        assert_eq!(l.buckets.iter().map(|b| b.count).sum::<u64>(), l.count);
    }
    // A miss's time includes the tier's read under it.
    assert!(dram.read.max_ns >= tier.read.max_ns, "{dram:?} {tier:?}");

    volume.set_layer_timing(false);
    device.read_at(&mut back, 0).unwrap();
    device.write_at(&back, 0).unwrap();
    assert_eq!(
        volume.stats(0)[0].latency,
        layers[0].latency,
        "off: not timed"
    );
    volume.set_layer_timing(true);
    device.read_at(&mut back, 0).unwrap();
    assert_eq!(volume.stats(0)[0].latency.read.count, 3);
    volume.close().unwrap();
}

#[test]
fn a_stack_without_a_cache_refuses_drop_clean_by_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    let spec = parse(
        r#"
        data_dir = "data"
        [[export]]
        name = "m"
        device = "m"
        [device.m]
        kind = "memory"
        size = "1MiB"
        "#,
    );
    let volume = open(&spec, dir.path()).unwrap();
    assert!(volume.stats(0).is_empty());
    let refused = volume
        .control("m", None, &LayerCommand::DropClean)
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "drop-clean is not supported by any layer of export \"m\": its stack has no cache or log layer"
    );
    assert_eq!(
        volume.control("m", None, &LayerCommand::Flush).unwrap(),
        ["export \"m\": flushed"]
    );
}
