//! Object volumes from specs: `backend = "s3"` (the default) and
//! `backend = "rados"` each take their own fields, a field of the other
//! backend or a missing one is an error naming it, and a volume in a RADOS
//! pool opens, serves and reopens from its spec (when the test cluster's
//! `CAIRN_TEST_CEPH_CONF` and `CAIRN_TEST_CEPH_POOL` are set).
#![allow(clippy::unwrap_used)]

mod common;

use common::volume::{open, parse, parse_error};

use cairn_objects::{ObjectStore, RadosStore};
use cairn_store::Device;
use cairn_store::volume::{DeviceSpec, ObjectsBackend, VolumeSpec};

/// A spec of one object volume with `fields`.
fn spec(fields: &str) -> String {
    format!(
        "[[export]]\nname = \"x\"\ndevice = \"o\"\n[device.o]\nkind = \"objects\"\nsize = \"64MiB\"\n{fields}\n"
    )
}

fn objects(spec: &VolumeSpec) -> &cairn_store::volume::ObjectsSpec {
    let DeviceSpec::Objects(o) = &spec.devices["o"] else {
        panic!("not an object volume")
    };
    o
}

#[test]
fn object_volume_fields_belong_to_their_backend() {
    let s3 = parse(&spec(
        "endpoint = \"http://127.0.0.1:7480\"\nbucket = \"b\"",
    ));
    s3.validate().unwrap();
    let o = objects(&s3);
    assert_eq!(o.backend, ObjectsBackend::S3);
    assert_eq!(o.region(), "us-east-1");
    assert_eq!(o.access_key_env(), "AWS_ACCESS_KEY_ID");

    let rados = parse(&spec("backend = \"rados\"\npool = \"cairn\""));
    rados.validate().unwrap();
    let o = objects(&rados);
    assert_eq!(o.backend, ObjectsBackend::Rados);
    assert_eq!(o.ceph_conf(), std::path::Path::new("/etc/ceph/ceph.conf"));
    assert_eq!(o.client(), "admin");
    assert_eq!(o.namespace, None);
    // Written back, a spec reads the same.
    for s in [&s3, &rados] {
        let text = toml::to_string(s).unwrap();
        assert_eq!(&parse(&text), s, "{text}");
    }
    let full = parse(&spec(
        "backend = \"rados\"\npool = \"p\"\nceph_conf = \"/c/ceph.conf\"\nclient = \"cairn\"\nnamespace = \"vm1\"\nprefix = \"v/\"",
    ));
    full.validate().unwrap();
    assert_eq!(objects(&full).client(), "cairn");

    for (fields, field, says) in [
        // S3 (the default) needs its endpoint and bucket ...
        (
            "bucket = \"b\"",
            "endpoint",
            "is required with backend = \"s3\"",
        ),
        (
            "endpoint = \"http://h:1\"",
            "bucket",
            "is required with backend = \"s3\"",
        ),
        (
            "endpoint = \"ftp://h\"\nbucket = \"b\"",
            "endpoint",
            "not an http:// or https:// URL",
        ),
        // ... and takes no RADOS field.
        (
            "endpoint = \"http://h:1\"\nbucket = \"b\"\npool = \"p\"",
            "pool",
            "belongs to backend = \"rados\", and this device's backend is \"s3\" (the default",
        ),
        (
            "endpoint = \"http://h:1\"\nbucket = \"b\"\nceph_conf = \"/etc/ceph/ceph.conf\"",
            "ceph_conf",
            "belongs to backend = \"rados\"",
        ),
        // RADOS needs its pool ...
        (
            "backend = \"rados\"",
            "pool",
            "is required with backend = \"rados\"",
        ),
        ("backend = \"rados\"\npool = \"\"", "pool", "is empty"),
        (
            "backend = \"rados\"\npool = \"p\"\nnamespace = \"\"",
            "namespace",
            "omit it",
        ),
        (
            "backend = \"rados\"\npool = \"p\"\nclient = \"\"",
            "client",
            "omit it",
        ),
        ("backend = \"rados\"\npool = \"p\\u0000q\"", "pool", "NUL"),
        // ... and takes no S3 field.
        (
            "backend = \"rados\"\npool = \"p\"\nendpoint = \"http://h:1\"",
            "endpoint",
            "belongs to backend = \"s3\", and this device's backend is \"rados\"",
        ),
        (
            "backend = \"rados\"\npool = \"p\"\nbucket = \"b\"",
            "bucket",
            "belongs to backend = \"s3\"",
        ),
        (
            "backend = \"rados\"\npool = \"p\"\nregion = \"eu\"",
            "region",
            "belongs to backend = \"s3\"",
        ),
        (
            "backend = \"rados\"\npool = \"p\"\naccess_key_env = \"K\"",
            "access_key_env",
            "belongs to backend = \"s3\"",
        ),
    ] {
        let error = parse(&spec(fields)).validate().unwrap_err();
        assert_eq!(
            error.field,
            format!("device.o.{field}"),
            "{error}\n{fields}"
        );
        assert!(error.message.contains(says), "{error}\n{fields}");
    }
    let unknown = parse_error(&spec("backend = \"swift\""));
    assert!(unknown.contains("swift"), "{unknown}");
}

/// A volume in the test cluster's pool, from a spec like
/// `examples/volumes/objects-rados.toml`: written, stopped cleanly,
/// reopened with its data; a second open while it is held is refused.
#[test]
fn an_object_volume_in_a_rados_pool_opens_serves_and_reopens() {
    let Some(config) = cairn_objects::testing::rados_config(
        "an_object_volume_in_a_rados_pool_opens_serves_and_reopens",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = cairn_objects::testing::unique_prefix("volume-test");
    let text = spec(&format!(
        "backend = \"rados\"\nceph_conf = {:?}\npool = {:?}\nprefix = {prefix:?}\nobject_size = \"1MiB\"\nread_cache = \"4MiB\"",
        config.conf.display().to_string(),
        config.pool
    ));
    let spec = parse(&text);
    spec.validate().unwrap();
    let data: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    {
        let volume = open(&spec, dir.path()).unwrap();
        assert!(
            volume.notes().iter().any(|n| n.contains("rados pool")),
            "{:?}",
            volume.notes()
        );
        let device = volume.exports()[0].device.as_ref();
        device.write_at(&data, 5 << 20).unwrap();
        device.flush().unwrap();
        let Err(held) = open(&spec, tempfile::tempdir().unwrap().path()) else {
            panic!("a second open of a held volume succeeded")
        };
        assert!(held.contains("held by"), "{held}");
        volume.close().unwrap();
    }
    let volume = open(&spec, dir.path()).unwrap();
    let mut back = vec![0u8; data.len()];
    volume.exports()[0]
        .device
        .read_at(&mut back, 5 << 20)
        .unwrap();
    assert!(back == data, "the data after a clean stop");
    volume.close().unwrap();
    drop(volume);
    let store = RadosStore::new(&config).unwrap();
    cairn_objects::testing::remove_all(&store, &prefix).unwrap();
    assert!(store.list(&prefix).unwrap().is_empty());
}
