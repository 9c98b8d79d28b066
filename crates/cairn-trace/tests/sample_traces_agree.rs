//! The three sample files in `shared/traces/` hold one `CloudPhysics` trace in
//! three formats. Reading them must give the same requests; this guards the
//! unit conversions (seconds vs µs, sectors vs bytes) and how libCacheSim
//! derived its oracleGeneral form (`obj_id` = starting sector, `obj_size` = size of
//! the object's first request, time = whole seconds, 1-based next index).
//! Skips, saying so, when the samples are absent.

use std::path::{Path, PathBuf};

use cairn_trace::read::{self, Format};
use cairn_trace::write::{ObjectKey, OracleGeneralWriter, convert};
use cairn_trace::{NEVER, Request, TraceStats};
use hashbrown::HashMap;

const REQUESTS: usize = 113_872;

/// The sample directory: `$CAIRN_SAMPLE_TRACES`, else the first
/// `shared/traces` beside an ancestor of this crate (the repository sits at
/// `/work/<name>` or in a worktree `/work/wt/<name>`, with `/work/shared`).
fn samples() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = std::env::var_os("CAIRN_SAMPLE_TRACES")
        .map(PathBuf::from)
        .into_iter()
        .chain(manifest.ancestors().map(|a| a.join("shared/traces")));
    for directory in candidates {
        if directory.join("cloudPhysicsIO.vscsi").exists() {
            return Some(directory);
        }
    }
    println!(
        "skipped: no sample traces in a shared/traces above {}",
        manifest.display()
    );
    None
}

fn read_all(path: &Path) -> Vec<Request> {
    let format = Format::detect(path).expect("a known format");
    read::open(path, &format)
        .expect("opens")
        .collect::<cairn_trace::Result<_>>()
        .expect("every record reads")
}

#[test]
fn csv_and_vscsi_hold_the_same_requests() {
    let Some(directory) = samples() else { return };
    let csv = read_all(&directory.join("cloudPhysicsIO.csv"));
    let vscsi = read_all(&directory.join("cloudPhysicsIO.vscsi"));
    assert_eq!(csv.len(), REQUESTS);
    assert_eq!(vscsi.len(), REQUESTS);
    for (index, (c, v)) in csv.iter().zip(&vscsi).enumerate() {
        assert_eq!(
            (c.op, c.offset, c.size),
            (v.op, v.offset, v.size),
            "request {index}"
        );
        // The CSV keeps whole seconds of the VSCSI µs.
        assert_eq!(
            c.time_us,
            v.time_us / 1_000_000 * 1_000_000,
            "request {index}"
        );
    }
    let stats = TraceStats::of(vscsi.iter().copied().map(Ok), 4096).expect("counts");
    assert_eq!(
        (stats.requests, stats.writes, stats.reads),
        (113_872, 66_898, 46_974)
    );
    assert_eq!(stats.objects, 1);
    let span_s = (vscsi[REQUESTS - 1].time_us - vscsi[0].time_us) / 1_000_000;
    assert!(
        (7_100..=7_200).contains(&span_s),
        "about two hours, got {span_s} s"
    );
}

#[test]
fn oracle_general_keys_objects_by_starting_sector() {
    let Some(directory) = samples() else { return };
    let vscsi = read_all(&directory.join("cloudPhysicsIO.vscsi"));
    let oracle = read_all(&directory.join("cloudPhysicsIO.oracleGeneral.bin"));
    assert_eq!(oracle.len(), REQUESTS);
    let mut first_size = HashMap::new();
    for (index, (o, v)) in oracle.iter().zip(&vscsi).enumerate() {
        assert_eq!(
            o.object,
            v.offset / 512,
            "request {index}: obj_id is the lbn"
        );
        let size = *first_size.entry(o.object).or_insert(v.size);
        assert_eq!(o.size, size, "request {index}: obj_size is the first size");
        assert_eq!(
            o.time_us,
            v.time_us / 1_000_000 * 1_000_000,
            "request {index}"
        );
    }
    assert_eq!(first_size.len(), 48_974);
    // next is the index of the next request to the same object.
    let mut last_seen: HashMap<u64, usize> = HashMap::new();
    let mut expected = vec![NEVER; oracle.len()];
    for (index, request) in oracle.iter().enumerate().rev() {
        if let Some(&next) = last_seen.get(&request.object) {
            expected[index] = next as u64;
        }
        last_seen.insert(request.object, index);
    }
    let next: Vec<u64> = oracle.iter().map(|r| r.next).collect();
    assert!(next == expected, "next-access indices disagree");
}

#[test]
fn converting_vscsi_to_oracle_general_matches_libcachesim() {
    let Some(directory) = samples() else { return };
    let path = directory.join("cloudPhysicsIO.vscsi");
    let reader = read::open(&path, &Format::Vscsi).expect("opens");
    let mut bytes = vec![];
    let mut writer = OracleGeneralWriter::new(&mut bytes, Path::new("mem"), ObjectKey::StartSector);
    assert_eq!(
        convert(reader, &mut writer).expect("converts"),
        REQUESTS as u64
    );
    drop(writer);
    let ours: Vec<Request> = read::from_source(
        Box::new(std::io::Cursor::new(bytes)),
        Path::new("mem"),
        &Format::OracleGeneral,
    )
    .expect("reads")
    .collect::<cairn_trace::Result<_>>()
    .expect("every record reads");
    let theirs = read_all(&directory.join("cloudPhysicsIO.oracleGeneral.bin"));
    for (index, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(
            (o.object, o.time_us, o.next),
            (t.object, t.time_us, t.next),
            "{index}"
        );
    }
}
